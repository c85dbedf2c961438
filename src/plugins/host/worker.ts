/**
 * A host-device worker: runs teams of kernel launches taken from the shared launch ring.
 *
 * It never returns to its event loop while the device lives: it sleeps in a bounded
 * Atomics.wait on the ring's EPOCH and polls its control port synchronously
 * (receiveMessageOnPort) for image loads and unloads, as piscina's workers do.
 */
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import {
  ARG_KIND,
  type ArgKind,
  type ControlMessage,
  H_DONE_COUNT,
  H_EPOCH,
  H_SLEEPERS,
  H_STOP,
  LaunchRing,
  SLOT_COUNT,
  STATE_DONE,
  STATE_READY,
  S_FINISHED,
  S_GEN,
  S_IMAGE,
  S_KERNEL,
  S_NARGS,
  S_STATE,
  S_TEAMS,
  S_THREADS,
  S_TRAPPED,
  type WorkerData,
  type WorkerReply,
} from './launch-ring.js';

const data = workerData as WorkerData;
const ring = new LaunchRing(data.ring);
const { i32, f64, i64 } = ring;
const memory = data.memory;

type KernelFunction = (...args: unknown[]) => unknown;
interface LoadedKernel {
  name: string;
  fn: KernelFunction;
  kinds: ArgKind[];
}
const images = new Map<number, LoadedKernel[]>();

// Grid position of the team being run, read by the device library's imports.
let teamId = 0;
let numTeams = 1;
let numThreads = 1;

/** Thrown by AssemblyScript's abort(): carries the assertion message and source position. */
class KernelAbort extends Error {}

/** Reads an AssemblyScript string (UTF-16, byte length stored just before it) from memory. */
function readString(pointer: number): string {
  if (pointer === 0) return '';
  const heap = new Uint8Array(memory.buffer);
  if (pointer < 4 || pointer > heap.length) return `<string at 0x${pointer.toString(16)}>`;
  const bytes = new DataView(memory.buffer).getUint32(pointer - 4, true);
  const end = Math.min(pointer + bytes, heap.length);
  let text = '';
  for (let p = pointer; p + 1 < end; p += 2) text += String.fromCharCode(heap[p]! | (heap[p + 1]! << 8));
  return text;
}

const imports = {
  env: {
    memory,
    abort(message: number, file: number, line: number, column: number): never {
      const where = file ? ` at ${readString(file)}:${line}:${column}` : '';
      throw new KernelAbort(`abort: ${readString(message) || 'assertion failed'}${where}`);
    },
    seed: () => Date.now() * Math.random(),
    trace(message: number, count: number, ...values: number[]): void {
      process.stderr.write(`offload trace: ${readString(message)} ${values.slice(0, count).join(', ')}\n`);
    },
  },
  offload: {
    team_id: () => teamId,
    num_teams: () => numTeams,
    thread_id: () => 0,
    num_threads: () => numThreads,
  },
};

function handleControl(message: ControlMessage): void {
  let reply: WorkerReply;
  if (message.type === 'load') {
    try {
      const instance = new WebAssembly.Instance(message.module, imports);
      const kernels = message.kernels.map(({ name, kinds }) => {
        const fn = instance.exports[name];
        if (typeof fn !== 'function') throw new Error(`the module exports no function '${name}'`);
        return { name, fn: fn as KernelFunction, kinds };
      });
      images.set(message.image, kernels);
      reply = { type: 'loaded', image: message.image, worker: data.index };
    } catch (error) {
      reply = { type: 'load-failed', image: message.image, worker: data.index, message: String(error) };
    }
  } else {
    images.delete(message.image);
    reply = { type: 'unloaded', image: message.image, worker: data.index };
  }
  parentPort!.postMessage(reply);
}

