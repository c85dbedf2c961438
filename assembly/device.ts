/**
 * The offload-ts device library for AssemblyScript kernels. Import it as
 *
 *   import { teamId, numTeams } from "offload-ts/device";
 *
 * The build tool (`buildBundle`) resolves that specifier to this file. Each function is a host
 * import (module "offload", see DEVICE_IMPORTS in src/image/wasm-abi.ts) that the device answers
 * for the invocation currently running, so the values are constant during one kernel call.
 *
 * This file is AssemblyScript, not TypeScript: it is compiled by asc and excluded from the
 * application's tsc; it type-checks under AssemblyScript's own tsconfig (the `offload init` layout),
 * where each decorator carries the usual `// @ts-ignore: decorator`.
 */

/*
 * The grid. A launch runs `teams` teams of `threads` threads each, both given as a number or as
 * [x, y, z]; `d` picks the dimension (0 = x, 1 = y, 2 = z; the default, x, is the whole grid of
 * a one-dimensional launch). A team's linear index runs x fastest, then y, then z.
 */

/** Index of this invocation's team along dimension `d`, in [0, numTeams(d)). */
// @ts-ignore: decorator
@external("offload", "team_id")
export declare function teamId(d?: i32): i32;

/** Number of teams of the current launch along dimension `d` (at least 1). */
// @ts-ignore: decorator
@external("offload", "num_teams")
export declare function numTeams(d?: i32): i32;

/** Index of this invocation's thread inside its team along dimension `d`, in [0, numThreads(d)). */
// @ts-ignore: decorator
@external("offload", "thread_id")
export declare function threadId(d?: i32): i32;

/** Number of threads per team along dimension `d` (at least 1). */
// @ts-ignore: decorator
@external("offload", "num_threads")
export declare function numThreads(d?: i32): i32;

/**
 * Waits until every thread of this team has reached this barrier (as CUDA's __syncthreads and
 * WGSL's workgroupBarrier): what a thread wrote to team memory (or device memory) before it is
 * seen by the team's threads after it. Every thread of a team must reach the same barriers; a
 * thread that has returned counts as arrived. On the host device a team's threads take turns on
 * one worker and switch at barriers, so a kernel that calls barrier() is built with binaryen's
 * asyncify (its code gets bigger and somewhat slower; kernels that never call it are unchanged),
 * and may not recurse on its way to a barrier if its teams have several threads.
 */
// @ts-ignore: decorator
@external("offload", "barrier")
export declare function barrier(): void;

/**
 * The address of this team's team memory: `teamMemoryBytes` of the launch's grid, shared by the
 * team's threads, undefined at the start of the team and gone after it (as CUDA's dynamic
 * shared memory). Use it with load<T>/store<T> like any pointer, within those bytes.
 */
// @ts-ignore: decorator
@external("offload", "team_memory")
export declare function teamMemory(): usize;

/**
 * Prints `message` and up to five numbers (`n` says how many) on the stderr of the program that
 * launched the kernel (or to its `Offload.init({ print })` listener), tagged with the device, the
 * kernel and the team, in order per team, before the launch's event completes; also when the
 * device is behind a proxy. The message is a string literal (a kernel has no heap to build
 * strings in): `print("i, x:", 2, i, x)` prints `i, x: 3, 0.25`. A line keeps 256 characters,
 * a launch 16 KiB of lines (the rest are counted, and the count printed).
 */
// @ts-ignore: decorator
@external("offload", "print")
export declare function print(message: string, n?: i32, a0?: f64, a1?: f64, a2?: f64, a3?: f64, a4?: f64): void;

/**
 * Calls the program's host function `name` (registered with `runtime.hostFunctions.add(name,
 * fn)` by the program that launched the kernel, also when the device is behind a proxy) with
 * the first `n` of up to six numbers, waits for it, and returns its result. Numbers travel as
 * f64: i32 and f64 values exactly, i64 values exactly up to 2^53. A call costs a round trip to
 * the program's thread (a few microseconds on the host device, a network round trip behind a
 * proxy): call it for rare events, not in an inner loop. `name` is a string literal. A function
 * that throws, or a name the program does not know, traps the kernel with the reason.
 * Devices that cannot (a GPU cannot wait for the host in the middle of a dispatch) say so
 * in `device.info.hostCalls`.
 */
// @ts-ignore: decorator
@external("offload", "host_call")
export declare function hostCall(name: string, n?: i32, a0?: f64, a1?: f64, a2?: f64, a3?: f64, a4?: f64, a5?: f64): f64;

/*
 * SIMD: four lanes at a time. offload build enables wasm's 128-bit SIMD, which V8 runs as
 * SSE/AVX instructions: a kernel that computes four f32 (or i32) at once with AssemblyScript's
 * f32x4/i32x4 operations does about four times the work per instruction. These helpers read a
 * kernel's vectors as elements of its arrays: `loadF32x4(x, i)` is x[i], x[i + 1], x[i + 2] and
 * x[i + 3] (any i; no alignment needed). They are inlined: no call out of the kernel. A kernel
 * using SIMD runs on wasm devices (the host device, a proxy's); offload build notes that it
 * stays wasm-only for WebGPU.
 */

