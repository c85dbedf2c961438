/**
 * The in-order, sticky-failure queue every plugin queue is built on (see PluginQueue in
 * interface.ts for the contract). Plugins enqueue closures; this class keeps the order, the
 * failure state and the bookkeeping, once.
 */
import { asOffloadError, type OffloadError } from '../errors.js';
import {
  LOCAL_CLOCK,
  type Allocation,
  type EventTiming,
  type Grid,
  type LaunchArg,
  type LaunchSettled,
  type LoadedKernel,
  type PluginDevice,
  type PluginEvent,
  type PluginQueue,
  type Rect,
} from './interface.js';
import { PeerQueues } from './peer-queues.js';
import { dropped } from '../runtime/debug.js';
import { performance } from '../platform.js';

const noop = (): void => {};

/**
 * A call a SerialQueue runs in its turn, without a closure or a promise of its own (a launch
 * makes none, so that a pipelined launch allocates nothing but its Event). `runQueued` reads its words (`queue.word(at + i)`, i below
 * `count`) before anything else, and returns its result, or a promise of it, or throws; or it
 * returns CALL_PENDING and tells `queue.callSettled` later (possibly before it has returned).
 */
export interface QueuedCall {
  runQueued(a: unknown, b: unknown, queue: SerialQueue, at: number, count: number): unknown;
}

/** What `runQueued` returns when it will tell `callSettled` how the call ended. */
export const CALL_PENDING: unique symbol = Symbol('call pending');