/** What a worker knows of the launch in one slot, cached per generation. */
interface SlotView {
  gen: number;
  teams: number;
  kernel: LoadedKernel | undefined;
  args: unknown[];
}
const views: SlotView[] = Array.from({ length: SLOT_COUNT }, () => ({ gen: -1, teams: 0, kernel: undefined, args: [] }));

/** Reads slot `slot`'s launch if it is still generation `gen`; false when the ticket is stale. */
function readSlot(slot: number, gen: number): boolean {
  if (Atomics.load(i32, LaunchRing.at(slot, S_GEN)) !== gen) return false;
  const view = views[slot]!;
  view.gen = gen;
  view.teams = i32[LaunchRing.at(slot, S_TEAMS)]!;
  const kernels = images.get(i32[LaunchRing.at(slot, S_IMAGE)]!);
  view.kernel = kernels?.[i32[LaunchRing.at(slot, S_KERNEL)]!];
  const nargs = i32[LaunchRing.at(slot, S_NARGS)]!;
  const kinds = view.kernel?.kinds ?? [];
  view.args = new Array(nargs);
  for (let a = 0; a < nargs; a++) {
    const index = LaunchRing.arg(slot, a);
    view.args[a] = kinds[a] === ARG_KIND.i64 ? i64[index] : f64[index];
  }
  return true;
}

function runTeam(slot: number, view: SlotView, team: number): void {
  const trapped = LaunchRing.at(slot, S_TRAPPED);
  if (Atomics.load(i32, trapped) !== 0) return; // the launch already failed: skip its other teams
  const kernel = view.kernel;
  try {
    if (!kernel) throw new Error('the image of this kernel is not loaded on the worker');
    teamId = team;
    numTeams = view.teams;
    numThreads = i32[LaunchRing.at(slot, S_THREADS)]!;
    kernel.fn(...view.args);
  } catch (error) {
    if (Atomics.compareExchange(i32, trapped, 0, 1) === 0) {
      const reason = error instanceof Error ? error.message : String(error);
      ring.writeErrorText(slot, `kernel '${kernel?.name ?? '?'}' trapped in team ${team}: ${reason}`);
    }
  }
}

/** Takes and runs teams of one slot until none are left. Returns whether it ran any. */
function drainSlot(slot: number): boolean {
  const ticketIndex = LaunchRing.ticket(slot);
  const view = views[slot]!;
  let ran = false;
  for (;;) {
    const ticket = Atomics.add(i64, ticketIndex, 1n);
    const gen = Number(ticket >> 32n);
    const team = Number(ticket & 0xffffffffn);
    if (gen !== view.gen && !readSlot(slot, gen)) return ran;
    if (team >= view.teams) return ran;
    runTeam(slot, view, team);
    ran = true;
    if (Atomics.add(i32, LaunchRing.at(slot, S_FINISHED), 1) + 1 === view.teams) {
      Atomics.store(i32, LaunchRing.at(slot, S_STATE), STATE_DONE);
      Atomics.add(i32, H_DONE_COUNT, 1);
      Atomics.notify(i32, H_DONE_COUNT);
    }
  }
}

function drainControl(): void {
  for (let message = receiveMessageOnPort(data.control); message; message = receiveMessageOnPort(data.control)) {
    handleControl(message.message as ControlMessage);
  }
}

function run(): void {
  for (;;) {
    const epoch = Atomics.load(i32, H_EPOCH);
    drainControl();
    if (Atomics.load(i32, H_STOP) !== 0) return;
    let ran = false;
    for (let slot = 0; slot < SLOT_COUNT; slot++) {
      if (Atomics.load(i32, LaunchRing.at(slot, S_STATE)) === STATE_READY && drainSlot(slot)) ran = true;
    }
    if (!ran) {
      Atomics.add(i32, H_SLEEPERS, 1);
      Atomics.wait(i32, H_EPOCH, epoch, data.waitBoundMs);
      Atomics.sub(i32, H_SLEEPERS, 1);
    }
  }
}

run();
data.control.close();
