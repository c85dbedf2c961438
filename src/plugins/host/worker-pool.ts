/**
 * The host device's workers, and the main thread's side of the launch protocol
 * (launch-host-side.ts): publishing launches, collecting them, withdrawing those that run past
 * their time limit, and replacing workers that are killed or die, so the device goes on.
 *
 * Ownership: the pool owns its workers, the ring and the control ports. `close()` stops the
 * workers and rejects every launch still in flight. Device memories are not the pool's: each
 * image load names the memory (the context) its instances run over.
 */
import { errors, quoted, type OffloadError } from '../../errors.js';
import { environment, performance } from '../../platform.js';
import type { Environment } from '../../units.js';
import {
  type ArgKind,
  type ControlMessage,
  FULL_RING,
  H_DONE_COUNT,
  H_EPOCH,
  H_STOP,
  LaunchRing,
  MAX_ARGS,
  type WorkerData,
  type WorkerReply,
} from './launch-ring.js';
import { HostAction, HostSide } from './launch-host-side.js';
import type { RingLaunch } from './launch-protocol.js';
import { HostCallServer, type HostCallHandler } from './host-calls.js';
import { droppedLine, takePrints } from './kernel-print.js';
import type { PrintListener } from '../interface.js';
import { type HostWorker, ProcessHold, startHostWorker } from './host-threads.js';

/**
 * The longest any wait sleeps before it looks again. Progress never depends on it (the model
 * test checks the protocol with unbounded waits); it caps what a bug would cost.
 */
const WAIT_BOUND_MS = 1000;

/** Unexpected worker deaths within DEATH_WINDOW_MS that make the device give up as lost. */
const DEATHS_BEFORE_LOST = 8;
const DEATH_WINDOW_MS = 10_000;

/**
 * Before the main thread sleeps on a completion it polls for this long. Waking the main thread
 * through Atomics.waitAsync costs ~200 us on a 2-vCPU VM (an event-loop round trip); a short
 * synchronous poll catches short launches in ~3 us. Long launches waste one poll per wait.
 */
