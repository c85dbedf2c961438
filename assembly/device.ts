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

/** Index of the team this invocation runs for, in [0, numTeams()). */
// @ts-ignore: decorator
@external("offload", "team_id")
export declare function teamId(): i32;

/** Number of teams of the current launch (at least 1). */
// @ts-ignore: decorator
@external("offload", "num_teams")
export declare function numTeams(): i32;

/** Index of this invocation's thread inside its team, in [0, numThreads()). */
// @ts-ignore: decorator
@external("offload", "thread_id")
export declare function threadId(): i32;

/** Number of threads per team of the current launch (at least 1). */
// @ts-ignore: decorator
@external("offload", "num_threads")
export declare function numThreads(): i32;

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
