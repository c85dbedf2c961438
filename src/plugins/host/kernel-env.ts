/**
 * What a kernel instance sees of the host device besides memory: the device library's grid
 * imports and print, and AssemblyScript's `abort`, `trace` and `seed`, with the bounds that keep a hostile
 * kernel from costing its thread's heap. One environment per thread that runs kernels (each
 * worker, and the main thread for inline launches): it holds the grid of the team running there.
 */
import { quoted } from '../../errors.js';
import { MAX_HOST_CALL_ARGS, MAX_HOST_FUNCTION_NAME, MAX_PRINT_CHARS, type Dims } from '../interface.js';
import { writeTraceLine } from './host-threads.js';
import { along, barrier, sizeAlong, type Asyncify, type TeamThreadState } from './team-threads.js';

/** Thrown by AssemblyScript's abort(): carries the assertion message and source position. */
class KernelAbort extends Error {}

/**
 * Most characters read from a kernel's string: an abort's message and file name, cut so that
 * the trap text still ends with the position within a slot's ERROR_BYTES.
 */
const MAX_MESSAGE_CHARS = 512;
const MAX_FILE_CHARS = 256;
/** Trace lines written per team run; the calls past them are only counted. */
const MAX_TRACE_LINES = 64;
/** Most characters of a trace message. */
const MAX_TRACE_CHARS = 256;

/**
 * Reads an AssemblyScript string (UTF-16, byte length stored just before it) from `memory`.
 * The length word is the kernel's to forge (a 2 GiB string would exhaust the thread's heap):
 * at most `max` characters are read, never past the end of memory, and a cut text ends in '...'.
 */
export function readString(memory: WebAssembly.Memory, address: number, max: number): string {
  const pointer = address >>> 0; // wasm passes an i32: addresses from 2 GiB on arrive negative
  if (pointer === 0) return '';
  const heap = new Uint8Array(memory.buffer);
  if (pointer < 4 || pointer > heap.length) return `<string at 0x${pointer.toString(16)}>`;
  const chars = new DataView(memory.buffer).getUint32(pointer - 4, true) >>> 1;
  const read = Math.min(chars, max, (heap.length - pointer) >>> 1);
  let text = '';
  for (let p = pointer; p < pointer + 2 * read; p += 2) text += String.fromCharCode(heap[p]! | (heap[p + 1]! << 8));
  return read < chars ? `${text}...` : text;
}

/** Writes a trace line to standard error at once (host-threads.ts says how). */
function writeTrace(line: string): void {
  try {
    writeTraceLine(`offload trace: ${line}\n`);
  } catch {
    // Debug output only: a closed or full stderr drops the line.
  }
}

/** The text of a team's trap, the same wherever the team ran. */
export function trapText(kernel: string, team: number, error: unknown): string {
  const reason = error instanceof Error ? error.message : String(error);
  return `kernel '${kernel}' trapped in team ${team}: ${reason}`;
}

/**
 * A launch's grid as a thread that runs its teams sees it: total teams, their x and y sizes,
 * total threads, their x and y sizes (z follows from the totals), then where this thread's
 * scratch region is (team memory of teamBytes, then the threads' asyncify stacks of
 * stackBytes each; team-threads.ts).
 */
export type GridWords = [
  teams: number,
  teamsX: number,
  teamsY: number,
  threads: number,
  threadsX: number,
  threadsY: number,
  scratch: number,
  teamBytes: number,
  stackBytes: number,
];

/** Team memory and stacks start on 16-byte boundaries within a scratch region. */
export function alignScratch(bytes: number): number {
  return Math.ceil(bytes / 16) * 16;
}

export class KernelEnvironment implements TeamThreadState {
  // Grid position of the team and thread being run, read by the device library's imports.
  /** The team's linear id, and the launch's team count and dimensions. */
  teamId = 0;
  numTeams = 1;
  teamDims: Dims = [1, 1, 1];
  threadId = 0;
  numThreads = 1;
  threadDims: Dims = [1, 1, 1];
  /** Address of the running team's team memory. */
  teamMemory = 0;
  // Barrier state (team-threads.ts).
  stacks = 0;
  stackBytes = 0;
  asyncify: Asyncify | undefined = undefined;
  rewinding = false;
  unwinding = false;
  /**
   * Trace lines of the team running now. A kernel that traces in a loop would flood stderr and,
   * on a worker, the main process's memory; so at most MAX_TRACE_LINES are written per team
   * run, then one line with the count of the others. Per team run, since that is what a thread
   * runs from start to end: a bound per launch would need a count shared by every thread.
   */
  private traceLines = 0;
  private traceDropped = 0;
  /** Calls a host function for the running team (a worker's mailbox, host-calls.ts); none inline. */
  onHostCall: (name: string, args: number[]) => number = () => {
    throw new Error('a host call cannot be made from a launch on the calling thread');
  };
  /** Where the running team's print() lines go (the launch's records on a worker; the launch's listener inline). */
  onPrint: (team: number, text: string) => void = () => {};