/** The four f32 elements of `base` from element `index` on, as lanes 0 to 3. */
// @ts-ignore: decorator
@inline export function loadF32x4(base: usize, index: i32): v128 {
  return v128.load(base + (<usize>index << 2));
}

/** Stores the four f32 lanes of `value` as elements `index` to `index + 3` of `base`. */
// @ts-ignore: decorator
@inline export function storeF32x4(base: usize, index: i32, value: v128): void {
  v128.store(base + (<usize>index << 2), value);
}

/** The four i32 (or u32) elements of `base` from element `index` on, as lanes 0 to 3. */
// @ts-ignore: decorator
@inline export function loadI32x4(base: usize, index: i32): v128 {
  return v128.load(base + (<usize>index << 2));
}

/** Stores the four i32 (or u32) lanes of `value` as elements `index` to `index + 3` of `base`. */
// @ts-ignore: decorator
@inline export function storeI32x4(base: usize, index: i32, value: v128): void {
  v128.store(base + (<usize>index << 2), value);
}

/** The i32 lanes first, first + 1, first + 2, first + 3: the indices of four neighbouring elements. */
// @ts-ignore: decorator
@inline export function laneIndices(first: i32): v128 {
  return i32x4.add(i32x4.splat(first), i32x4(0, 1, 2, 3));
}

/** Whether any lane of `mask` (a comparison's result, e.g. f32x4.le) is true. */
// @ts-ignore: decorator
@inline export function anyLane(mask: v128): bool {
  return v128.any_true(mask);
}

/** `counts` (i32 lanes) plus 1 in each lane where `mask` (a comparison's result) is true. */
// @ts-ignore: decorator
@inline export function countWhere(counts: v128, mask: v128): v128 {
  // A true lane of a mask is all ones: -1 as an i32.
  return i32x4.sub(counts, mask);
}

/** Each lane of `then` where `mask` is true, of `otherwise` where it is false. */
// @ts-ignore: decorator
@inline export function selectLanes(then: v128, otherwise: v128, mask: v128): v128 {
  return v128.bitselect(then, otherwise, mask);
}

/*
 * Typed element access. A kernel parameter declared `ptr<T>` is a device pointer (a byte offset,
 * passed as a Buffer or `buffer.at(offset)` as any pointer) to elements of type T, indexed in
 * elements: `x[i]` reads element i (bytes i * sizeof<T>() from the pointer), `x[i] = v` writes
 * it. The accesses inline to the same load<T>/store<T> as the byte arithmetic written by hand.
 * T is one of i8, u8, i16, u16, i32, u32, i64, u64, f32, f64 (the build refuses others).
 */

/** A device pointer to elements of type T, indexed in elements. */
// @ts-ignore: decorator
@final @unmanaged
export class ptr<T> {
  // For tsc (an editor, `npm run check:kernels`), which knows no operator overloads: x[i] is a T.
  [key: i32]: T;

  /** Element `index`: the T at byte `index * sizeof<T>()` from this pointer. */
  // @ts-ignore: decorator
  @inline @operator("[]")
  get(index: i32): T {
    // @ts-ignore: OFFLOAD_CHECKED is defined by `offload build --checked` (asc --use), unknown to tsc
    if (isDefined(OFFLOAD_CHECKED)) offload_check(changetype<usize>(this), index, alignof<T>());
    return load<T>(changetype<usize>(this) + (<usize>index << alignof<T>()));
  }

  /** Writes `value` to element `index`. */
  // @ts-ignore: decorator
  @inline @operator("[]=")
  set(index: i32, value: T): void {
    // @ts-ignore: OFFLOAD_CHECKED is defined by `offload build --checked` (asc --use), unknown to tsc
    if (isDefined(OFFLOAD_CHECKED)) offload_check(changetype<usize>(this), index, alignof<T>());
    store<T>(changetype<usize>(this) + (<usize>index << alignof<T>()), value);
  }

  /** The address `byteOffset` bytes from this pointer, for load<U>/store<U> where byte addressing is wanted. */
  // @ts-ignore: decorator
  @inline
  at(byteOffset: usize): usize {
    return changetype<usize>(this) + byteOffset;
  }

  /** This pointer's address (a byte offset into device memory), as a usize. */
  // @ts-ignore: decorator
  @inline
  get address(): usize {
    return changetype<usize>(this);
  }
}

/*
 * Per-item kernels. A kernel whose first parameter is declared `i: item` is the body for one item
 * of a 1-, 2- or 3-D range: the program launches it with `{ items: n }` or `{ items: [x, y] }` /
 * `[x, y, z]` and does not pass the item. `i` is the item's x; itemId(d) and itemCount(d) give
 * every dimension. The build wraps the body in the loop the device wants (a contiguous block per
 * team on the host device, one invocation per item on a GPU).
 */

/** The type of a per-item kernel's first parameter: the item's index along x. */
export type item = i32;

