/**
 * The host device's queue: copies, fills and launches in order (serial-queue.ts), each launch
 * placed inline (on the calling thread) or on the workers by its kernel's policy (inline.ts);
 * told by the pool when a launch on the workers settles (FlightSettled).
 */
import { errors, type OffloadError } from '../../errors.js';
import { copyInto } from '../../shared-copy.js';
import type { Allocation, Grid, LaunchArg, LoadedKernel, PluginDevice, Rect } from '../interface.js';
import { forEachRow, type HostCallListener, type LaunchSettled, type PrintListener, settleWhen } from '../interface.js';
import { fillPattern } from '../fill-pattern.js';
import { CALL_PENDING, type QueuedCall, SerialPluginQueue, type SerialQueue } from '../serial-queue.js';
import { MAX_ARGS } from './launch-ring.js';
import { type Flight, type FlightSettled } from './worker-pool.js';
import type { HostKernel } from './context-images.js';
import type { ContextMemory, HostAllocation } from './context-memory.js';
import type { HostDevice } from './device.js';
import { argValue, IN_TURN, type LaunchPlacement, ON_WORKERS } from './launch-placement.js';

export class HostQueue extends SerialPluginQueue implements QueuedCall, FlightSettled {
  onPrint: PrintListener | undefined;
  onHostCall: HostCallListener | undefined;

  private readonly memory: ContextMemory;
  private readonly placement: LaunchPlacement;

  constructor(private readonly device: HostDevice) {
    super(device);
    this.memory = device.memory;
    this.placement = device.placement;
  }

  private address(alloc: Allocation, offset: number): number {
    return (alloc as HostAllocation).address + offset;
  }

  submit(dst: Allocation, dstOffset: number, src: Uint8Array): Promise<void> {
    return this.serial.enqueue(() => {
      copyInto(this.memory.heap, src, this.address(dst, dstOffset));
    });
  }

  retrieve(dst: Uint8Array, src: Allocation, srcOffset: number): Promise<void> {
    return this.serial.enqueue(() => {
      const start = this.address(src, srcOffset);
      dst.set(this.memory.heap.subarray(start, start + dst.byteLength));
    });
  }

  fill(dst: Allocation, offset: number, bytes: number, pattern: Uint8Array): Promise<void> {
    return this.serial.enqueue(() => {
      const start = this.address(dst, offset);
      fillPattern(this.memory.heap.subarray(start, start + bytes), pattern);
    });
  }

  submitRect(dst: Allocation, src: Uint8Array, rect: Rect): Promise<void> {
    return this.serial.enqueue(() => {
      const heap = this.memory.heap;
      const base = this.address(dst, 0);
      forEachRow(rect, (srcAt, dstAt) => copyInto(heap, src.subarray(srcAt, srcAt + rect.width), base + dstAt));
    });
  }

  retrieveRect(dst: Uint8Array, src: Allocation, rect: Rect): Promise<void> {
    return this.serial.enqueue(() => {
      const heap = this.memory.heap;
      const base = this.address(src, 0);
      forEachRow(rect, (srcAt, dstAt) => dst.set(heap.subarray(base + srcAt, base + srcAt + rect.width), dstAt));
    });
  }

  copyRect(dst: Allocation, src: Allocation, rect: Rect): Promise<void> {
    return this.serial.enqueue(() => {
      const heap = this.memory.heap;
      const from = this.address(src, 0);
      const to = this.address(dst, 0);
      forEachRow(rect, (srcAt, dstAt) => heap.copyWithin(to + dstAt, from + srcAt, from + srcAt + rect.width));
    });
  }

  exchange(
    srcDevice: PluginDevice,
    src: Allocation,
    srcOffset: number,
    dstDevice: PluginDevice,
    dst: Allocation,
    dstOffset: number,
    bytes: number,
  ): Promise<void> {
    return this.serial.enqueue(() => {
      if (srcDevice === this.device && dstDevice === this.device) {
        const start = this.address(src, srcOffset);
        this.memory.heap.copyWithin(this.address(dst, dstOffset), start, start + bytes);
        return undefined;
      }
      // The other device reads from or writes into our memory in place; this queue waits for
      // it, so nothing else of ours touches those bytes meanwhile.
      if (srcDevice === this.device) {
        const start = this.address(src, srcOffset);
        return this.peers.of(dstDevice).submit(dst, dstOffset, this.memory.heap.subarray(start, start + bytes));
      }
      const start = this.address(dst, dstOffset);
      return this.peers.of(srcDevice).retrieve(this.memory.heap.subarray(start, start + bytes), src, srcOffset);
    });
  }

  launch(kernel: LoadedKernel, grid: Grid, args: readonly LaunchArg[], settled: LaunchSettled): void {
    const hostKernel = kernel as HostKernel;
    const placement = this.placement;
    const print = this.onPrint;
    // An idle queue runs an inline launch at once, with no promise, closure or array:
    // its argument values go into the kernel's own array, free again once the call returns.
    // Placement is decided once per launch: one an idle queue sends to the workers carries
    // that answer to its turn (the word after its arguments), where the policy is not asked again.
    const decided = this.serial.readyNow();
    if (decided && placement.placesInline(hostKernel, grid)) {
      let where: string;
      try {
        this.serial.beginNow();
        const values = placement.argValues(args, hostKernel.inlineValues);
        where = placement.launch(hostKernel, grid, values, true, print, undefined, this) as string;
      } catch (error) {
        this.serial.endNow();
        settled.launchSettled(this.serial.failNow(error), undefined);
        return;
      }
      this.serial.endNow();
      settled.launchSettled(undefined, where);
      return;
    }
    // A busy queue runs it in its turn, deciding then where. `args` is only lent for this call:
    // their values wait in the queue's word ring (no closure, promise or array per launch).
    if (args.length > MAX_ARGS) {
      const error = errors.invalidArgument(`a kernel takes at most ${MAX_ARGS} arguments, not ${args.length}`);
      settleWhen(
        this.serial.enqueue(() => Promise.reject(error)),
        settled,
      );
      return;
    }
    const at = this.serial.enqueueCall(this, hostKernel, grid, settled, args.length + 1);
    for (let i = 0; i < args.length; i++) this.serial.setWord(at + i, argValue(args[i]!));
    this.serial.setWord(at + args.length, decided ? ON_WORKERS : IN_TURN);
  }

  /**
   * SerialQueue's QueuedCall: a launch in its turn, its argument values in the queue's words,
   * then where it was placed when enqueued (ON_WORKERS), or IN_TURN for the policy to say now.
   * On the workers it returns CALL_PENDING, and `flightSettled` tells the queue how it ended.
   */
  runQueued(
    kernel: unknown,
    grid: unknown,
    serial: SerialQueue,
    at: number,
    words: number,
  ): string | typeof CALL_PENDING {
    const hostKernel = kernel as HostKernel;
    const placement = this.placement;
    const count = words - 1;
    const inline = serial.word(at + count) === IN_TURN && placement.placesInline(hostKernel, grid as Grid);
    const values = inline ? hostKernel.inlineValues : new Array<number | bigint>(count);
    for (let i = 0; i < count; i++) values[i] = serial.word(at + i) as number | bigint;
    return placement.launch(hostKernel, grid as Grid, values, inline, this.onPrint, this.onHostCall, this);
  }

  /** The worker pool's FlightSettled: a launch of this queue on the workers settled. */
  flightSettled(flight: Flight, error: OffloadError | undefined): void {
    this.placement.landed(flight, error);
    this.serial.callSettled(error, 'on the workers');
  }
}
