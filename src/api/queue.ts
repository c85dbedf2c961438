import { asOffloadError, errors, OffloadError } from '../errors.js';
import { MAX_FILL_PATTERN_BYTES, MAX_MILLISECONDS } from '../units.js';
import type { Grid as PluginGrid, LaunchSettled, PluginEvent, PluginQueue, Rect } from '../plugins/interface.js';
import { asLaunchArgs, type LoweredArg } from './launch-scratch.js';
import { abortable, checkSignal } from '../abort.js';
import { Buffer, DevicePointer } from './buffer.js';
import {
  checkArgumentCount,
  checkInteger,
  checkOptions,
  checkRange,
  checkScalar,
  checkSize,
  describe,
  hostBytes,
  isOptionsObject,
  scalarProblem,
} from './checks.js';
import type { Device } from './device.js';
import { type GridSize, lowerGrid } from './grid.js';
import { Kernel } from './kernel.js';
import { completeLaunch, setPointerLengths } from './items.js';
import { dropped } from '../runtime/debug.js';
import { rectBytes } from '../plugins/interface.js';
import { performance, warn } from '../platform.js';

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
 * buffers until then (Queue.launch); one that ran at once needed no counting.
 */
class LaunchEvent extends Event implements PluginEvent, LaunchSettled {
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
 * One side of a rectangular copy: where its first row starts, and the bytes from one row to
 * the next and one slice to the next (defaults: rows packed, `width` bytes apart; slices packed,
 * `rowPitch * height` apart).
 */
export interface RectSide {
  offset?: number;
  rowPitch?: number;
  slicePitch?: number;
}

/**
 * A rectangular copy (olMemcpyRect, cudaMemcpy3D): `depth` slices of `height` rows of `width`
 * bytes, read from `src` and written to `dst` with the layout each side says.
 */
export interface RectCopy {
  /** Bytes per row. */
  width: number;
  /** Rows per slice. */
  height: number;
  /** Slices; default 1. */
  depth?: number;
  /** The layout of the side read from (the host view of writeRect, the buffer of readRect, src of copyRect). */
  src?: RectSide;
  /** The layout of the side written to. */
  dst?: RectSide;
}

/** The bytes `rect` spans on one side, from its offset to the end of its last row. */
function rectSpan(width: number, height: number, depth: number, rowPitch: number, slicePitch: number): number {
  if (width === 0 || height === 0 || depth === 0) return 0;
  return (depth - 1) * slicePitch + (height - 1) * rowPitch + width;
}

/** `rect` checked against the byte lengths of both sides, as the plugin contract's Rect. */
function checkRect(rect: unknown, what: string, srcLength: number, dstLength: number, device: number): Rect {
  const shape = checkOptions(rect, `${what}: rect`);
  const width = checkSize(shape.width, `${what}: rect.width`, device);
  const height = checkSize(shape.height, `${what}: rect.height`, device);
  const depth = checkSize(shape.depth ?? 1, `${what}: rect.depth`, device);
  if (width === 0 || height === 0 || depth === 0)
    throw errors.invalidArgument(
      `${what}: rect is ${width} x ${height} x ${depth} bytes; every extent must be at least 1 (liboffload's INVALID_SIZE)`,
      device,
    );
  const side = (name: 'src' | 'dst', length: number) => {
    const layout = checkOptions(shape[name], `${what}: rect.${name}`);
    const offset = checkSize(layout.offset ?? 0, `${what}: rect.${name}.offset`, device);
    const rowPitch = checkSize(layout.rowPitch ?? width, `${what}: rect.${name}.rowPitch`, device);
    if (rowPitch < width)
      throw errors.invalidArgument(
        `${what}: rect.${name}.rowPitch ${rowPitch} is less than rect.width ${width}: rows would overlap`,
        device,
      );
    const slicePitch = checkSize(layout.slicePitch ?? rowPitch * height, `${what}: rect.${name}.slicePitch`, device);
    if (depth > 1 && slicePitch < rowPitch * height) {
      throw errors.invalidArgument(
        `${what}: rect.${name}.slicePitch ${slicePitch} is less than rowPitch * height (${rowPitch * height}): slices would overlap`,
        device,
      );
    }
    const span = rectSpan(width, height, depth, rowPitch, slicePitch);
    if (!Number.isSafeInteger(offset + span) || offset + span > length) {
      throw errors.outOfBounds(
        `${what}: the ${name} side's last row ends at byte ${offset + span}, beyond its ${length} bytes`,
        device,
      );
    }
    return { offset, rowPitch, slicePitch };
  };
  const src = side('src', srcLength);
  const dst = side('dst', dstLength);
  return {
    width,
    height,
    depth,
    srcOffset: src.offset,
    srcRowPitch: src.rowPitch,
    srcSlicePitch: src.slicePitch,
    dstOffset: dst.offset,
    dstRowPitch: dst.rowPitch,
    dstSlicePitch: dst.slicePitch,
  };
}

/** A fill pattern as its bytes (a copy: the caller may change its array once fill() returns). */
function fillPatternBytes(pattern: unknown, device: number): Uint8Array {
  if (typeof pattern === 'number') {
    checkInteger(pattern, 'fill: pattern (a number is one byte)', 0, 255, device);
    return Uint8Array.of(pattern);
  }
  if (!ArrayBuffer.isView(pattern)) {
    throw errors.invalidArgument(
      `fill: pattern must be a number (one byte), a TypedArray or a DataView of 1 to ${MAX_FILL_PATTERN_BYTES} bytes, got ${describe(pattern)}`,
      device,
    );
  }
  if (pattern.byteLength < 1 || pattern.byteLength > MAX_FILL_PATTERN_BYTES) {
    throw errors.invalidArgument(
      `fill: pattern must be 1 to ${MAX_FILL_PATTERN_BYTES} bytes long, got ${pattern.byteLength} (a ${describe(pattern)}); for more, write the bytes`,
      device,
    );
  }
  return new Uint8Array(pattern.buffer, pattern.byteOffset, pattern.byteLength).slice();
}

/** The failure of a host function: HOST_FUNCTION_FAILED, its cause the thrown value. */
function hostFunctionError(thrown: unknown, device: number): OffloadError {
  const text = thrown instanceof Error ? thrown.message : String(thrown);
  return new OffloadError(
    'HOST_FUNCTION_FAILED',
    `a host function of queue.hostFunction() threw: ${text.length > 500 ? `${text.slice(0, 500)}...` : text}`,
    {
      device,
      cause: thrown,
    },
  );
}

/**
 * An operation's promise as an event of `owner`, its errors attributed to its device; counted as
 * pending by `owner` until it settles.
 */
function operationEvent(owner: Queue, done: Promise<unknown>): PluginEvent {
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

export interface CopyOptions {
  srcOffset?: number;
  dstOffset?: number;
  /** Bytes to copy; default: the rest of `src` after `srcOffset`. */
  byteLength?: number;
}

export interface Grid {
  /**
   * Number of teams (at least 1), or teams along [x, y, z] (each within `device.info.maxTeamDims`,
   * their product within `maxTeams`). A kernel reads its place with teamId(d) and numTeams(d).
   */
  teams: GridSize;
  /**
   * Threads per team; default 1. A number is clamped to `device.info.maxThreadsPerTeam`, as
   * OpenMP's thread_limit; dimensions [x, y, z] are taken as given or refused (within
   * `maxThreadDims`, their product within `maxThreadsPerTeam`). The threads of a team share its
   * team memory and meet at barrier().
   */
  threads?: GridSize;
  /**
   * Bytes of scratch memory per team, shared by its threads (teamMemory() in a kernel); default
   * 0; at most `device.info.maxTeamMemoryBytes`. Its contents start undefined and end with the team.
   */
  teamMemoryBytes?: number;
  /**
   * Time limit in milliseconds: a launch still running after it fails with TIMEOUT, naming the
   * kernel and the limit, and the device stops it and goes on (on the host device the workers
   * running it are replaced). Counted from when the launch begins to run, not while it waits
   * for a worker. Default: OFFLOAD_LAUNCH_TIMEOUT, or none.
   */
  timeoutMs?: number;
}

/**
 * The grid of a per-item kernel's launch (its first parameter is `i: item`): the items, and the
 * device picks the teams (`device.suggestGrid` says which).
 */
export interface ItemsGrid {
  /** Number of items (1 to 2^31 - 1), or items along [x, y] or [x, y, z] (their product too). */
  items: GridSize;
  /** As Grid.timeoutMs. */
  timeoutMs?: number;
}

/** What `queue.launch` takes: teams for a kernel written for teams, items for a per-item one. */
export type LaunchGrid = Grid | ItemsGrid;

/** The longest time limit a launch takes (about 24 days, what a Node timer can wait). */
export const MAX_TIMEOUT_MS = MAX_MILLISECONDS;

/**
 * Device queues of Queue objects the program dropped without destroying them: released when the
 * Queue is collected (its device queue never holds on to the Queue object).
 */
const abandoned = new FinalizationRegistry<PluginQueue>((plugin) => {
  plugin.destroy().catch(dropped('queue', 'releasing a queue the program dropped'));
});

/** A kernel argument: a number (i32, f32, f64), a bigint (i64), a Buffer or a DevicePointer (ptr). */
export type KernelArgument = number | bigint | Buffer | DevicePointer;

/** @internal What a resolving launch (Queue.launchResolving) asks for the pointer an argument stands for. */
export interface PointerResolver {
  /**
   * For a pointer argument: the pointer it stands for; undefined when it stands for one the
   * launch cannot take (the launch then does nothing); a Buffer, a DevicePointer or any other
   * value as it is (the launch checks it as usual).
   */
  pointerFor(value: unknown): unknown;
}

/**
 * An in-order queue of a device. Enqueueing methods return an Event at once and never throw:
 * a bad argument fails the returned event (and `finish()`), like any failed operation.
 * After a failure, the operations enqueued behind it are skipped with the same error until
 * `finish()` reports it; so a kernel never runs on data whose copy failed.
 */
export class Queue {
  /** @internal */ readonly plugin: PluginQueue;
  /** @internal */ readonly id: number;
  /** Operations enqueued and not yet settled. */
  private pending = 0;
  /** An operation failed since the last finish(): the failure sticks to the queue until one reports it. */
  private failing = false;
  private destroyed: Promise<void> | undefined;
  /**
   * The event of the last resolving launch, when it settled within its call: the next one's
   * (launchResolving). It holds that launch's kernel until then, as the mapper's memo holds the
   * last clauses.
   */
  private spareEvent: LaunchEvent | undefined;
  /** The synchronize of a finish() that its signal ended early, for the next finish() to report. */
  private abandonedFinish: Promise<void> | undefined;

  /** @internal Use `device.queue()`. */
  constructor(readonly device: Device) {
    this.plugin = device.plugin.createQueue();
    this.id = device.context.queueId();
    const { context } = device;
    const queue = this.id;
    this.plugin.onPrint = (kernel, team, text) => {
      try {
        context.print({ device: device.id, queue, kernel, team, text });
      } catch (error) {
        // The program's listener failed: that must not fail the launch, nor the device's pump.
        warn(`offload-ts: the print listener threw: ${error instanceof Error ? error.message : String(error)}`);
      }
    };
    this.plugin.onHostCall = (kernel, name, args) => context.hostCall({ device: device.id, queue, kernel, name, args });
    abandoned.register(this, this.plugin, this);
  }

  /** Runs `enqueue` after checks; a check failure becomes a failed operation of this queue. */
  private op(enqueue: () => Promise<unknown>): Event {
    if (this.destroyed) return this.refused();
    let done: Promise<unknown>;
    try {
      this.device.checkUsable();
      done = enqueue();
    } catch (error) {
      // Enqueued as a failed wait, so the failure is ordered and sticky like any other.
      const failed = Promise.reject(
        asOffloadError(error, `enqueueing an operation on queue ${this.id} of device ${this.device.id}`),
      );
      failed.catch(() => {}); // observed through the wait below
      done = this.plugin.waitEvent({ done: failed, queue: this.plugin, query: () => true });
    }
    return new Event(operationEvent(this, done), this.device);
  }

  /** @internal Operations enqueued and not settled yet (runtime.metrics()'s queue depth). */
  get depth(): number {
    return this.pending;
  }

  /** @internal Counts an operation as pending (the runtime's shutdown waits for busy queues only). */
  began(): void {
    if (this.pending++ === 0) this.device.context.busy.add(this);
  }

  /** @internal Counts an operation `began` counted as settled. */
  ended(failed: boolean): void {
    if (failed) this.failing = true;
    if (--this.pending === 0) this.device.context.busy.delete(this);
  }

  /**
   * @internal Whether the queue is free for a new, independent piece of work (the mapper's
   * present-map launches): nothing pending, no failure waiting for a finish(), not destroyed.
   */
  get reusable(): boolean {
    return this.pending === 0 && !this.failing && this.destroyed === undefined;
  }

  /** @internal Whether an operation failed since the last finish() (its failure then sticks to the queue). */
  get failed(): boolean {
    return this.failing;
  }

  private destroyedError(): OffloadError {
    return errors.invalidArgument(
      `queue ${this.id} of device ${this.device.id} was destroyed; make a new one with device.queue()`,
      this.device.id,
    );
  }

  /** The event an operation on a destroyed queue gets. */
  private refused(): Event {
    const done = Promise.reject(this.destroyedError());
    done.catch(() => {}); // observed through the event, when the program waits on it
    return new Event({ done, queue: this.plugin, query: () => true }, this.device);
  }

  private trace(name: string, args: Record<string, unknown>, done: Promise<unknown>, enqueuedAt?: number): void {
    this.device.context.tracer?.operation(this.device.id, this.device.info.name, this.id, name, args, done, enqueuedAt);
  }

  private buffer(value: unknown, name: string): Buffer {
    if (!(value instanceof Buffer))
      throw errors.invalidArgument(`${name} must be a Buffer, got ${describe(value)}`, this.device.id);
    if (value.device.context !== this.device.context) {
      throw errors.invalidBuffer(`${name} belongs to another runtime`, this.device.id);
    }
    if (value.freed) throw errors.invalidBuffer(`${name} (${value.describe()}) was freed`, this.device.id);
    return value;
  }

  private localBuffer(value: unknown, name: string): Buffer {
    const buffer = this.buffer(value, name);
    if (buffer.device !== this.device) {
      throw errors.invalidBuffer(
        `${name} is a ${buffer.describe()}, but this queue is on device ${this.device.id}`,
        this.device.id,
      );
    }
    return buffer;
  }

  /** Copies `hostView` into `buffer` at `offset`. Keep `hostView` unchanged until the event completes. */
  write(buffer: Buffer, hostView: ArrayBufferView, options?: { offset?: number }): Event {
    return this.op(() => {
      const dst = this.localBuffer(buffer, 'write: buffer');
      const src = hostBytes(hostView, 'write: hostView', this.device.id);
      const offset = checkSize(
        checkOptions(options, 'write: options').offset ?? 0,
        'write: options.offset',
        this.device.id,
      );
      checkRange(offset, src.byteLength, dst.byteLength, `write into ${dst.describe()}`, this.device.id);
      this.device.context.info.copyToDevice(
        this.id,
        { device: this.device.id, address: dst.allocation.address, offset },
        src.byteLength,
      );
      const done = this.plugin.submit(dst.allocation, offset, src);
      this.trace('write', { bytes: src.byteLength, offset }, done);
      dst.use(done);
      return done;
    });
  }

  /** Copies from `buffer` at `offset` into `hostView` (its whole length). */
  read(buffer: Buffer, hostView: ArrayBufferView, options?: { offset?: number }): Event {
    return this.op(() => {
      const src = this.localBuffer(buffer, 'read: buffer');
      const dst = hostBytes(hostView, 'read: hostView', this.device.id);
      const offset = checkSize(
        checkOptions(options, 'read: options').offset ?? 0,
        'read: options.offset',
        this.device.id,
      );
      checkRange(offset, dst.byteLength, src.byteLength, `read from ${src.describe()}`, this.device.id);
      this.device.context.info.copyFromDevice(
        this.id,
        { device: this.device.id, address: src.allocation.address, offset },
        dst.byteLength,
      );
      const done = this.plugin.retrieve(dst, src.allocation, offset);
      this.trace('read', { bytes: dst.byteLength, offset }, done);
      src.use(done);
      return done;
    });
  }

  /** Copies between two buffers, on this device or across devices; one of them must be on this queue's device. */
  copy(dst: Buffer, src: Buffer, options?: CopyOptions): Event {
    return this.op(() => {
      const to = this.buffer(dst, 'copy: dst');
      const from = this.buffer(src, 'copy: src');
      if (to.device !== this.device && from.device !== this.device) {
        throw errors.invalidArgument(
          `copy: neither dst (device ${to.device.id}) nor src (device ${from.device.id}) is on this queue's device ${this.device.id}`,
          this.device.id,
        );
      }
      const opts = checkOptions(options, 'copy: options');
      const srcOffset = checkSize(opts.srcOffset ?? 0, 'copy: options.srcOffset', this.device.id);
      const dstOffset = checkSize(opts.dstOffset ?? 0, 'copy: options.dstOffset', this.device.id);
      checkRange(srcOffset, 0, from.byteLength, `copy from ${from.describe()}`, this.device.id);
      const bytes = checkSize(
        opts.byteLength ?? from.byteLength - srcOffset,
        'copy: options.byteLength',
        this.device.id,
      );
      checkRange(srcOffset, bytes, from.byteLength, `copy from ${from.describe()}`, this.device.id);
      checkRange(dstOffset, bytes, to.byteLength, `copy into ${to.describe()}`, this.device.id);
      this.device.context.info.copyDeviceToDevice(
        this.id,
        { device: from.device.id, address: from.allocation.address, offset: srcOffset },
        { device: to.device.id, address: to.allocation.address, offset: dstOffset },
        bytes,
      );
      const done = this.plugin.exchange(
        from.device.plugin,
        from.allocation,
        srcOffset,
        to.device.plugin,
        to.allocation,
        dstOffset,
        bytes,
      );
      this.trace('copy', { bytes, from: from.device.id, to: to.device.id }, done);
      from.use(done);
      to.use(done);
      return done;
    });
  }

  /** Why pointer argument `index` of a launch of `kernel` is refused (launch found that it is). */
  private pointerArgumentError(kernel: Kernel, index: number, value: unknown): OffloadError {
    const device = this.device.id;
    const param = kernel.params[index]!;
    const position = `launch of '${kernel.name}': argument ${index} '${param.name}'`;
    try {
      const pointer = value instanceof DevicePointer;
      const buffer = this.buffer(pointer ? value.buffer : value, `${position} (ptr)`);
      if (buffer.device !== this.device) {
        return errors.invalidBuffer(
          `${position} is a ${buffer.describe()}, but the kernel runs on device ${device}`,
          device,
        );
      }
      const offset = pointer ? checkSize(value.byteOffset, `${position}: the pointer's offset`, device) : 0;
      checkRange(offset, 0, buffer.byteLength, `${position}: pointer into ${buffer.describe()}`, device);
    } catch (error) {
      return asOffloadError(error, position);
    }
    return asOffloadError(new Error('the launch refused it, but no check of it fails'), `checking ${position}`, {
      device,
    });
  }

  /**
   * The kernel and grid of a launch checked (the kernel is this device's, its library still
   * registered, the grid within the device's limits) and the grid lowered, with its time limit.
   * A plain grid (numbers only) equal to the kernel's last one gets the same lowered grid again.
   */
  private launchGrid(kernel: Kernel, grid: LaunchGrid): PluginGrid {
    const device = this.device.id;
    if (!(kernel instanceof Kernel))
      throw errors.invalidArgument(`launch: kernel must be a Kernel, got ${describe(kernel)}`, device);
    if (kernel.device !== this.device) {
      throw errors.invalidArgument(
        `launch: kernel '${kernel.name}' was loaded for device ${kernel.device.id}, not for this queue's device ${device}`,
        device,
      );
    }
    const library = kernel.library.record;
    if (library.unregistered)
      throw errors.invalidArgument(
        `launch: the library '${library.name}' of kernel '${kernel.name}' was unregistered`,
        device,
      );
    const shape = isOptionsObject(grid) ? grid : checkOptions(grid, `launch of '${kernel.name}': grid`);
    // Each field read once: a getter answering differently the second time must not split the check from the cache.
    const { teams, threads, teamMemoryBytes, timeoutMs } = shape;
    const cache = kernel.scratch;
    if (
      cache.grid !== undefined &&
      teams === cache.teams &&
      threads === cache.threads &&
      teamMemoryBytes === cache.teamMemoryBytes &&
      timeoutMs === cache.timeoutMs
    )
      return cache.grid;
    const lowered = this.lowerLaunchGrid(kernel, { teams, threads, teamMemoryBytes, timeoutMs });
    if (typeof teams === 'number' && (threads === undefined || typeof threads === 'number')) {
      Object.freeze(lowered.teamDims);
      Object.freeze(lowered.threadDims);
      cache.grid = Object.freeze(lowered);
      cache.teams = teams;
      cache.threads = threads;
      cache.teamMemoryBytes = teamMemoryBytes;
      cache.timeoutMs = timeoutMs;
    }
    return lowered;
  }

  private lowerLaunchGrid(kernel: Kernel, shape: Record<string, unknown>): PluginGrid {
    const device = this.device.id;
    const info = this.device.info;
    const lowered = lowerGrid(shape, kernel.name, info, device);
    const limit = shape.timeoutMs;
    if (limit !== undefined) {
      // Named only when refused (a proxy gives every launch its limit: this is a hot path there).
      lowered.timeoutMs =
        typeof limit === 'number' && Number.isInteger(limit) && limit >= 1 && limit <= MAX_TIMEOUT_MS
          ? limit
          : checkInteger(limit, `launch of '${kernel.name}': grid.timeoutMs`, 1, MAX_TIMEOUT_MS, device);
      if (!info.launchTimeouts) {
        throw errors.unsupported(
          `launch of '${kernel.name}': device ${device} (${info.name}) cannot stop a running launch, so it takes no grid.timeoutMs`,
          device,
        );
      }
    } else if (info.launchTimeouts) {
      // The runtime's default (OFFLOAD_LAUNCH_TIMEOUT) applies where a device can honour it.
      lowered.timeoutMs = this.device.context.launchTimeoutMs;
    }
    return lowered;
  }

  /**
   * A launch's arguments checked against `kernel`'s parameters and lowered into `slots`.
   * Checked first and described only on failure: a launch builds no message (the messages of
   * four arguments were a fifth of an inline launch's 1.6 us).
   */
  private launchArgs(
    kernel: Kernel,
    args: readonly KernelArgument[],
    slots: LoweredArg[],
    resolver: PointerResolver | undefined,
  ): boolean {
    const device = this.device.id;
    if (!Array.isArray(args))
      throw errors.invalidArgument(`launch of '${kernel.name}': args must be an array, got ${describe(args)}`, device);
    const params = kernel.params;
    if (args.length !== params.length) checkArgumentCount(`launch of '${kernel.name}'`, params, args.length, device);
    for (let index = 0; index < params.length; index++) {
      const param = params[index]!;
      const given: unknown = args[index];
      const slot = slots[index]!;
      if (slot.type === 'ptr') {
        let value = given;
        if (resolver !== undefined) {
          value = resolver.pointerFor(given);
          if (value === undefined) return false;
        }
        // Buffer first: `instanceof` walks an object's prototypes until it finds the class, so
        // a Buffer answers at the first step, anything else only at the end of its chain.
        let buffer = value;
        let offset: unknown = 0;
        if (!(value instanceof Buffer) && value instanceof DevicePointer) {
          buffer = value.buffer;
          offset = value.byteOffset;
        }
        if (
          !(buffer instanceof Buffer) ||
          buffer.device !== this.device ||
          buffer.freed ||
          typeof offset !== 'number' ||
          !Number.isSafeInteger(offset) ||
          offset < 0 ||
          offset > buffer.byteLength // a pointer may point one past the end (as in C), never further
        )
          throw this.pointerArgumentError(kernel, index, value);
        slot.alloc = buffer.allocation;
        slot.offset = offset;
        slot.buffer = buffer;
        continue;
      }
      // checkScalar throws, naming the argument, only for a value scalarProblem refused (a
      // resolving launch declines instead, without building the message).
      if (scalarProblem(given, param.type) !== undefined) {
        if (resolver !== undefined) return false;
        checkScalar(given, param, `launch of '${kernel.name}': argument ${index}`, device);
      }
      slot.value = given as number | bigint;
    }
    return true;
  }

  /**
   * Launches `kernel` over `grid` with `args` (numbers, bigints for i64, Buffers for pointers).
   * A launch the device runs at once (inline on the host device) allocates its Event and nothing
   * else: its arguments are lowered into the kernel's own slots, and nothing needs counting.
   */
  launch(kernel: Kernel, grid: LaunchGrid, args: readonly KernelArgument[] = []): Event {
    return this.launchWith(kernel, grid, args, undefined)!;
  }

  /**
   * @internal A launch whose pointer arguments may also be values `resolver` turns into
   * pointers (the mapper's present map clauses, resolved while the arguments are checked, with
   * no array of their own). Undefined, having done nothing, when the launch cannot go ahead as
   * given: an argument the resolver does not resolve, or any argument or grid the launch would
   * refuse. Its caller then takes its general path, which reports in its own terms.
   *
   * The caller may take the event's `done` and nothing else, before its next call: an event
   * that settled within the launch call (an inline run) is renewed for the queue's next
   * resolving launch, so that a loop of them makes no object at all.
   */
  launchResolving(
    kernel: Kernel,
    grid: LaunchGrid,
    args: readonly unknown[],
    resolver: PointerResolver,
  ): Event | undefined {
    return this.launchWith(kernel, grid, args as readonly KernelArgument[], resolver);
  }

  private launchWith(
    kernel: Kernel,
    grid: LaunchGrid,
    args: readonly KernelArgument[],
    resolver: PointerResolver | undefined,
  ): Event | undefined {
    if (this.destroyed) return this.refused();
    let lowered: PluginGrid;
    let slots: LoweredArg[] | undefined;
    try {
      this.device.checkUsable();
      // A per-item launch becomes an ordinary one (a grid for this device, the item counts as
      // arguments), and a checked kernel's pointer lengths are added (src/api/items.ts).
      if (
        kernel instanceof Kernel &&
        isOptionsObject(grid) &&
        (kernel.ownParams !== kernel.params.length || grid.items !== undefined)
      ) {
        const complete = completeLaunch(kernel, grid, args, this.device.info, this.device.id);
        grid = complete.grid as unknown as Grid;
        args = complete.args as KernelArgument[];
      }
      lowered = this.launchGrid(kernel, grid);
      slots = kernel.scratch.take();
      if (!this.launchArgs(kernel, args, slots, resolver)) {
        kernel.scratch.give(slots);
        return undefined;
      }
      if (kernel.pointerLengths.length > 0) setPointerLengths(slots, kernel.pointerLengths);
    } catch (error) {
      if (slots) kernel.scratch.give(slots);
      if (resolver !== undefined) return undefined; // its caller's general path reports
      return this.op(() => {
        throw error;
      });
    }
    const spare = this.spareEvent;
    let event: LaunchEvent;
    if (resolver !== undefined && spare !== undefined) {
      this.spareEvent = undefined;
      event = spare.renew(kernel, lowered);
    } else {
      event = new LaunchEvent(this, kernel, lowered);
    }
    const context = this.device.context;
    if (context.info.timed || context.tracer) event.started = performance.now();
    try {
      this.plugin.launch(kernel.loaded, lowered, asLaunchArgs(slots), event);
    } catch (error) {
      event.launchSettled(error ?? new Error('the plugin threw nothing'), undefined);
    }
    if (!event.query()) {
      // Still running: counted until it settles (the queue for shutdown and finish, the library
      // for unregister, the buffers for free), the buffers kept, since the slots go back now.
      event.counted = true;
      this.began();
      kernel.library.record.launchBegan();
      for (let i = 0; i < slots.length; i++) {
        const slot = slots[i]!;
        if (slot.type !== 'ptr') continue;
        slot.buffer!.beginUse();
        (event.buffers ??= []).push(slot.buffer!);
      }
    } else if (resolver !== undefined) {
      this.spareEvent = event;
    }
    kernel.scratch.give(slots);
    // `started`: an inline launch on an idle queue has already run by now.
    if (context.tracer)
      this.trace(
        kernel.name,
        { kernel: kernel.name, teams: lowered.teams, threads: lowered.threads },
        event.done,
        event.started,
      );
    return event;
  }

  /** @internal A launch settled (LaunchEvent.launchSettled): what `launch` counted ends, OFFLOAD_INFO says where it ran. */
  launchEnded(event: LaunchEvent, failed: boolean, where: string | undefined): void {
    if (event.counted) {
      this.ended(failed);
      event.kernel.library.record.launchEnded();
      const buffers = event.buffers;
      if (buffers) for (let i = 0; i < buffers.length; i++) buffers[i]!.endUse();
      event.buffers = undefined;
    } else if (failed) {
      this.failing = true;
    }
    this.device.context.info.counters.launched(
      this.device.id,
      failed,
      event.started >= 0 ? performance.now() - event.started : undefined,
    );
    if (event.started >= 0 && this.device.context.info.enabled) {
      const grid = event.grid;
      this.device.context.info.launch(
        this.device.id,
        this.id,
        event.kernel.name,
        grid.teams,
        grid.threads,
        performance.now() - event.started,
        failed,
        failed ? undefined : where,
      );
    }
  }

  /**
   * An event that completes when everything enqueued so far on this queue has completed. With
   * `{ timing: true }` it also reads the device's clock when the queue reaches it, for
   * `event.elapsedSince(start)`.
   */
  record(options?: RecordOptions): Event {
    if (this.destroyed) return this.refused();
    try {
      this.device.checkUsable();
      const timing = checkOptions(options, 'record: options').timing ?? false;
      if (typeof timing !== 'boolean')
        throw errors.invalidArgument(
          `record: options.timing must be a boolean, got ${describe(timing)}`,
          this.device.id,
        );
      const event = this.plugin.record(timing);
      this.began();
      event.done.then(
        () => this.ended(false),
        () => this.ended(true),
      );
      return new Event(event, this.device);
    } catch (error) {
      return this.op(() => Promise.reject(error));
    }
  }

  // --- liboffload's further operations: fill, rectangular copies, host functions ---

  /**
   * Fills `bytes` bytes of `buffer` from `offset` with `pattern` repeated (olMemFill,
   * cuMemsetD8/D16/D32): a number is one byte (0 to 255), a TypedArray or DataView of 1 to
   * MAX_FILL_PATTERN_BYTES bytes is repeated whole, its first byte at `offset`. `bytes` (default:
   * the rest of the buffer) must be a multiple of the pattern's length, and no shorter than it.
   * On a remote device it is one small frame, not the bytes.
   */
  fill(buffer: Buffer, pattern: number | ArrayBufferView, offset = 0, bytes?: number): Event {
    return this.op(() => {
      const device = this.device.id;
      const dst = this.localBuffer(buffer, 'fill: buffer');
      const bytesOf = fillPatternBytes(pattern, device);
      const at = checkSize(offset, 'fill: offset', device);
      checkRange(at, 0, dst.byteLength, `fill of ${dst.describe()}`, device);
      const length = checkSize(bytes ?? dst.byteLength - at, 'fill: bytes', device);
      checkRange(at, length, dst.byteLength, `fill of ${dst.describe()}`, device);
      if (bytesOf.byteLength > length) {
        throw errors.invalidArgument(
          `fill: the pattern's ${bytesOf.byteLength} bytes are more than the ${length} bytes to fill; pass a pattern no longer than the fill`,
          device,
        );
      }
      if (length % bytesOf.byteLength !== 0) {
        throw errors.invalidArgument(
          `fill: ${length} bytes is not a multiple of the pattern's ${bytesOf.byteLength} bytes; pass bytes that is`,
          device,
        );
      }
      const done = this.plugin.fill(dst.allocation, at, length, bytesOf);
      this.trace('fill', { bytes: length, offset: at }, done);
      dst.use(done);
      return done;
    });
  }

  /**
   * Copies a rectangle of `hostView` into `buffer` (olMemcpyRect, cudaMemcpy3D): `rect.src` is
   * the host view's layout, `rect.dst` the buffer's. On a remote device the rows travel packed,
   * in one frame (at most 64 MiB of rows).
   */
  writeRect(buffer: Buffer, hostView: ArrayBufferView, rect: RectCopy): Event {
    return this.op(() => {
      const dst = this.localBuffer(buffer, 'writeRect: buffer');
      const src = hostBytes(hostView, 'writeRect: hostView', this.device.id);
      const checked = checkRect(
        rect,
        `writeRect into ${dst.describe()}`,
        src.byteLength,
        dst.byteLength,
        this.device.id,
      );
      const done = this.plugin.submitRect(dst.allocation, src, checked);
      this.trace('writeRect', { bytes: rectBytes(checked) }, done);
      dst.use(done);
      return done;
    });
  }

  /** Copies a rectangle of `buffer` into `hostView`: `rect.src` is the buffer's layout, `rect.dst` the host view's. */
  readRect(buffer: Buffer, hostView: ArrayBufferView, rect: RectCopy): Event {
    return this.op(() => {
      const src = this.localBuffer(buffer, 'readRect: buffer');
      const dst = hostBytes(hostView, 'readRect: hostView', this.device.id);
      const checked = checkRect(
        rect,
        `readRect from ${src.describe()}`,
        src.byteLength,
        dst.byteLength,
        this.device.id,
      );
      const done = this.plugin.retrieveRect(dst, src.allocation, checked);
      this.trace('readRect', { bytes: rectBytes(checked) }, done);
      src.use(done);
      return done;
    });
  }

  /** Copies a rectangle between two buffers of this queue's device. */
  copyRect(dst: Buffer, src: Buffer, rect: RectCopy): Event {
    return this.op(() => {
      const to = this.localBuffer(dst, 'copyRect: dst');
      const from = this.localBuffer(src, 'copyRect: src');
      const checked = checkRect(
        rect,
        `copyRect from ${from.describe()}`,
        from.byteLength,
        to.byteLength,
        this.device.id,
      );
      const done = this.plugin.copyRect(to.allocation, from.allocation, checked);
      this.trace('copyRect', { bytes: rectBytes(checked) }, done);
      from.use(done);
      to.use(done);
      return done;
    });
  }

  /**
   * Runs `fn` on the program's thread when the queue reaches it (olLaunchHostFunction,
   * cudaLaunchHostFunc); the queue's later work waits until it returns (or its promise settles).
   * A throw or rejection fails the returned event with HOST_FUNCTION_FAILED (the thrown value as
   * its cause) and nothing else: the queue goes on, and finish() does not report it. On a
   * remote device the proxy holds the queue until `fn` is done here.
   */
  hostFunction(fn: () => unknown): Event {
    let failure: OffloadError | undefined;
    const device = this.device.id;
    return this.op(() => {
      if (typeof fn !== 'function')
        throw errors.invalidArgument(`hostFunction: fn must be a function, got ${describe(fn)}`, device);
      const run = async (): Promise<void> => {
        try {
          await fn();
        } catch (error) {
          failure = hostFunctionError(error, device);
        }
      };
      return this.plugin.hostFunction(run).then(() => {
        if (failure) throw failure;
      });
    });
  }

  /** Makes later operations of this queue wait for `event` (of any queue or device of this runtime). */
  wait(event: Event): Event {
    return this.op(() => {
      if (!(event instanceof Event))
        throw errors.invalidArgument(`wait: event must be an Event, got ${describe(event)}`, this.device.id);
      if (event.device.context !== this.device.context)
        throw errors.invalidArgument('wait: the event belongs to another runtime', this.device.id);
      return this.plugin.waitEvent(event.plugin);
    });
  }

  /** True when every operation enqueued so far has completed. */
  query(): boolean {
    return this.plugin.query();
  }

  /**
   * Resolves when everything enqueued so far has completed; rejects with the first failure
   * since the previous `finish()` (and clears it, so the queue can be used again).
   * `options.signal` ends the wait early (ABORTED, or TIMEOUT for `AbortSignal.timeout(ms)`);
   * the work goes on, and a later `finish()` waits for it and reports its failure.
   */
  async finish(options?: WaitOptions): Promise<void> {
    const signal = checkSignal(checkOptions(options, 'queue.finish: options').signal, 'queue.finish: options.signal');
    if (this.destroyed) throw this.destroyedError();
    // A finish given up on its signal still took the queue's failure: the next finish reports it.
    const abandoned = this.abandonedFinish;
    this.abandonedFinish = undefined;
    this.failing = false; // this finish reports it (a failure after this point sets it again)
    const synced = this.plugin.synchronize();
    try {
      if (abandoned) await Promise.allSettled([abandoned, synced]).then(() => abandoned);
      await abortable(synced, signal, 'queue.finish').catch((error: unknown) => {
        if (signal?.aborted) this.abandonedFinish = synced;
        throw error;
      });
    } catch (error) {
      throw asOffloadError(error, `waiting for queue ${this.id} of device ${this.device.id} to finish`, {
        device: this.device.id,
      });
    }
  }

  /** @internal For runtime shutdown. */
  async drain(): Promise<void> {
    await this.plugin
      .synchronize()
      .catch(
        dropped(
          `queue ${this.id} of device ${this.device.id}`,
          'its work (drained at destroy or shutdown, unreported)',
        ),
      );
  }

  /**
   * Releases the queue: work already enqueued completes first (its failures are not reported
   * here; `finish()` first to see them), then the device queue is gone (on a proxy too).
   * Afterwards every operation on it fails with INVALID_ARGUMENT. Idempotent. A queue the
   * program drops without destroying it is released when it is garbage collected.
   */
  destroy(): Promise<void> {
    this.destroyed ??= (async () => {
      abandoned.unregister(this);
      await this.drain();
      await this.plugin
        .destroy()
        .catch(dropped(`queue ${this.id} of device ${this.device.id}`, 'releasing the device queue'));
    })();
    return this.destroyed;
  }

  /** `await using queue = device.queue()` destroys it at the end of the block. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.destroy();
  }
}
