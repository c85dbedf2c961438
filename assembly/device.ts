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

/** Index of the team this invocation runs for, in [0, numTeams()). */
@external("offload", "team_id")
export declare function teamId(): i32;

/** Number of teams of the current launch (at least 1). */
@external("offload", "num_teams")
export declare function numTeams(): i32;

/** Index of this invocation's thread inside its team, in [0, numThreads()). */
@external("offload", "thread_id")
export declare function threadId(): i32;

/** Number of threads per team of the current launch (at least 1). */
@external("offload", "num_threads")
export declare function numThreads(): i32;
