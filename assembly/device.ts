/**
 * The offload-ts device library for AssemblyScript kernels. Import it as
 *
 *   import { teamId, numTeams } from "offload-ts/device";
 *
 * The build tool (`buildBundle`) resolves that specifier to this file. Each function is a host
 * import (module "offload", see DEVICE_IMPORTS in src/image/wasm-abi.ts) that the device answers
 * for the invocation currently running, so the values are constant during one kernel call.
 *
 * This file is AssemblyScript, not TypeScript: it is compiled by asc and excluded from tsc.
 */

/*
 * The grid. A launch runs `teams` teams of `threads` threads each, both given as a number or as
 * [x, y, z]; `d` picks the dimension (0 = x, 1 = y, 2 = z; the default, x, is the whole grid of
 * a one-dimensional launch). A team's linear index runs x fastest, then y, then z.
 */

/** Index of this invocation's team along dimension `d`, in [0, numTeams(d)). */
@external("offload", "team_id")
export declare function teamId(d: i32 = 0): i32;

/** Number of teams of the current launch along dimension `d` (at least 1). */
@external("offload", "num_teams")
export declare function numTeams(d: i32 = 0): i32;

/** Index of this invocation's thread inside its team along dimension `d`, in [0, numThreads(d)). */
@external("offload", "thread_id")
export declare function threadId(d: i32 = 0): i32;

/** Number of threads per team along dimension `d` (at least 1). */
@external("offload", "num_threads")
export declare function numThreads(d: i32 = 0): i32;

/**
 * Waits until every thread of this team has reached this barrier (as CUDA's __syncthreads and
 * WGSL's workgroupBarrier): what a thread wrote to team memory (or device memory) before it is
 * seen by the team's threads after it. Every thread of a team must reach the same barriers; a
 * thread that has returned counts as arrived. On the host device a team's threads take turns on
 * one worker and switch at barriers, so a kernel that calls barrier() is built with binaryen's
 * asyncify (its code gets bigger and somewhat slower; kernels that never call it are unchanged).
 */
@external("offload", "barrier")
export declare function barrier(): void;

/**
 * The address of this team's team memory: `teamMemoryBytes` of the launch's grid, shared by the
 * team's threads, undefined at the start of the team and gone after it (as CUDA's dynamic
 * shared memory). Use it with load<T>/store<T> like any pointer, within those bytes.
 */
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
@external("offload", "print")
export declare function print(message: string, n?: i32, a0?: f64, a1?: f64, a2?: f64, a3?: f64, a4?: f64): void;