export function spinMicros(env: Environment = environment()): number {
  const value = env.OFFLOAD_HOST_SPIN_US === undefined ? 50 : Number(env.OFFLOAD_HOST_SPIN_US);
  if (!Number.isFinite(value) || value < 0 || value > 100_000) {
    throw errors.invalidArgument(
      `OFFLOAD_HOST_SPIN_US must be a number of microseconds from 0 to 100000, not ${quoted(String(env.OFFLOAD_HOST_SPIN_US))}`,
    );
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

/** A launch as the pool takes it: lowered to numbers, with the kernel's name for messages. */
export interface PoolLaunch extends RingLaunch {
  name: string;
  /** Fail the launch with TIMEOUT (and replace the workers running it) after this long running. */
  timeoutMs?: number;
  /** Told of each line the kernel printed, before the launch settles (completed or trapped). */
  print?: PrintListener;
  /** Answers the kernel's host calls (host-calls.ts); none: each fails. */
  hostCall?: HostCallHandler;
}

/** The handler of a launch that was given none: every call fails, saying so. */
const noHostCalls: HostCallHandler = (name) => {
  throw new Error(`no host function ${JSON.stringify(name)}: this launch's program has none`);
};

/** Told once when a launch on the pool settles: completed (`error` undefined), trapped, timed out or cancelled. */
export interface FlightSettled {
  flightSettled(flight: Flight, error: OffloadError | undefined): void;
}

/**
 * A launch the pool holds until it settles. A class with fixed fields, not a spread of the
 * launch plus closures: this is made once per launch, and the spread cost 6 us of a 40 us launch.
 * It settles by telling its FlightSettled, with no promise or closure of its own.
 */
export class Flight implements PoolLaunch {
  readonly name: string;
  readonly image: number;
  readonly kernel: number;
  readonly teams: number;
  readonly threads: number;
  readonly kinds: PoolLaunch['kinds'];
  readonly values: PoolLaunch['values'];
  readonly timeoutMs: number | undefined;
  readonly print: PrintListener | undefined;
  readonly shape: PoolLaunch['shape'];
  readonly hostCall: HostCallHandler | undefined;
  /** When the pump first saw a team of it claimed (the launch's time limit counts from then). */
  begunBy: number | undefined;
  /** When it was handed to the pool (performance.now()). */
  readonly submittedAt = performance.now();
  private settled = false;

  constructor(
    launch: PoolLaunch,
    private readonly pool: WorkerPool,
    private readonly whenSettled: FlightSettled,
    /** The launcher's own, for its FlightSettled (the host device: the kernel). */
    readonly tag: unknown,
  ) {
    this.name = launch.name;
    this.image = launch.image;
    this.kernel = launch.kernel;
    this.teams = launch.teams;
    this.threads = launch.threads;
    this.kinds = launch.kinds;
    this.values = launch.values;
    this.timeoutMs = launch.timeoutMs;
    this.print = launch.print;
    this.shape = launch.shape;
    this.hostCall = launch.hostCall;
  }

  resolve(): void {
    if (this.settle()) this.whenSettled.flightSettled(this, undefined);
  }

  reject(error: OffloadError): void {
    if (this.settle()) this.whenSettled.flightSettled(this, error);
  }

  /** True the first time: a launch settles once (withdrawn, completed or failed). */
  private settle(): boolean {
    if (this.settled) return false;
    this.settled = true;
    this.pool.released();
    return true;
  }
}

/** A control message in flight to every worker: done when each worker index has answered. */
interface ControlWaiter {
  pending: Set<number>;
  replies: WorkerReply[];
  done(replies: WorkerReply[]): void;
}

interface RegisteredImage {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  kernels: { name: string; kinds: ArgKind[] }[];
}

export class WorkerPool {
  private readonly ring: LaunchRing;
  private readonly host: HostSide<Flight>;
  private readonly calls: HostCallServer;
  /** The host-call handler of the launch in a slot (undefined: no launch there any more). */
  private readonly hostCallOf = (slot: number): HostCallHandler | undefined => {
    const flight = this.host.inFlight.get(slot)?.launch;
    return flight === undefined ? undefined : (flight.hostCall ?? noHostCalls);
  };
  private readonly workers: HostWorker[] = [];
  /** Workers killed (their launch was withdrawn) whose threads have not exited yet. */
  private readonly dying = new Set<number>();
  /** The last error a worker reported before it exited, by index. */
  private readonly failures = new Map<number, Error>();
  private readonly deaths: number[] = [];
  /** Images every worker holds, so that a new worker loads them before it takes a launch. */
  private readonly images = new Map<number, RegisteredImage>();
  private readonly waiters = new Map<string, ControlWaiter>();
  private nextImage = 1;
  private pumping = false;
  private lostError: OffloadError | undefined;
  private closed = false;
  /** Holds the process alive while a launch or control message is outstanding (Node; nothing in a page). */
  private readonly keepAlive = new ProcessHold();

  /** Called once if the device gives up (its workers keep dying). */
  onLost: (error: OffloadError) => void = () => {};

  constructor(
    readonly size: number,
    private readonly spinUs: number = spinMicros(),
  ) {
    this.ring = LaunchRing.create({ ...FULL_RING, workers: size });
    this.host = new HostSide<Flight>(this.ring);
    this.calls = new HostCallServer(this.ring);
    this.host.onSettled = (flight, trap, slot) => {
      const printed = takePrints(this.ring, slot);
      if (printed && flight.print) {
        for (const { team, text } of printed.lines) flight.print(flight.name, team, text);
        if (printed.dropped > 0) flight.print(flight.name, -1, droppedLine(printed.dropped));
      }
      if (trap === undefined) flight.resolve();
      else flight.reject(errors.kernelTrap(trap));
    };
    for (let index = 0; index < size; index++) this.spawn(index);
  }

  get lost(): OffloadError | undefined {
    return this.lostError;
  }

  /** Contexts (device memories) whose images this pool's workers may hold. */
  contexts = 0;
  /**
   * Device memory the contexts hold: each, up to the highest address it has allocated (its pages
   * below stay committed until it ends). At most the device's memory size, so that many contexts
   * cost no more RAM than one full device.
   */
  heldBytes = 0;

  /** What the pool holds now: live contexts, images loaded on the workers, workers running. */
  census(): Record<string, number> {
    return {
      contexts: this.contexts,
      heldBytes: this.heldBytes,
      images: this.images.size,
      workers: this.workers.length - this.dying.size,
      inFlight: this.host.inFlight.size,
    };
  }

  /** A new image id, unique in this pool (images of every context share the workers). */
  imageId(): number {
    return this.nextImage++;
  }

  /** Instantiates `module` over `memory` on every worker (and on every worker started later). */
  load(
    image: number,
    module: WebAssembly.Module,
    memory: WebAssembly.Memory,
    kernels: RegisteredImage['kernels'],
  ): Promise<WorkerReply[]> {
    this.images.set(image, { module, memory, kernels });
    return this.broadcast({ type: 'load', image, module, memory, kernels }, `load:${image}`);
  }

  /** Drops the image's instances on every worker. */
  async unload(image: number): Promise<void> {
    if (!this.images.delete(image)) return;
    await this.broadcast({ type: 'unload', image }, `unload:${image}`);
  }

  private broadcast(message: ControlMessage, key: string): Promise<WorkerReply[]> {
    if (this.lostError) return Promise.reject(this.lostError);
    this.hold();
    const replies = new Promise<WorkerReply[]>((done) => {
      this.waiters.set(key, { pending: new Set(this.workers.keys()), replies: [], done });
    }).finally(() => this.released());
    for (const worker of this.workers) worker.post(message);
    this.wakeAll();
    return replies;
  }

  private onReply(reply: WorkerReply): void {
    this.answered(`${reply.type === 'unloaded' ? 'unload' : 'load'}:${reply.image}`, reply.worker, reply);
  }

  private answered(key: string, worker: number, reply?: WorkerReply): void {
    const waiter = this.waiters.get(key);
    if (!waiter?.pending.delete(worker)) return;
    if (reply) waiter.replies.push(reply);
    if (waiter.pending.size === 0) {
      this.waiters.delete(key);
      waiter.done(waiter.replies);
    }
  }

  /** Workers read their control port before every scan; waking them makes them read it now. */
  private wakeAll(): void {
    Atomics.add(this.ring.i32, H_EPOCH, 1);
    Atomics.notify(this.ring.i32, H_EPOCH);
  }

  private spawn(index: number): void {
    const data: WorkerData = { index, ring: this.ring.buffer, shape: this.ring.shape, waitBoundMs: WAIT_BOUND_MS };
    const images: ControlMessage[] = [];
    for (const [image, { module, memory, kernels }] of this.images)
      images.push({ type: 'load', image, module, memory, kernels });
    const worker: HostWorker = startHostWorker(data, images, {
      reply: (reply) => this.onReply(reply),
      error: (error) => this.failures.set(index, error),
      exit: (code) => this.onExit(index, worker, code),
    });
    this.workers[index] = worker;
  }

  /** A worker's thread has ended: killed by us, or dead on its own. Replace it and go on. */
  private onExit(index: number, worker: HostWorker, code: number): void {
    if (this.closed || this.workers[index] !== worker) return;
    const killed = this.dying.delete(index);
    const failure = this.failures.get(index);
    this.failures.delete(index);
    const slot = this.host.workerExited(index);
    if (slot !== undefined) {
      const flight = this.host.inFlight.get(slot)!.launch;
      this.host.withdraw(slot);
      const how = failure ? `failed (${failure.message})` : `exited with code ${code}`;
      flight.reject(
        errors.kernelTrap(
          `kernel '${flight.name}' lost a team: host worker ${index} ${how} while running it; the worker was replaced`,
        ),
      );
    }
    // Unloads need no answer from the new worker (it never loads the image); loads get one.
    for (const [key, waiter] of this.waiters)
      if (key.startsWith('unload:') && waiter.pending.has(index)) this.answered(key, index);
    if (!killed && this.tooManyDeaths(index, failure, code)) return;
    this.spawn(index);
    this.kick();
  }

  private tooManyDeaths(index: number, failure: Error | undefined, code: number): boolean {
    const now = performance.now();
    this.deaths.push(now);
    while (this.deaths.length > 0 && this.deaths[0]! < now - DEATH_WINDOW_MS) this.deaths.shift();
    if (this.deaths.length < DEATHS_BEFORE_LOST) return false;
    const how = failure ? `failed: ${failure.message}` : `exited with code ${code}`;
    this.fail(
      errors.deviceLost(
        `host workers keep dying (${this.deaths.length} in ${DEATH_WINDOW_MS / 1000} s; worker ${index} ${how})`,
      ),
    );
    return true;
  }

  /** Kills worker `index`, which may be running a withdrawn launch; its exit replaces it. */
  private kill(index: number): void {
    this.dying.add(index);
    void this.workers[index]!.terminate();
  }

  /** Makes the pump look at the ring now: wakes it from its wait, or starts it. */
  private kick(): void {
    if (this.pumping) Atomics.notify(this.ring.i32, H_DONE_COUNT);
    else void this.pump();
  }

  /**
   * Publishes a launch on the ring (or queues it until a slot frees); `settled` is told when its
   * last team has finished, or why it failed: possibly before this returns (the pump's first
   * step, run here, may collect a launch a fast worker already finished). Throws, having taken
   * nothing, when the pool is lost or the launch has too many arguments.
   */
  launch(launch: PoolLaunch, settled: FlightSettled, tag: unknown): void {
    if (this.lostError) throw this.lostError;
    if (launch.values.length > MAX_ARGS)
      throw errors.invalidArgument(`a kernel takes at most ${MAX_ARGS} arguments, not ${launch.values.length}`);
    this.hold();
    this.host.submit(new Flight(launch, this, settled, tag));
    this.publish();
    if (!this.pumping) void this.pump();
  }

  private hold(): void {
    this.keepAlive.hold();
  }

  /** @internal A launch or control message has settled. */
  released(): void {
    this.keepAlive.release();
  }

  /** Publishes queued launches while slots are free (a publication's steps run back to back). */
  private publish(): void {
    while (this.host.publishing) {
      if (this.host.publishStep() === HostAction.WakeWorkers) Atomics.notify(this.ring.i32, H_EPOCH, this.host.wake);
    }
  }

  /**
   * Fails every launch of `images` (a context that ends) with `reason`, those waiting and those
   * running alike; the workers running them are stopped and replaced, so the context's images
   * can then be unloaded even if a kernel of it loops.
   */
  cancel(images: ReadonlySet<number>, reason: OffloadError): void {
    for (const launch of this.host.drainWaiting((launch) => images.has(launch.image))) launch.reject(reason);
    let withdrawn = false;
    for (const [slot, { launch }] of this.host.inFlight) {
      if (!images.has(launch.image)) continue;
      this.host.withdraw(slot);
      launch.reject(reason);
      withdrawn = true;
    }
    if (withdrawn) this.kick();
  }

  /**
   * Withdraws every launch in flight whose time limit has passed; returns when to look again.
   * A limit counts from when the launch begins to run (a team claimed), not while it waits for
   * workers busy with other launches or being replaced after a runaway. The pump sees a claim
   * late by at most an eighth of the limit (it looks that often at a launch still waiting), so
   * a launch is stopped after running between its limit and 1.125 times it.
   */
  private expire(): number {
    const now = performance.now();
    let next = Infinity;
    for (const [slot, { launch }] of this.host.inFlight) {
      if (launch.timeoutMs === undefined) continue;
      if (launch.begunBy === undefined) {
        if (!this.host.begun(slot)) {
          next = Math.min(next, now + launch.timeoutMs / 8);
          continue;
        }
        launch.begunBy = now;
      }
      const deadline = launch.begunBy + launch.timeoutMs;
      if (deadline > now) {
        next = Math.min(next, deadline);
        continue;
      }
      this.host.withdraw(slot);
      launch.reject(
        errors.timeout(
          `launch of kernel '${launch.name}' (${launch.teams} teams) ran past its time limit of ${launch.timeoutMs} ms; ` +
            'the workers running it were stopped and replaced, and the device goes on',
        ),
      );
    }
    return next;
  }

  /** Runs the main thread's collection side until nothing is in flight. One pump runs at a time. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    const { i32 } = this.ring;
    try {
      while (!this.lostError) {
        const action = this.host.pumpStep();
        if (action === HostAction.Continue) continue;
        if (action === HostAction.Kill) {
          this.kill(this.host.victim);
          continue;
        }
        if (action === HostAction.Idle) return;
        if (action === HostAction.Collected) {
          // Let the continuations of what just completed run first: they often publish the
          // next launches, which are worth more than polling an idle ring.
          this.publish();
          await Promise.resolve();
          continue;
        }
        // HostAction.Wait: nothing completed in this round; a worker may be waiting for a host call (M3).
        this.calls.serve(this.workers.length, this.hostCallOf);
        const deadline = this.expire();
        if (pollChanged(i32, H_DONE_COUNT, this.host.seen, this.spinUs)) continue;
        const wait = Atomics.waitAsync(
          i32,
          H_DONE_COUNT,
          this.host.seen,
          Math.max(0, Math.min(WAIT_BOUND_MS, deadline - performance.now())),
        );
        if (wait.async) await wait.value;
        this.expire();
      }
    } finally {
      this.pumping = false;
    }
  }

  private fail(error: OffloadError): void {
    if (this.lostError || this.closed) return;
    this.lostError = error;
    this.rejectAll(error);
    this.onLost(error);
    void this.stopWorkers();
  }

  private rejectAll(error: OffloadError): void {
    for (const { launch } of this.host.inFlight.values()) launch.reject(error);
    for (const launch of this.host.drainWaiting()) launch.reject(error);
    for (const waiter of this.waiters.values()) waiter.done([]);
    this.waiters.clear();
  }

  private async stopWorkers(): Promise<void> {
    this.closed = true;
    Atomics.store(this.ring.i32, H_STOP, 1);
    this.wakeAll();
    this.keepAlive.close();
    await Promise.all(this.workers.map((worker) => worker.terminate()));
  }

  /** Stops the workers. Launches still in flight reject with `reason`. */
  async close(reason: OffloadError): Promise<void> {
    if (this.closed) return;
    this.lostError ??= reason;
    this.rejectAll(this.lostError);
    await this.stopWorkers();
  }
}
