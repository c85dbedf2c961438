import { asOffloadError, errors, OffloadError } from '../errors.js';
import type { Grid as PluginGrid, PluginQueue } from '../plugins/interface.js';
import { asLaunchArgs, type LoweredArg } from './launch-scratch.js';
import { abortable, checkSignal } from '../abort.js';
import { Buffer } from './buffer.js';
import { checkOptions, checkRange, checkSize, describe, hostBytes, isOptionsObject } from './checks.js';
import { enqueueCopyRect, enqueueFill, enqueueReadRect, enqueueWriteRect } from './fill-and-rect-copies.js';
import type { Device } from './device.js';
import { Kernel } from './kernel.js';
import { Event, LaunchEvent, operationEvent, type RecordOptions, type WaitOptions } from './event.js';
import type { RectCopy } from './rect.js';
import {
  checkedBuffer,
  type Grid,
  launchArgs,
  launchGrid,
  type KernelArgument,
  type LaunchGrid,
  type PointerResolver,
} from './launch-arguments.js';

// The types and values a program (and omp, proxy) import from here, now each in its own file.
export { Event, type RecordOptions, type WaitOptions } from './event.js';
export type { RectCopy, RectSide } from './rect.js';
export { MAX_TIMEOUT_MS, type Grid, type ItemsGrid, type KernelArgument, type LaunchGrid } from './launch-arguments.js';
/** @internal */
export type { PointerResolver } from './launch-arguments.js';
import { completeLaunch, setPointerLengths } from './items.js';
import { dropped } from '../runtime/debug.js';
import { performance, warn } from '../platform.js';

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

export interface CopyOptions {
  srcOffset?: number;
  dstOffset?: number;
  /** Bytes to copy; default: the rest of `src` after `srcOffset`. */
  byteLength?: number;
}

/**
 * Device queues of Queue objects the program dropped without destroying them: released when the
 * Queue is collected (its device queue never holds on to the Queue object).
 */
const abandoned = new FinalizationRegistry<PluginQueue>((plugin) => {
  plugin.destroy().catch(dropped('queue', 'releasing a queue the program dropped'));
});

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

  /** @internal Traces an operation of this queue (a span of the runtime's trace, when one is on). */
  trace(name: string, args: Record<string, unknown>, done: Promise<unknown>, enqueuedAt?: number): void {
    this.device.context.tracer?.operation(this.device.id, this.device.info.name, this.id, name, args, done, enqueuedAt);
  }

  private buffer(value: unknown, name: string): Buffer {
    return checkedBuffer(this.device, value, name);
  }

  /** @internal `value` checked as a buffer of this queue's device. */
  localBuffer(value: unknown, name: string): Buffer {
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
      lowered = launchGrid(this.device, kernel, grid);
      slots = kernel.scratch.take();
      if (!launchArgs(this.device, kernel, args, slots, resolver)) {
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
    return this.op(() => enqueueFill(this, buffer, pattern, offset, bytes));
  }

  /**
   * Copies a rectangle of `hostView` into `buffer` (olMemcpyRect, cudaMemcpy3D): `rect.src` is
   * the host view's layout, `rect.dst` the buffer's. On a remote device the rows travel packed,
   * in one frame (at most 64 MiB of rows).
   */
  writeRect(buffer: Buffer, hostView: ArrayBufferView, rect: RectCopy): Event {
    return this.op(() => enqueueWriteRect(this, buffer, hostView, rect));
  }

  /** Copies a rectangle of `buffer` into `hostView`: `rect.src` is the buffer's layout, `rect.dst` the host view's. */
  readRect(buffer: Buffer, hostView: ArrayBufferView, rect: RectCopy): Event {
    return this.op(() => enqueueReadRect(this, buffer, hostView, rect));
  }

  /** Copies a rectangle between two buffers of this queue's device. */
  copyRect(dst: Buffer, src: Buffer, rect: RectCopy): Event {
    return this.op(() => enqueueCopyRect(this, dst, src, rect));
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
