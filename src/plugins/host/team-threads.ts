/**
 * The threads of a team on the host device. A team of T threads runs on the one thread that
 * claimed it (a worker, or the calling thread for an inline launch): its threads take turns,
 * and a kernel that calls barrier() switches to the next thread there. Why not T workers at
 * once: a team would then need T free workers together, and two teams each holding some of
 * them at a barrier would wait for each other forever; turns on one thread cannot deadlock,
 * leave the launch ring's protocol as it is (a team is still one claim), and let a team have as
 * many threads as a GPU's (MAX_TEAM_THREADS), not as many as there are workers. The parallelism
 * of the host device is its teams, one per worker at a time.
 *
 * Switching uses binaryen's asyncify, which the build runs over every module that imports
 * `offload.barrier` (compiler-worker.js): at a barrier the thread's wasm stack is unwound into
 * its own asyncify stack in device memory and the next thread runs; once every thread has
 * reached the barrier (or returned), each is rewound, in turn, to the point after it.
 *   T1 A pass runs every thread that has not returned, in order, until it parks at its next
 *      barrier or returns; no thread runs its part after barrier k before every thread has
 *      ended its part before barrier k (pass k+1 starts after pass k ends), which is what a
 *      barrier promises. A thread that has returned counts as arrived (as on GPUs that allow it).
 *   T2 Each thread's stack is its own (stackBytes at `stacks + thread * stackBytes`), and a
 *      thread is rewound only from the stack it was unwound into.
 *   T3 After a trap the instance's asyncify state is reset, so its next team starts clean.
 * Kernels without barrier() are not instrumented: their threads simply run one after another.
 */
import type { Dims } from '../interface.js';

/** Threads a team may have on the host device (as CUDA's 1024 per block). */
export const MAX_TEAM_THREADS = 1024;
/** Team memory a team may have on the host device (`grid.teamMemoryBytes`). */
export const MAX_TEAM_MEMORY_BYTES = 256 * 1024;
/**
 * The most asyncify stack a thread may need: a kernel's need is read from its code at load (the
 * deepest chain of frames from it to barrier(), wasm-code-shape.ts), and one whose need has no
 * bound (it recurses on its way to a barrier) or is larger cannot run teams of several threads.
 * asyncify writes a thread's frames before it checks them against the stack's end, so stacks
 * are sized to what the code can need, never guessed.
 */
export const MAX_STACK_BYTES = 64 * 1024;

/** The stack a thread of a kernel needing `bound` bytes gets: asyncify's 8-byte header, the bound, 16-byte aligned. */
export function stackBytesFor(bound: number): number {
  return Math.ceil((bound + 8) / 16) * 16;
}

/** asyncify_get_state's answers (0 is normal running). */
const UNWINDING = 1;
const REWINDING = 2;

/** The exports asyncify adds to a module (wasm-abi.ts ASYNCIFY_EXPORTS). */
export interface Asyncify {
  asyncify_start_unwind(data: number): void;
  asyncify_stop_unwind(): void;
  asyncify_start_rewind(data: number): void;
  asyncify_stop_rewind(): void;
  asyncify_get_state(): number;
}

/** The instance's asyncify exports, if it was built with barriers. */
export function asyncifyOf(instance: WebAssembly.Instance): Asyncify | undefined {
  const exports = instance.exports as Partial<Record<keyof Asyncify, unknown>>;
  const names: (keyof Asyncify)[] = [
    'asyncify_start_unwind',
    'asyncify_stop_unwind',
    'asyncify_start_rewind',
    'asyncify_stop_rewind',
    'asyncify_get_state',
  ];
  return names.every((name) => typeof exports[name] === 'function') ? (exports as unknown as Asyncify) : undefined;
}