// The item being run and the range's sizes, set by the loop the build generates around a
// per-item kernel's body (the optimiser drops what the body never reads).
let itemX: i32 = 0;
let itemY: i32 = 0;
let itemZ: i32 = 0;
let countX: i32 = 1;
let countY: i32 = 1;
let countZ: i32 = 1;

/** Index of this item along dimension `d` (0 = x, the kernel's `i`; 1 = y; 2 = z), in [0, itemCount(d)). */
// @ts-ignore: decorator
@inline
export function itemId(d: i32 = 0): i32 {
  return d == 0 ? itemX : d == 1 ? itemY : d == 2 ? itemZ : 0;
}

/** Number of items of the launch along dimension `d` (1 past the launch's dimensions). */
// @ts-ignore: decorator
@inline
export function itemCount(d: i32 = 0): i32 {
  return d == 0 ? countX : d == 1 ? countY : d == 2 ? countZ : 1;
}

/** @internal Called by the generated loop: the range's sizes. */
// @ts-ignore: decorator
@inline
export function offload_item_counts(x: i32, y: i32, z: i32): void {
  countX = x;
  countY = y;
  countZ = z;
}

/** @internal Called by the generated loop before each item's body. */
// @ts-ignore: decorator
@inline
export function offload_item(x: i32, y: i32, z: i32): void {
  itemX = x;
  itemY = y;
  itemZ = z;
}

/** @internal Called by the generated loop of a 1-D range before each item's body (y and z set once, before the loop). */
// @ts-ignore: decorator
@inline
export function offload_item_x(x: i32): void {
  itemX = x;
}

/*
 * Bounds-checked builds (`offload build --checked`, which defines OFFLOAD_CHECKED): the generated
 * kernel registers each ptr<T> parameter's address and the bytes its buffer has from there (the
 * launch passes them), and every x[i] checks i against them. An access outside fails the launch
 * (KERNEL_TRAP) naming the kernel, the parameter, the index and the buffer's length.
 */

/** Fails the launch: `where` names the kernel and parameter. */
// @ts-ignore: decorator
@external("offload", "out_of_bounds")
declare function offload_out_of_bounds(where: usize, index: i32, elements: i32): void;

// Up to eight typed pointers of the running kernel: address, bytes from it, and its name.
let boundCount: i32 = 0;
let base0: usize = 0; let bytes0: u32 = 0; let name0: usize = 0;
let base1: usize = 0; let bytes1: u32 = 0; let name1: usize = 0;
let base2: usize = 0; let bytes2: u32 = 0; let name2: usize = 0;
let base3: usize = 0; let bytes3: u32 = 0; let name3: usize = 0;
let base4: usize = 0; let bytes4: u32 = 0; let name4: usize = 0;
let base5: usize = 0; let bytes5: u32 = 0; let name5: usize = 0;
let base6: usize = 0; let bytes6: u32 = 0; let name6: usize = 0;
let base7: usize = 0; let bytes7: u32 = 0; let name7: usize = 0;

/** @internal Called by a checked build's generated kernel: typed pointer `k` (0..7) of the launch. */
export function offload_bound(k: i32, base: usize, bytes: i32, name: string): void {
  const at = changetype<usize>(name);
  if (k == 0) { base0 = base; bytes0 = <u32>bytes; name0 = at; }
  else if (k == 1) { base1 = base; bytes1 = <u32>bytes; name1 = at; }
  else if (k == 2) { base2 = base; bytes2 = <u32>bytes; name2 = at; }
  else if (k == 3) { base3 = base; bytes3 = <u32>bytes; name3 = at; }
  else if (k == 4) { base4 = base; bytes4 = <u32>bytes; name4 = at; }
  else if (k == 5) { base5 = base; bytes5 = <u32>bytes; name5 = at; }
  else if (k == 6) { base6 = base; bytes6 = <u32>bytes; name6 = at; }
  else if (k == 7) { base7 = base; bytes7 = <u32>bytes; name7 = at; }
  boundCount = k + 1;
}

/** @internal Element `index` (of 1 << shift bytes) at `base`: within the buffer registered for base, or the launch fails. */
export function offload_check(base: usize, index: i32, shift: i32): void {
  let bytes: u32 = 0;
  let name: usize = 0;
  if (boundCount > 0 && base == base0) { bytes = bytes0; name = name0; }
  else if (boundCount > 1 && base == base1) { bytes = bytes1; name = name1; }
  else if (boundCount > 2 && base == base2) { bytes = bytes2; name = name2; }
  else if (boundCount > 3 && base == base3) { bytes = bytes3; name = name3; }
  else if (boundCount > 4 && base == base4) { bytes = bytes4; name = name4; }
  else if (boundCount > 5 && base == base5) { bytes = bytes5; name = name5; }
  else if (boundCount > 6 && base == base6) { bytes = bytes6; name = name6; }
  else if (boundCount > 7 && base == base7) { bytes = bytes7; name = name7; }
  else return; // an address the kernel made itself (changetype): not a parameter's
  const elements = bytes >> <u32>shift;
  if (<u32>index >= elements) offload_out_of_bounds(name, index, <i32>elements);
}