const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  value instanceof Promise ||
  (typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function');

/** The settling of an `enqueue`d operation's promise. */
class Deferred {
  resolve!: (value: unknown) => void;
  reject!: (error: unknown) => void;
  readonly promise = new Promise<unknown>((resolve, reject) => {
    this.resolve = resolve;
    this.reject = reject;
  });
}

/** Entries a drained queue keeps room for (7 words each, 3.5 MiB at 64k): a larger ring is dropped once drained. */
const LARGE_RING = 65536;

/** What an entry of the queue is. */
const OP = 0; // a closure, settling a Deferred
const CALL = 1; // a QueuedCall, telling a LaunchSettled
const SYNC = 2; // synchronize(): reports and clears the failure when reached, settling a Deferred

/**
 * The in-order queue with sticky failures, as a ring of entries in parallel arrays (no object per
 * entry) and a ring of words that calls carry (a launch's argument values).
 *
 * Invariants (test/serial-queue.test.ts explores their interleavings):
 * - Entries run in the order they were enqueued; one starts only once the one before it has
 *   settled (`running` is true while an entry's promise is out, and nothing runs then).
 * - After an entry fails, every later one is skipped with that failure (settled, never run)
 *   until a synchronize() entry is reached, which reports it and clears it.
 * - `pending` counts OP and CALL entries enqueued and not yet settled; SYNC entries are not
 *   operations and never count.
 * - The live words are [wordsHead, wordsTail), absolute positions (a word at p lives at
 *   `p & wordMask`): growing the ring copies them and changes no position an entry holds.
 * - `pump` runs on one stack at a time (`pumping`): an entry that enqueues (a print listener's
 *   launch) leaves its entry to the loop already running.
 */
export class SerialQueue {
  private pending = 0;
  private failure: OffloadError | undefined;
  /** An entry's promise is out: nothing runs until it settles. */
  private running = false;
  private pumping = false;
  private pumpScheduled = false;

  // The entry ring: absolute positions [head, tail), at `position & mask`.
  private head = 0;
  private tail = 0;
  private mask!: number;
  private kinds!: number[];
  private runs!: unknown[];
  private firsts!: unknown[];
  private seconds!: unknown[];
  private settles!: unknown[];
  private starts!: number[];
  private counts!: number[];

  // The word ring.
  private wordsHead = 0;
  private wordsTail = 0;
  private wordMask!: number;
  private words!: unknown[];

  // The entry whose promise (or CALL_PENDING) is out.
  private currentKind = OP;
  private currentSettle: unknown = undefined;
  // A CALL's runQueued is on the stack; callSettled told before it returned keeps its answer here.
  private calling = false;
  private calledBack = false;
  private calledError: unknown = undefined;
  private calledValue: unknown = undefined;

  /**
   * @param guard Called before each operation runs; may throw (e.g. DEVICE_LOST) to fail it.
   */
  constructor(private readonly guard: () => void = noop) {
    this.newRings();
  }

  /**
   * Runs `op` after every operation enqueued before it has settled. The returned promise is
   * already marked as handled: callers that drop it cause no unhandled rejection. `op` never
   * runs before this returns.
   */
  enqueue<T>(op: () => T | Promise<T>): Promise<T> {
    const deferred = new Deferred();
    deferred.promise.catch(noop);
    this.pending++;
    this.push(OP, op, undefined, undefined, deferred, 0, 0);
    this.schedulePump();
    return deferred.promise as Promise<T>;
  }

  /**
   * Enqueues `call.runQueued(a, b, this, at, count)`, telling `settled` how it ends (it may be
   * told before this returns, when the queue skips it). Returns `at`: the caller writes the
   * call's `count` words with `setWord(at + i, value)` before anything else touches the queue.
   */
  enqueueCall(call: QueuedCall, a: unknown, b: unknown, settled: LaunchSettled, count: number): number {
    if (this.wordsTail - this.wordsHead + count > this.wordMask + 1) this.growWords(count);
    const at = this.wordsTail;
    this.wordsTail += count;
    this.pending++;
    this.push(CALL, call, a, b, settled, at, count);
    // Run from a microtask, as enqueue's operations: the caller writes the words first.
    this.schedulePump();
    return at;
  }

  word(at: number): unknown {
    return this.words[at & this.wordMask];
  }

  setWord(at: number, value: unknown): void {
    this.words[at & this.wordMask] = value;
  }

  /**
   * Whether an operation may run at once, on the caller's stack, rather than be enqueued: the
   * queue is idle, runs nothing now (not even on a stack below this one) and has not failed.
   * Such an operation keeps `enqueue`'s order and failure semantics without a hop through a
   * microtask (an inline launch then costs no more than its kernel): its runner brackets it with
   * `beginNow` and `endNow`, and reports a throw with `failNow`.
   */
  readyNow(): boolean {
    return this.head === this.tail && !this.running && !this.pumping && this.failure === undefined;
  }

  /**
   * Starts an operation run at once: what it enqueues meanwhile (a print listener's launch)
   * waits for `endNow`. Throws what the guard throws (then call `endNow` all the same).
   */
  beginNow(): void {
    this.pumping = true;
    this.guard();
  }

  /** Ends what `beginNow` began; what was enqueued meanwhile runs from a microtask. */
  endNow(): void {
    this.pumping = false;
    if (this.head !== this.tail) this.schedulePump();
  }

  /** Makes `error`, thrown by an operation run at once, the queue's failure (sticky, as `enqueue`'s); returns what to report. */
  failNow(error: unknown): unknown {
    return this.failWith(error);
  }

  /** True when no operation is waiting or running. */
  idle(): boolean {
    return this.pending === 0;
  }

  /** Waits for everything enqueued so far; rejects with (and clears) the first failure. */
  synchronize(): Promise<void> {
    // While an operation runs on a stack below this one (a print listener's finish()), it waits for it.
    if (this.head === this.tail && !this.running && !this.pumping) {
      const failure = this.failure;
      this.failure = undefined;
      return failure ? Promise.reject(failure) : Promise.resolve();
    }
    const deferred = new Deferred();
    this.push(SYNC, undefined, undefined, undefined, deferred, 0, 0);
    return deferred.promise as Promise<void>;
  }

  private push(
    kind: number,
    run: unknown,
    first: unknown,
    second: unknown,
    settle: unknown,
    start: number,
    count: number,
  ): void {
    if (this.tail - this.head > this.mask) this.growEntries();
    const slot = this.tail++ & this.mask;
    this.kinds[slot] = kind;
    this.runs[slot] = run;
    this.firsts[slot] = first;
    this.seconds[slot] = second;
    this.settles[slot] = settle;
    this.starts[slot] = start;
    this.counts[slot] = count;
  }

  private growEntries(): void {
    const size = (this.mask + 1) * 2;
    const mask = size - 1;
    const grown = <T>(old: T[], fill: T): T[] => {
      const next = new Array<T>(size).fill(fill);
      for (let at = this.head; at < this.tail; at++) next[at & mask] = old[at & this.mask]!;
      return next;
    };
    this.kinds = grown(this.kinds, OP);
    this.runs = grown(this.runs, undefined);
    this.firsts = grown(this.firsts, undefined);
    this.seconds = grown(this.seconds, undefined);
    this.settles = grown(this.settles, undefined);
    this.starts = grown(this.starts, 0);
    this.counts = grown(this.counts, 0);
    this.mask = mask;
  }

  private growWords(count: number): void {
    let size = (this.wordMask + 1) * 2;
    while (size < this.wordsTail - this.wordsHead + count) size *= 2;
    const mask = size - 1;
    const next = new Array<unknown>(size).fill(0);
    for (let at = this.wordsHead; at < this.wordsTail; at++) next[at & mask] = this.words[at & this.wordMask];
    this.words = next;
    this.wordMask = mask;
  }

  private readonly pumpNow = (): void => {
    this.pumpScheduled = false;
    this.pump();
  };

  private schedulePump(): void {
    if (this.pumpScheduled || this.running || this.pumping) return;
    this.pumpScheduled = true;
    queueMicrotask(this.pumpNow);
  }

  /** Runs entries from the head while none is out. */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.running && this.head !== this.tail) this.runHead();
    } finally {
      this.pumping = false;
    }
    // Rings a burst grew past LARGE_RING entries are dropped once drained; smaller ones stay, so
    // that a program pipelining that many launches again allocates nothing for them.
    if (this.head === this.tail && !this.running && this.mask >= LARGE_RING) this.newRings();
  }

  /** Empty rings (only while the queue is: every word and entry has been consumed). */
  private newRings(): void {
    const size = 16;
    this.mask = size - 1;
    this.kinds = new Array<number>(size).fill(OP);
    this.runs = new Array<unknown>(size).fill(undefined);
    this.firsts = new Array<unknown>(size).fill(undefined);
    this.seconds = new Array<unknown>(size).fill(undefined);
    this.settles = new Array<unknown>(size).fill(undefined);
    this.starts = new Array<number>(size).fill(0);
    this.counts = new Array<number>(size).fill(0);
    this.wordMask = 63;
    this.words = new Array<unknown>(64).fill(0);
  }

  private runHead(): void {
    const slot = this.head++ & this.mask;
    const kind = this.kinds[slot]!;
    const run = this.runs[slot];
    const first = this.firsts[slot];
    const second = this.seconds[slot];
    const settle = this.settles[slot];
    const start = this.starts[slot]!;
    const count = this.counts[slot]!;
    this.runs[slot] = this.firsts[slot] = this.seconds[slot] = this.settles[slot] = undefined;
    if (kind === SYNC) {
      const failure = this.failure;
      this.failure = undefined;
      if (failure) (settle as Deferred).reject(failure);
      else (settle as Deferred).resolve(undefined);
      return;
    }
    if (this.failure !== undefined) {
      this.wordsHead = start + count;
      this.settle(kind, settle, this.failure, undefined);
      return;
    }
    let result: unknown;
    try {
      this.guard();
      if (kind === CALL) {
        this.calling = true;
        this.calledBack = false;
        result = (run as QueuedCall).runQueued(first, second, this, start, count);
      } else {
        result = (run as () => unknown)();
      }
    } catch (error) {
      this.calling = false;
      this.wordsHead = start + count;
      this.settle(kind, settle, this.failWith(error), undefined);
      return;
    }
    this.calling = false;
    this.wordsHead = start + count;
    if (result === CALL_PENDING) {
      if (this.calledBack) {
        // Told already, from inside runQueued (a worker finished before the launch call returned).
        const error = this.calledError;
        const value = this.calledValue;
        this.calledError = this.calledValue = undefined;
        this.settle(CALL, settle, error === undefined ? undefined : this.failWith(error), value);
        return;
      }
      this.running = true;
      this.currentKind = CALL;
      this.currentSettle = settle;
      return;
    }
    if (isThenable(result)) {
      this.running = true;
      this.currentKind = kind;
      this.currentSettle = settle;
      (result instanceof Promise ? result : Promise.resolve(result)).then(this.completed, this.failed);
      return;
    }
    this.settle(kind, settle, undefined, result);
  }

  private readonly completed = (value: unknown): void => {
    this.endCurrent(undefined, value);
    this.pump();
  };

  private readonly failed = (error: unknown): void => {
    this.endCurrent(this.failWith(error), undefined);
    this.pump();
  };

  /**
   * How a call that returned CALL_PENDING ended: `error` undefined when it completed with
   * `value`. Its entry settles now; the entries behind it run from a microtask (this may be
   * called from inside another component's loop, e.g. the worker pool's pump).
   */
  callSettled(error: unknown, value: unknown): void {
    if (this.calling) {
      this.calledBack = true;
      this.calledError = error;
      this.calledValue = value;
      return;
    }
    if (!this.running || this.currentKind !== CALL) return; // a second answer: the first counted
    this.endCurrent(error === undefined ? undefined : this.failWith(error), value);
    this.schedulePump();
  }

  /** Settles the entry that was out: `failure` is what it reports, undefined when it completed with `value`. */
  private endCurrent(failure: unknown, value: unknown): void {
    this.running = false;
    const settle = this.currentSettle;
    this.currentSettle = undefined;
    this.settle(this.currentKind, settle, failure, value);
  }

  /** Makes `error` the queue's failure, if it has none; returns what the failed entry reports (the error itself, but never undefined). */
  private failWith(error: unknown): unknown {
    const failure = asOffloadError(error, 'running an operation of a device queue');
    this.failure ??= failure;
    return error === undefined || error === null ? failure : error;
  }

  /** Settles an OP or CALL entry: `error` undefined when it completed with `value`. */
  private settle(kind: number, settle: unknown, error: unknown, value: unknown): void {
    this.pending--;
    if (kind === OP) {
      if (error === undefined) (settle as Deferred).resolve(value);
      else (settle as Deferred).reject(error);
      return;
    }
    try {
      (settle as LaunchSettled).launchSettled(error, typeof value === 'string' ? value : undefined);
    } catch (thrown) {
      // A listener's failure must not stop the queue (the entries behind it would never run).
      dropped('device queue', "a launch's completion")(thrown);
    }
  }
}

