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
