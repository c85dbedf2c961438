/**
 * Events: a point in a queue (Event), the one object a launch makes (LaunchEvent), and the
 * bookkeeping that turns a queue operation's promise into an event its queue counts.
 */
import { asOffloadError, errors, type OffloadError } from '../errors.js';
import type { Grid as PluginGrid, PluginEvent, PluginQueue } from '../plugins/interface.js';
import { abortable, checkSignal } from '../abort.js';
import type { Buffer } from './buffer.js';
import { checkOptions, describe } from './checks.js';
import type { Device } from './device.js';
import type { Kernel } from './kernel.js';
import type { Queue } from './queue.js';

/** A point in a queue: `done` settles when everything before it in its queue has completed. */
export class Event {
  /** @internal What the plugins see of it: for a launch's event, the event itself. */
  readonly plugin: PluginEvent;

  /** @internal */
  constructor(
    plugin: PluginEvent | undefined,
    /** @internal */ readonly device: Device,
  ) {
    this.plugin = plugin ?? (this as unknown as PluginEvent);
  }

  /** Resolves when the operation (and all before it in its queue) completed; rejects with its error. */
  get done(): Promise<void> {
    return this.plugin.done;
  }

  /** True once the event has completed or failed. */
  query(): boolean {
    return this.plugin.query();
  }

  /**
   * Milliseconds from `start` to this event, on the device's clock (a remote device's: its
   * proxy's), as olGetEventElapsedTime and cudaEventElapsedTime: both must have been recorded
   * with `queue.record({ timing: true })`, on devices that share a clock (this process's
   * devices do; a proxy's devices share the proxy's). Resolves once both have completed;
   * rejects with the error of one that failed, or INVALID_ARGUMENT for untimed events or
   * events of different clocks.
   */
  async elapsedSince(start: Event): Promise<number> {
    const device = this.device.id;
    if (!(start instanceof Event))
      throw errors.invalidArgument(`elapsedSince: start must be an Event, got ${describe(start)}`, device);
    const [from, to] = [start.plugin.timing, this.plugin.timing];
    if (!from || !to) {
      const which = !from && !to ? 'neither event was' : !from ? 'start was not' : 'this event was not';
      throw errors.invalidArgument(
        `elapsedSince: ${which} recorded with timing; record both with queue.record({ timing: true })`,
        device,
      );
    }
    if (from.clock !== to.clock) {
      throw errors.invalidArgument(
        `elapsedSince: start is an event of device ${start.device.id} (${start.device.info.location}) and this one of device ${device} ` +
          `(${this.device.info.location}); their clocks differ, so their times do not compare`,
        device,
      );
    }
    await Promise.all([start.done, this.done]);
    return (await to.at) - (await from.at);
  }

  /**
   * Waits as `done` does, with a way out: rejects with ABORTED (TIMEOUT for `AbortSignal.timeout(ms)`) as soon
   * as `options.signal` aborts. Only the wait ends; the operation goes on, and `done` still
   * settles when it does.
   */
  wait(options?: WaitOptions): Promise<void> {
    try {
      const signal = checkSignal(checkOptions(options, 'event.wait: options').signal, 'event.wait: options.signal');
      return abortable(this.done, signal, 'event.wait');
    } catch (error) {
      return Promise.reject(error);
    }
  }
}

const PENDING = 0;
const COMPLETED = 1;
const FAILED = 2;
/** The `done` of every launch that completed before anyone asked (a settled promise is immutable). */
const COMPLETED_PROMISE = Promise.resolve();
const noop = (): void => {};

/**
 * The event of a launch: the one object a launch makes. The plugin tells it when the
 * launch settles (LaunchSettled); its `done` promise is made only when asked for. A launch that
 * was still running when the plugin returned is counted by its queue, its library and its
 * buffers until then (Queue.launch); one that ran at once needed no counting. It is the plugins'
 * PluginEvent and LaunchSettled by shape, not by an `implements` clause: those members are
 * internal, and a published class may not claim an interface its declarations leave out.
 */
