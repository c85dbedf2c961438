/**
 * What a kernel instance sees of the host device besides memory: the device library's grid
 * imports and print, and AssemblyScript's `abort`, `trace` and `seed`, with the bounds that keep a hostile
 * kernel from costing its thread's heap. One environment per thread that runs kernels (each
 * worker, and the main thread for inline launches): it holds the grid of the team running there.
 */
import { writeSync } from 'node:fs';
import { quoted } from '../../errors.js';
import { MAX_PRINT_CHARS } from '../interface.js';

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

/**
 * Writes a trace line straight to the process's stderr. Not through process.stderr: a worker's
 * is relayed by the main thread and holds every write after the first until the worker returns
 * to its event loop, which it does not while launches come (the lines would pile up in its heap,
 * and be lost if the process exits first). One write of a short line is not torn by another's.
 */
function writeTrace(line: string): void {
  try {
    writeSync(2, `offload trace: ${line}\n`);
  } catch {
    // Debug output only: a closed or full stderr drops the line.
  }
}

/** The text of a team's trap, the same wherever the team ran. */
export function trapText(kernel: string, team: number, error: unknown): string {
  const reason = error instanceof Error ? error.message : String(error);
  return `kernel '${kernel}' trapped in team ${team}: ${reason}`;
}

export class KernelEnvironment {
  // Grid position of the team being run, read by the device library's imports.
  teamId = 0;
  numTeams = 1;
  numThreads = 1;
  /**
   * Trace lines of the team running now. A kernel that traces in a loop would flood stderr and,
   * on a worker, the main process's memory; so at most MAX_TRACE_LINES are written per team
   * run, then one line with the count of the others. Per team run, since that is what a thread
   * runs from start to end: a bound per launch would need a count shared by every thread.
   */
  private traceLines = 0;
  private traceDropped = 0;
  /** Where the running team's print() lines go (the launch's records on a worker; the launch's listener inline). */
  onPrint: (team: number, text: string) => void = () => {};

  /** The imports of an instance over `memory`. */
  imports(memory: WebAssembly.Memory): WebAssembly.Imports {
    return {
      env: {
        memory,
        abort(message: number, file: number, line: number, column: number): never {
          const where = file ? ` at ${readString(memory, file, MAX_FILE_CHARS)}:${line}:${column}` : '';
          throw new KernelAbort(`abort: ${readString(memory, message, MAX_MESSAGE_CHARS) || 'assertion failed'}${where}`);
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
        team_id: () => this.teamId,
        num_teams: () => this.numTeams,
        thread_id: () => 0,
        num_threads: () => this.numThreads,
      },
    };
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