/** An event of a queue built on SerialQueue: `done` settles with the op it was recorded as. */
export class SerialEvent implements PluginEvent {
  private settled = false;
  readonly done: Promise<void>;

  constructor(
    readonly queue: PluginQueue,
    done: Promise<void>,
    readonly timing?: EventTiming,
  ) {
    this.done = done.finally(() => {
      this.settled = true;
    });
    this.done.catch(noop); // the op's failure is the queue's: synchronize() reports it
  }

  query(): boolean {
    return this.settled;
  }
}

/**
 * A plugin queue whose operations run here, in order, on a SerialQueue (the host and WebGPU
 * queues): subclasses say how to copy and launch; events, waits and synchronisation are here.
 */
export abstract class SerialPluginQueue implements PluginQueue {
  protected readonly serial: SerialQueue;
  /** Queues on other devices used by `exchange` towards them, one per peer. */
  protected readonly peers = new PeerQueues();

  constructor(device: PluginDevice) {
    this.serial = new SerialQueue(() => {
      const lost = device.lost;
      if (lost) throw lost;
    });
  }

  abstract submit(dst: Allocation, dstOffset: number, src: Uint8Array): Promise<void>;
  abstract retrieve(dst: Uint8Array, src: Allocation, srcOffset: number): Promise<void>;
  abstract exchange(
    srcDevice: PluginDevice,
    src: Allocation,
    srcOffset: number,
    dstDevice: PluginDevice,
    dst: Allocation,
    dstOffset: number,
    bytes: number,
  ): Promise<void>;
  abstract launch(kernel: LoadedKernel, grid: Grid, args: readonly LaunchArg[], settled: LaunchSettled): void;