  /** The imports of an instance over `memory`. */
  imports(memory: WebAssembly.Memory): WebAssembly.Imports {
    // The memory grows as its context allocates: the view is taken again when it has.
    let words = new Int32Array(memory.buffer);
    const wordsNow = (): Int32Array => {
      if (words.byteLength !== memory.buffer.byteLength) words = new Int32Array(memory.buffer);
      return words;
    };
    return {
      env: {
        memory,
        abort(message: number, file: number, line: number, column: number): never {
          const where = file ? ` at ${readString(memory, file, MAX_FILE_CHARS)}:${line}:${column}` : '';
          throw new KernelAbort(
            `abort: ${readString(memory, message, MAX_MESSAGE_CHARS) || 'assertion failed'}${where}`,
          );
        },
        seed: () => Date.now() * Math.random(),
        trace: (message: number, count: number, ...values: number[]): void => {
          if (this.traceLines >= MAX_TRACE_LINES) {
            this.traceDropped++;
            return;
          }
          this.traceLines++;
          // At most 5 values (AssemblyScript's trace takes 5), each a number: the line stays short.
          const shown = values.slice(0, Math.max(0, Math.min(count, 5))).join(', ');
          writeTrace(`${readString(memory, message, MAX_TRACE_CHARS)} ${shown}`);
        },
      },
      offload: {
        print: (message: number, count: number, ...values: number[]): void => {
          // At most 5 numbers, as trace takes: a line's cost is bounded whatever the kernel passes.
          const shown = values.slice(0, Math.max(0, Math.min(count, 5)));
          const text = readString(memory, message, MAX_PRINT_CHARS);
          this.onPrint(this.teamId, shown.length > 0 ? `${text} ${shown.join(', ')}` : text);
        },
        team_id: (d: number) => along(this.teamId, this.teamDims, d),
        num_teams: (d: number) => sizeAlong(this.teamDims, d),
        thread_id: (d: number) => along(this.threadId, this.threadDims, d),
        num_threads: (d: number) => sizeAlong(this.threadDims, d),
        barrier: () => barrier(this, wordsNow()),
        host_call: (name: number, count: number, ...values: number[]): number => {
          const args = values.slice(0, Math.max(0, Math.min(count, MAX_HOST_CALL_ARGS)));
          return this.onHostCall(readString(memory, name, MAX_HOST_FUNCTION_NAME), args);
        },
        team_memory: () => this.teamMemory,
        // A `ptr<T>` access outside its buffer in a bounds-checked build (`offload build --checked`).
        out_of_bounds: (where: number, index: number, elements: number): never => {
          throw new KernelAbort(
            `${readString(memory, where, MAX_MESSAGE_CHARS)}: index ${index} is outside its buffer of ${elements} elements (offload build --checked)`,
          );
        },
      },
    };
  }

  /** Sets the grid of a launch (see GridWords); in place, since a worker does it for every team. */
  setGrid(grid: GridWords): void {
    const [teams, teamsX, teamsY, threads, threadsX, threadsY, scratch, teamBytes, stackBytes] = grid;
    this.numTeams = teams;
    this.teamDims[0] = teamsX;
    this.teamDims[1] = teamsY;
    this.teamDims[2] = teams / (teamsX * teamsY);
    this.numThreads = threads;
    this.threadDims[0] = threadsX;
    this.threadDims[1] = threadsY;
    this.threadDims[2] = threads / (threadsX * threadsY);
    // A one-thread launch may call its kernel directly, setting no thread: it is thread 0, not
    // the last thread of the launch before (which threadId(2) would read back).
    this.threadId = 0;
    this.teamMemory = scratch;
    this.stacks = scratch + alignScratch(teamBytes);
    this.stackBytes = stackBytes;
  }

  /** Ends the trace of a team run: says how many of its lines were dropped. */
  endTrace(kernel: string): void {
    if (this.traceDropped > 0) {
      writeTrace(
        `${this.traceDropped} more trace line${this.traceDropped === 1 ? '' : 's'} of kernel ${quoted(kernel)} (team ${this.teamId}) dropped; ` +
          `at most ${MAX_TRACE_LINES} are written per team`,
      );
    }
    this.traceLines = 0;
    this.traceDropped = 0;
  }
}
