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
  type LoadedKernel,
  type PluginDevice,
  type PluginEvent,
  type PluginQueue,
  type Rect,
} from './interface.js';
import { PeerQueues } from './peer-queues.js';
import { dropped } from '../runtime/debug.js';

const noop = (): void => {};

export class SerialQueue {
  /** Settles (never rejects) when the last enqueued operation has settled. */
  private tail: Promise<void> = Promise.resolve();
  private pending = 0;
  private failure: OffloadError | undefined;

  /**
   * @param guard Called before each operation runs; may throw (e.g. DEVICE_LOST) to fail it.
   */
  constructor(private readonly guard: () => void = noop) {}

  /**
   * Runs `op` after every operation enqueued before it has settled. The returned promise is
   * already marked as handled: callers that drop it cause no unhandled rejection.
   */
  enqueue<T>(op: () => T | Promise<T>): Promise<T> {
    this.pending++;
    const result = this.tail.then(() => {
      if (this.failure) throw this.failure;
      this.guard();
      return op();
    });
    this.tail = result.then(
      () => {
        this.pending--;
      },
      (error: unknown) => {
        this.pending--;
        this.failure ??= asOffloadError(error, 'running an operation of a device queue');
      },
    );
    return result; // handled: the `then` above takes its rejection
  }

  /**
   * Runs `op`, which must be synchronous, at once when the queue is idle and has not failed:
   * the same order and failure semantics as `enqueue`, without the hop through the promise
   * chain (an inline launch then costs no more than its kernel). Undefined when it did not run.
   */
  runNow<T>(op: () => T): Promise<T> | undefined {
    if (this.pending !== 0 || this.failure) return undefined;
    try {
      this.guard();
      return Promise.resolve(op());
    } catch (error) {
      const failure = asOffloadError(error, 'running an operation of a device queue');
      this.failure = failure;
      const failed = Promise.reject(failure);
      failed.catch(noop); // as enqueue's: the failure is the queue's, synchronize() reports it
      return failed;
    }
  }

  /** True when no operation is waiting or running. */
  idle(): boolean {
    return this.pending === 0;
  }

  /** Waits for everything enqueued so far; rejects with (and clears) the first failure. */
  async synchronize(): Promise<void> {
    await this.tail;
    const failure = this.failure;
    this.failure = undefined;
    if (failure) throw failure;
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
  abstract launch(kernel: LoadedKernel, grid: Grid, args: readonly LaunchArg[]): Promise<string | void>;

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
