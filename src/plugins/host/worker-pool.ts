/**
 * The host device's workers and the main-thread side of the launch ring (see launch-ring.ts).
 *
 * Ownership: the pool owns its workers, the ring and the control ports. `close()` stops the
 * workers and rejects every launch still in flight; the device memory is not the pool's.
 */
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import { errors, type OffloadError } from '../../errors.js';
import { Fifo } from '../fifo.js';
import {
  ARG_KIND,
  type ArgKind,
  type ControlMessage,
  H_DONE_COUNT,
  H_EPOCH,
  H_SLEEPERS,
  H_STOP,
  LaunchRing,
  MAX_ARGS,
  SLOT_COUNT,
  STATE_DONE,
  STATE_FREE,
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

/** How long any single wait may sleep before it looks again (a lost wake-up costs this much). */
const WAIT_BOUND_MS = 20;

/**
 * Before the main thread sleeps on a completion it polls for this long. Waking the main thread
 * through Atomics.waitAsync costs ~200 us on a 2-vCPU VM (an event-loop round trip); a short
 * synchronous poll catches short launches in ~3 us. Long launches waste one poll per wait.
 */
export function spinMicros(env: NodeJS.ProcessEnv = process.env): number {
  const value = env.OFFLOAD_HOST_SPIN_US === undefined ? 50 : Number(env.OFFLOAD_HOST_SPIN_US);
  if (!Number.isFinite(value) || value < 0 || value > 100_000) {
    throw errors.invalidArgument(`OFFLOAD_HOST_SPIN_US must be a number of microseconds from 0 to 100000, not '${env.OFFLOAD_HOST_SPIN_US}'`);
  }
  return value;
}

/** Polls `array[index]` until it differs from `seen` or `micros` pass. True if it changed. */
function pollChanged(array: Int32Array, index: number, seen: number, micros: number): boolean {
  if (micros <= 0) return false;
  const deadline = performance.now() + micros / 1000;
  do {
    if (Atomics.load(array, index) !== seen) return true;
  } while (performance.now() < deadline);
  return false;
}

/** A launch as the pool sees it: everything already checked and lowered to numbers. */
export interface RingLaunch {
  image: number;
  kernel: number;
  teams: number;
  threads: number;
  kinds: readonly ArgKind[];
  /** number for i32/f32/f64/ptr, bigint for i64, in parameter order. */
  values: readonly (number | bigint)[];
}

interface Pending {
  launch: RingLaunch;
  resolve(): void;
  reject(error: OffloadError): void;
}

// Built code runs dist/.../worker.js. Tests run the TypeScript source through tsx, whose loader
// hooks do not reach worker threads on Node 20, so the worker registers them itself first.
const fromSource = import.meta.url.endsWith('.ts');
const workerUrl = new URL(`./worker${fromSource ? '.ts' : '.js'}`, import.meta.url);
const workerScript: string | URL = fromSource
  ? `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(workerUrl.href)}); })`
  : workerUrl;

export class WorkerPool {
  private readonly ring = LaunchRing.create();
  private readonly workers: Worker[] = [];
  private readonly controls: MessagePort[] = [];
  private readonly freeSlots: number[] = [];
  private readonly inFlight = new Map<number, Pending>();
  /** Launches waiting for a free slot, in order. */
  private readonly waitingForSlot = new Fifo<Pending>();
  private readonly replyWaiters = new Map<string, { expected: number; replies: WorkerReply[]; done(r: WorkerReply[]): void }>();
  private generation = 0;
  private pumping = false;
  private lostError: OffloadError | undefined;
  private closed = false;
  /**
   * Workers are unref'd so an idle runtime never holds the process open; this timer is ref'd
   * only while something is outstanding (a launch or a control message), keeping the process
   * alive exactly as long as a pending promise of ours needs it.
   */
  private readonly keepAlive = setInterval(() => {}, 1 << 30);
  private outstanding = 0;

  /** Called once when a worker dies on its own. */
  onLost: (error: OffloadError) => void = () => {};

  constructor(
    readonly size: number,
    memory: WebAssembly.Memory,
    private readonly spinUs: number = spinMicros(),
  ) {
    this.keepAlive.unref();
    for (let slot = SLOT_COUNT - 1; slot >= 0; slot--) this.freeSlots.push(slot);
    for (let index = 0; index < size; index++) {
      const { port1, port2 } = new MessageChannel();
      const data: WorkerData = { index, ring: this.ring.buffer, memory, control: port2, waitBoundMs: WAIT_BOUND_MS };
      const worker = new Worker(workerScript, { eval: fromSource, workerData: data, transferList: [port2], name: `offload-host-${index}` });
      worker.on('message', (reply: WorkerReply) => this.onReply(reply));
      worker.on('error', (error) => this.fail(`host worker ${index} failed: ${error.message}`));
      worker.on('exit', (code) => {
        if (!this.closed) this.fail(`host worker ${index} exited with code ${code}`);
      });
      // Workers must not keep the process alive: an idle runtime that the user forgot to
      // shut down should not hang the program at exit.
      worker.unref();
      this.workers.push(worker);
      this.controls.push(port1);
    }
  }

  get lost(): OffloadError | undefined {
    return this.lostError;
  }

  /** Sends a control message to every worker and resolves with all their replies. */
  broadcast(message: ControlMessage, key: string): Promise<WorkerReply[]> {
    if (this.lostError) return Promise.reject(this.lostError);
    this.hold();
    const replies = new Promise<WorkerReply[]>((done) => {
      this.replyWaiters.set(key, { expected: this.workers.length, replies: [], done });
    }).finally(() => this.release());
    for (const port of this.controls) port.postMessage(message);
    this.wakeWorkers(true);
    return replies;
  }

  private onReply(reply: WorkerReply): void {
    const key = `${reply.type === 'unloaded' ? 'unload' : 'load'}:${reply.image}`;
    const waiter = this.replyWaiters.get(key);
    if (!waiter) return;
    waiter.replies.push(reply);
    if (waiter.replies.length === waiter.expected) {
      this.replyWaiters.delete(key);
      waiter.done(waiter.replies);
    }
  }

  /** Publishes a launch on the ring (or queues it until a slot frees); resolves when its last team has finished. */
  launch(launch: RingLaunch): Promise<void> {
    if (this.lostError) return Promise.reject(this.lostError);
    if (launch.values.length > MAX_ARGS) {
      return Promise.reject(errors.invalidArgument(`a kernel takes at most ${MAX_ARGS} arguments, not ${launch.values.length}`));
    }
    this.hold();
    return new Promise<void>((resolve, reject) => {
      const pending: Pending = {
        launch,
        resolve: () => {
          this.release();
          resolve();
        },
        reject: (error) => {
          this.release();
          reject(error);
        },
      };
      const slot = this.freeSlots.pop();
      if (slot === undefined) this.waitingForSlot.push(pending);
      else this.publish(slot, pending);
      if (!this.pumping) void this.pump();
    });
  }

  private hold(): void {
    if (this.outstanding++ === 0) this.keepAlive.ref();
  }

  private release(): void {
    if (--this.outstanding === 0) this.keepAlive.unref();
  }

  private publish(slot: number, pending: Pending): void {
    const { launch } = pending;
    this.inFlight.set(slot, pending);
    const { i32, f64, i64 } = this.ring;
    const at = (field: number) => LaunchRing.at(slot, field);
    i32[at(S_IMAGE)] = launch.image;
    i32[at(S_KERNEL)] = launch.kernel;
    i32[at(S_TEAMS)] = launch.teams;
    i32[at(S_THREADS)] = launch.threads;
    i32[at(S_NARGS)] = launch.values.length;
    i32[at(S_FINISHED)] = 0;
    i32[at(S_TRAPPED)] = 0;
    for (let a = 0; a < launch.values.length; a++) {
      const value = launch.values[a]!;
      if (launch.kinds[a] === ARG_KIND.i64) i64[LaunchRing.arg(slot, a)] = value as bigint;
      else f64[LaunchRing.arg(slot, a)] = value as number;
    }
    const gen = (this.generation = (this.generation + 1) | 0);
    Atomics.store(i32, at(S_GEN), gen);
    // Resetting the ticket counter with the new generation in one store makes any late ticket
    // of the slot's previous launch recognisably stale.
    Atomics.store(i64, LaunchRing.ticket(slot), BigInt(gen) << 32n);
    Atomics.store(i32, at(S_STATE), STATE_READY);
    this.wakeWorkers(false, launch.teams);
  }

  /**
   * Wakes sleeping workers: all of them for control messages and stop, otherwise no more than
   * the launch has teams, so a one-team launch does not wake a worker that would only find no
   * ticket left and compete for a core with the one that runs it.
   */
  private wakeWorkers(always: boolean, wanted = Infinity): void {
    Atomics.add(this.ring.i32, H_EPOCH, 1);
    if (always || Atomics.load(this.ring.i32, H_SLEEPERS) > 0) Atomics.notify(this.ring.i32, H_EPOCH, wanted);
  }

  /** Collects finished launches until none is in flight. One pump runs at a time. */
  private async pump(): Promise<void> {
    this.pumping = true;
    const { i32 } = this.ring;
    try {
      while (this.inFlight.size > 0 && !this.lostError) {
        const seen = Atomics.load(i32, H_DONE_COUNT);
        if (this.collect() > 0) {
          // Let the continuations of what just completed run first: they often publish the
          // next launches, which are worth more than polling an idle ring.
          await null;
          continue;
        }
        if (pollChanged(i32, H_DONE_COUNT, seen, this.spinUs)) continue;
        const wait = Atomics.waitAsync(i32, H_DONE_COUNT, seen, WAIT_BOUND_MS);
        if (wait.async) await wait.value;
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Settles every launch whose slot is done; returns how many. */
  private collect(): number {
    const { i32 } = this.ring;
    let completed = 0;
    for (const [slot, waiter] of this.inFlight) {
      if (Atomics.load(i32, LaunchRing.at(slot, S_STATE)) !== STATE_DONE) continue;
      const trapped = Atomics.load(i32, LaunchRing.at(slot, S_TRAPPED)) !== 0;
      const message = trapped ? this.ring.errorText(slot) : '';
      Atomics.store(i32, LaunchRing.at(slot, S_STATE), STATE_FREE);
      this.inFlight.delete(slot);
      if (trapped) waiter.reject(errors.kernelTrap(message));
      else waiter.resolve();
      const next = this.waitingForSlot.shift();
      if (next) this.publish(slot, next);
      else this.freeSlots.push(slot);
      completed++;
    }
    return completed;
  }

  private fail(message: string): void {
    if (this.lostError || this.closed) return;
    this.lostError = errors.deviceLost(message);
    this.rejectAll(this.lostError);
    this.onLost(this.lostError);
  }

  private rejectAll(error: OffloadError): void {
    for (const waiter of this.inFlight.values()) waiter.reject(error);
    this.inFlight.clear();
    for (const waiter of this.waitingForSlot.drain()) waiter.reject(error);
    for (const waiter of this.replyWaiters.values()) {
      waiter.done([]);
    }
    this.replyWaiters.clear();
  }

  /** Stops the workers. Launches still in flight reject with `reason`. */
  async close(reason: OffloadError): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.lostError ??= reason;
    Atomics.store(this.ring.i32, H_STOP, 1);
    this.wakeWorkers(true);
    this.rejectAll(this.lostError);
    clearInterval(this.keepAlive);
    await Promise.all(this.workers.map((worker) => worker.terminate()));
    for (const port of this.controls) port.close();
  }
}
