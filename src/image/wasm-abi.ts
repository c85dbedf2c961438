/**
 * The kernel ABI of `wasm` images (DESIGN section 4), shared by the build tool that produces
 * images and the host device that runs them. Change both sides together.
 */

export const WASM_TRIPLE = 'wasm32-unknown-offload';

/** Module and field names of the device library's imports (see assembly/device.ts). */
export const DEVICE_IMPORT_MODULE = 'offload';
export const DEVICE_IMPORTS = [
  'team_id',
  'num_teams',
  'thread_id',
  'num_threads',
  'print',
  'barrier',
  'team_memory',
  'host_call',
  'out_of_bounds',
] as const;

/** The device library's call to the program (hostCall): a kernel that imports it never runs inline. */
export const HOST_CALL_IMPORT = 'host_call';

/**
 * A kernel that imports `offload.barrier` is built with binaryen's asyncify, instrumenting only
 * what can reach that import: the host device runs a team's threads in turn on one thread and
 * switches between them at barriers (src/plugins/host/team-threads.ts).
 */
export const BARRIER_IMPORT = 'barrier';
/** What asyncify adds to such a module: the exports the host device drives it with. */
export const ASYNCIFY_EXPORTS = [
  'asyncify_start_unwind',
  'asyncify_stop_unwind',
  'asyncify_start_rewind',
  'asyncify_stop_rewind',
  'asyncify_get_state',
] as const;

/**
 * Imports from `env` a device provides: the shared memory, AssemblyScript's `abort` (turned
 * into KERNEL_TRAP with the message), `seed` (for Math.random) and `trace` (debug printing).
 */
export const ENV_IMPORTS = ['memory', 'abort', 'seed', 'trace'] as const;

/** Largest wasm32 memory, in 64 KiB pages (4 GiB). Images declare it as their import maximum. */
export const MAX_PAGES = 65536;
export const PAGE_BYTES = 65536;

/**
 * Device addresses below STATIC_WINDOW_START are never handed out (address 0 stays null and a
 * stray small pointer traps or hits nothing of value). Images keep their static data (strings
 * of abort messages, constant tables) at a fixed address chosen at build time inside
 * [STATIC_WINDOW_START, STATIC_WINDOW_END); a device reserves that range while the image is
 * loaded and allocates buffers only above STATIC_WINDOW_END. The device reads the range from the
 * module's active data segments, never from the manifest (an image may come from anyone), and
 * refuses an image whose data segments leave the window.
 *
 * Why fixed addresses: AssemblyScript emits absolute addresses for static data and no
 * relocation information, so an image cannot be moved at load time.
 */
export const STATIC_WINDOW_START = 64 * 1024;
export const STATIC_WINDOW_END = 1024 * 1024;
/** Static bases are multiples of this, so distinct small images rarely collide. */
export const STATIC_ALIGN = 4096;