  waitEvent(event: PluginEvent): Promise<void> {
    return this.serial.enqueue(() => event.done);
  }

  abstract fill(dst: Allocation, offset: number, bytes: number, pattern: Uint8Array): Promise<void>;
  abstract submitRect(dst: Allocation, src: Uint8Array, rect: Rect): Promise<void>;
  abstract retrieveRect(dst: Uint8Array, src: Allocation, rect: Rect): Promise<void>;
  abstract copyRect(dst: Allocation, src: Allocation, rect: Rect): Promise<void>;

  record(timing = false): PluginEvent {
    if (!timing)
      return new SerialEvent(
        this,
        this.serial.enqueue(() => {}),
      );
    // Read when the queue reaches the event: every operation before it has completed (on a GPU
    // too: its operations settle when the GPU is done), so the process's clock is the device's.
    const at = this.serial.enqueue(() => performance.now());
    at.catch(() => {}); // observed through the event's done
    return new SerialEvent(
      this,
      at.then(() => {}),
      { clock: LOCAL_CLOCK, at },
    );
  }

  hostFunction(fn: () => Promise<void>): Promise<void> {
    return this.serial.enqueue(fn);
  }

  synchronize(): Promise<void> {
    return this.serial.synchronize();
  }

  query(): boolean {
    return this.serial.idle();
  }

  async destroy(): Promise<void> {
    await this.serial.synchronize().catch(dropped('queue', 'its last work before destroy'));
    await this.peers.destroy();
  }
}
