/**
 * A host-device worker: runs teams of kernel launches taken from the shared launch ring, by
 * driving its side of the launch protocol (launch-protocol.ts) and doing what each step asks.
 *
 * It never returns to its event loop while it has launches to run: it sleeps in Atomics.wait on
 * the ring's EPOCH and polls its control port synchronously (receiveMessageOnPort) for image
 * loads and unloads, as piscina's workers do. After an unload it returns to its event loop once,
 * when idle, to collect the instances (and the device memory they hold) that were dropped.
 */
import { writeSync } from 'node:fs';
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { quoted } from '../../errors.js';
import { collectGarbage } from './garbage.js';
import {
  ARG_KIND,
  type ArgKind,
  type ControlMessage,
  H_DONE_COUNT,
  H_EPOCH,
  LaunchRing,
  S_IMAGE,
  S_KERNEL,
  S_NARGS,
  S_THREADS,
  S_TRAPPED,
  type WorkerData,
  type WorkerReply,
} from './launch-ring.js';
import { WorkerAction, WorkerSide } from './launch-protocol.js';

const data = workerData as WorkerData;
const ring = new LaunchRing(data.ring, data.shape);
const { i32, f64, i64 } = ring;
const side = new WorkerSide(ring, data.index);

type KernelFunction = (...args: unknown[]) => unknown;
interface LoadedKernel {
  name: string;
  fn: KernelFunction;
  kinds: ArgKind[];
}
/** Instances by image id; each image is instantiated over its own context's memory. */
const images = new Map<number, LoadedKernel[]>();
/** Set by an unload: collect garbage at the next idle moment. */
let collectPending = false;

// Grid position of the team being run, read by the device library's imports.
let teamId = 0;
let numTeams = 1;
let numThreads = 1;

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
 * The length word is the kernel's to forge (a 2 GiB string would exhaust this worker's heap):
 * at most `max` characters are read, never past the end of memory, and a cut text ends in '...'.
 */