/** Index `linear` along dimension `d` of `dims` (x fastest); 0 for a dimension that does not exist. */
export function along(linear: number, dims: Dims, d: number): number {
  if (d === 0 || d === undefined) return linear % dims[0];
  if (d === 1) return Math.floor(linear / dims[0]) % dims[1];
  if (d === 2) return Math.floor(linear / (dims[0] * dims[1]));
  return 0;
}

/** Size of dimension `d` of `dims`; 1 for a dimension that does not exist. */
export function sizeAlong(dims: Dims, d: number): number {
  return d === 0 || d === undefined ? dims[0] : d === 1 ? dims[1] : d === 2 ? dims[2] : 1;
}

/** A thread's place and stacks, as the device library's imports read them. */
export interface TeamThreadState {
  /** The running thread's linear id. */
  threadId: number;
  numThreads: number;
  /** Where the team's threads' asyncify stacks start (stackBytes each). */
  stacks: number;
  stackBytes: number;
  /** The running kernel's asyncify exports while a team with barriers runs; undefined otherwise. */
  asyncify: Asyncify | undefined;
  /** True while a parked thread is being rewound to its barrier. */
  rewinding: boolean;
  /** True from a barrier's start of an unwind until the scheduler stops it. */
  unwinding: boolean;
}

/**
 * The barrier import: parks the running thread (unwinds it into its stack), or, when the thread
 * is being rewound to this barrier, lets it go on. `words` views the device memory.
 */
export function barrier(state: TeamThreadState, words: Int32Array): void {
  const asyncify = state.asyncify;
  if (asyncify === undefined) return; // one thread, or a module built without asyncify: nothing to wait for
  if (state.rewinding) {
    asyncify.asyncify_stop_rewind();
    state.rewinding = false;
    return;
  }
  const data = state.stacks + state.threadId * state.stackBytes;
  // asyncify's data: where the saved stack grows from, and where it must end.
  words[data >>> 2] = data + 8;
  words[(data >>> 2) + 1] = data + state.stackBytes;
  asyncify.asyncify_start_unwind(data);
  state.unwinding = true;
}

/** A run of the team's threads by T1-T3; `run` calls the kernel once. */
export function runTeamThreads(state: TeamThreadState, asyncify: Asyncify | undefined, run: () => void): void {
  const threads = state.numThreads;
  if (asyncify === undefined || state.stackBytes === 0 || threads === 1) {
    state.asyncify = undefined;
    for (let thread = 0; thread < threads; thread++) {
      state.threadId = thread;
      run();
    }
    return;
  }
  state.asyncify = asyncify;
  const parked = new Uint8Array(threads);
  const returned = new Uint8Array(threads);
  let running = threads;
  try {
    while (running > 0) {
      for (let thread = 0; thread < threads; thread++) {
        if (returned[thread]) continue;
        state.threadId = thread;
        if (parked[thread]) {
          state.rewinding = true;
          asyncify.asyncify_start_rewind(state.stacks + thread * state.stackBytes);
        }
        run();
        if (asyncify.asyncify_get_state() === UNWINDING) {
          asyncify.asyncify_stop_unwind();
          state.unwinding = false;
          parked[thread] = 1;
        } else {
          returned[thread] = 1;
          running--;
        }
      }
    }
  } catch (error) {
    const where = asyncify.asyncify_get_state();
    if (where === UNWINDING) asyncify.asyncify_stop_unwind();
    else if (where === REWINDING) asyncify.asyncify_stop_rewind();
    const overflowed = state.unwinding;
    state.rewinding = false;
    state.unwinding = false;
    // asyncify_stop_unwind traps (`unreachable`) when the saved stack ran past its end. The
    // stacks are sized by the kernel's deepest chain of frames (stackBound), so this is a bug.
    if (overflowed && error instanceof WebAssembly.RuntimeError) {
      throw new Error(
        `${error.message}: thread ${state.threadId}'s saved stack at barrier() outgrew its ${state.stackBytes} bytes (the bound read from its code was wrong: please report this)`,
      );
    }
    throw error;
  } finally {
    state.asyncify = undefined;
  }
}