export class LaunchEvent extends Event {
  private state = PENDING;
  private failure: OffloadError | undefined = undefined;
  private promise: Promise<void> | undefined = undefined;
  private resolveDone: (() => void) | undefined = undefined;
  private rejectDone: ((error: OffloadError) => void) | undefined = undefined;
  /** Set when it was still running after the plugin's launch call: its queue, library and these buffers count it. */
  counted = false;
  buffers: Buffer[] | undefined = undefined;
  /** When it was enqueued, where OFFLOAD_INFO wants its time; else -1. */
  started = -1;

  constructor(
    readonly owner: Queue,
    public kernel: Kernel,
    public grid: PluginGrid,
  ) {
    super(undefined, owner.device);
  }

  /**
   * This event made new for another launch of its queue (Queue.launchResolving): only once it
   * settled within its launch call, so that no plugin, queue or buffer holds it, and its caller
   * took only its `done`.
   */
  renew(kernel: Kernel, grid: PluginGrid): this {
    this.kernel = kernel;
    this.grid = grid;
    this.state = PENDING;
    this.failure = this.promise = this.resolveDone = this.rejectDone = undefined;
    this.counted = false;
    this.buffers = undefined;
    this.started = -1;
    return this;
  }

  /** @internal PluginEvent's: the plugin queue it belongs to. */
  get queue(): PluginQueue {
    return this.owner.plugin;
  }

  /** @internal PluginEvent's: a launch's event is not timed. */
  get timing(): undefined {
    return undefined;
  }

  override get done(): Promise<void> {
    // Small, so that V8 inlines it where a launch is awaited; the promise is made apart.
    return this.promise ?? (this.state === COMPLETED ? COMPLETED_PROMISE : this.makeDone());
  }

  private makeDone(): Promise<void> {
    const failure = this.failure; // set exactly when it failed
    const promise =
      failure !== undefined
        ? Promise.reject(failure)
        : new Promise<void>((resolve, reject) => {
            this.resolveDone = resolve;
            this.rejectDone = reject;
          });
    promise.catch(noop); // its failure is the queue's too: finish() reports it if no wait does
    return (this.promise = promise);
  }

  override query(): boolean {
    return this.state !== PENDING;
  }

  /** @internal Whether it has completed without failing (known without its `done`). */
  get completed(): boolean {
    return this.state === COMPLETED;
  }

  /** @internal LaunchSettled's: once, from the plugin. */
  launchSettled(error: unknown, where: string | undefined): void {
    if (this.state !== PENDING) return;
    const device = this.device.id;
    const failure =
      error === undefined
        ? undefined
        : asOffloadError(error, `running an operation of a queue of device ${device}`, { device });
    this.state = failure === undefined ? COMPLETED : FAILED;
    this.failure = failure;
    this.owner.launchEnded(this, failure !== undefined, where);
    if (failure === undefined) this.resolveDone?.();
    else this.rejectDone?.(failure);
  }
}

/** Options of the waits that take an AbortSignal (`event.wait`, `queue.finish`). */
export interface WaitOptions {
  /** Ends the wait (not the work waited for) with ABORTED, or TIMEOUT for `AbortSignal.timeout(ms)`. */
  signal?: AbortSignal;
}

/** What `queue.record()` takes. */
export interface RecordOptions {
  /**
   * Also read the device's clock when the queue reaches the event, for `event.elapsedSince()`.
   * Off by default: a plain event costs no clock read (nor, on a remote device, a time in its reply).
   */
  timing?: boolean;
}

/**
 * An operation's promise as an event of `owner`, its errors attributed to its device; counted as
 * pending by `owner` until it settles.
 */
export function operationEvent(owner: Queue, done: Promise<unknown>): PluginEvent {
  const device = owner.device.id;
  let settled = false;
  owner.began();
  const tracked = done.then(
    () => {
      settled = true;
      owner.ended(false);
    },
    (error: unknown) => {
      settled = true;
      owner.ended(true);
      throw asOffloadError(error, `running an operation of a queue of device ${device}`, { device });
    },
  );
  tracked.catch(() => {}); // its failure is the queue's too: finish() reports it if no wait does
  return { done: tracked, queue: owner.plugin, query: () => settled };
}