function readString(memory: WebAssembly.Memory, address: number, max: number): string {
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
 * Trace lines of the team running now. A kernel that traces in a loop would flood stderr and,
 * since a worker's stderr goes through the main thread, the main process's memory; so at most
 * MAX_TRACE_LINES are written per team run, then one line with the count of the others. Per
 * team run, since that is what a worker runs from start to end: a bound per launch would need a
 * count shared by all the workers running its teams.
 */
let traceLines = 0;
let traceDropped = 0;

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

/** Ends the trace of a team run: says how many of its lines were dropped. */
function endTrace(kernel: string): void {
  if (traceDropped > 0) {
    writeTrace(
      `${traceDropped} more trace line${traceDropped === 1 ? '' : 's'} of kernel ${quoted(kernel)} (team ${teamId}) dropped; ` +
        `at most ${MAX_TRACE_LINES} are written per team`,
    );
  }
  traceLines = 0;
  traceDropped = 0;
}

function importsFor(memory: WebAssembly.Memory): WebAssembly.Imports {
  return {
    env: {
      memory,
      abort(message: number, file: number, line: number, column: number): never {
        const where = file ? ` at ${readString(memory, file, MAX_FILE_CHARS)}:${line}:${column}` : '';
        throw new KernelAbort(`abort: ${readString(memory, message, MAX_MESSAGE_CHARS) || 'assertion failed'}${where}`);
      },
      seed: () => Date.now() * Math.random(),
      trace(message: number, count: number, ...values: number[]): void {
        if (traceLines >= MAX_TRACE_LINES) {
          traceDropped++;
          return;
        }
        traceLines++;
        // At most 5 values (AssemblyScript's trace takes 5), each a number: the line stays short.
        const shown = values.slice(0, Math.max(0, Math.min(count, 5))).join(', ');
        writeTrace(`${readString(memory, message, MAX_TRACE_CHARS)} ${shown}`);
      },
    },
    offload: {
      team_id: () => teamId,
      num_teams: () => numTeams,
      thread_id: () => 0,
      num_threads: () => numThreads,
    },
  };
}

function handleControl(message: ControlMessage): void {
  let reply: WorkerReply;
  if (message.type === 'load') {
    try {
      const instance = new WebAssembly.Instance(message.module, importsFor(message.memory));
      const kernels = message.kernels.map(({ name, kinds }) => {
        const fn = instance.exports[name];
        if (typeof fn !== 'function') throw new Error(`the module exports no function '${name}'`);
        return { name, fn: fn as KernelFunction, kinds };
      });
      images.set(message.image, kernels);
      reply = { type: 'loaded', image: message.image, worker: data.index };
    } catch (error) {
      // V8's message may quote the module (an export's name): a few hundred characters say enough.
      const text = String(error);
      reply = { type: 'load-failed', image: message.image, worker: data.index, message: text.length > 500 ? `${text.slice(0, 500)}...` : text };
    }
  } else {
    images.delete(message.image);
    collectPending = true;
    reply = { type: 'unloaded', image: message.image, worker: data.index };
  }
  parentPort!.postMessage(reply);
}

function drainControl(): void {
  for (let message = receiveMessageOnPort(data.control); message; message = receiveMessageOnPort(data.control)) {
    handleControl(message.message as ControlMessage);
  }
}

/** What this worker read of a slot's launch; valid for one entry into the slot and one generation. */
interface SlotView {
  entry: number;
  gen: number;
  kernel: LoadedKernel | undefined;
  threads: number;
  args: unknown[];
}
const views: SlotView[] = Array.from({ length: ring.shape.slots }, () => ({ entry: -1, gen: 0, kernel: undefined, threads: 1, args: [] }));

/** Reads the payload of the slot the worker holds a claim in (it cannot change under a claim: I2). */
function readPayload(slot: number, view: SlotView): void {
  view.entry = side.entry;
  view.gen = side.gen;
  view.kernel = images.get(i32[ring.at(slot, S_IMAGE)]!)?.[i32[ring.at(slot, S_KERNEL)]!];
  view.threads = i32[ring.at(slot, S_THREADS)]!;
  const nargs = Math.min(i32[ring.at(slot, S_NARGS)]!, ring.shape.maxArgs);
  const kinds = view.kernel?.kinds ?? [];
  view.args = new Array(nargs);
  for (let a = 0; a < nargs; a++) {
    const index = ring.arg(slot, a);
    view.args[a] = kinds[a] === ARG_KIND.i64 ? i64[index] : f64[index];
  }
}

function runTeam(): void {
  const slot = side.slot;
  const view = views[slot]!;
  if (view.entry !== side.entry || view.gen !== side.gen) readPayload(slot, view);
  const trapped = ring.at(slot, S_TRAPPED);
  if (Atomics.load(i32, trapped) !== 0) return; // the launch already failed: skip its other teams
  const kernel = view.kernel;
  try {
    if (!kernel) throw new Error('the image of this kernel is not loaded on the worker');
    teamId = side.team;
    numTeams = side.teams;
    numThreads = view.threads;
    kernel.fn(...view.args);
  } catch (error) {
    if (Atomics.compareExchange(i32, trapped, 0, 1) === 0) {
      const reason = error instanceof Error ? error.message : String(error);
      ring.writeErrorText(slot, `kernel '${kernel?.name ?? '?'}' trapped in team ${side.team}: ${reason}`);
    }
  }
  endTrace(kernel?.name ?? '?');
}

function run(): void {
  for (;;) {
    switch (side.step()) {
      case WorkerAction.Continue:
        break;
      case WorkerAction.Scan:
        drainControl();
        break;
      case WorkerAction.RunTeam:
        runTeam();
        break;
      case WorkerAction.Sleep:
        if (collectPending) {
          // Idle after an unload: let V8 collect the dropped instances, then go on (a wake-up
          // that came meanwhile is not lost: the next scan reads EPOCH again, I4).
          collectPending = false;
          const hold = setInterval(() => {}, 1 << 30); // keeps the thread alive until then
          void collectGarbage().then(() => {
            clearInterval(hold);
            run();
          });
          return;
        }
        Atomics.wait(i32, H_EPOCH, side.epoch, data.waitBoundMs);
        break;
      case WorkerAction.WakeMain:
        Atomics.notify(i32, H_DONE_COUNT);
        break;
      default:
        // Stop: the pool is closing, or main killed this worker.
        data.control.close();
        return;
    }
  }
}

run();
