/**
 * A queue of a remote device: every operation is one request on the connection, sent at once
 * (enqueueing never waits for the network); its promise is the reply. The proxy runs each
 * queue's requests in arrival order on a queue of its own, so order and sticky failure hold
 * there, exactly as the PluginQueue contract says.
 *
 * Operations with a part that runs here (a copy staged through host memory, waiting for an
 * event of another device) park the proxy queue at a gate: `record` says when the proxy queue
 * has reached that point, the client does its part, then `signal`s the gate, and the proxy
 * queue goes on (failing from there if the part failed).
 */
import { errors, type OffloadError } from '../../errors.js';
import { PeerQueues } from '../peer-queues.js';
import { asOffloadError } from '../../errors.js';
import { dropped } from '../../runtime/debug.js';
import { EAGER_BYTES, type WireArg } from '../../protocol/wire.js';
import type { RequestOp, Requests, WireGridSize, WireRect } from '../../protocol/messages.js';
import { decodeRecordReply } from '../../protocol/decode-reply.js';
import { park, type ParkingQueue } from '../../protocol/gate.js';
import { streamChunks } from '../../protocol/chunks.js';
import {
  forEachRow,
  rectBytes,
  type Allocation,
  type Dims,
  type EventTiming,
  type Grid,
  type HostCallListener,
  type LaunchArg,
  type LaunchSettled,
  type LoadedKernel,
  type PluginDevice,
  type PluginEvent,
  type PluginQueue,
  type PrintListener,
  type Rect,
} from '../interface.js';
import type { RemoteConnection, ReplyTarget } from './connection.js';
import { RemoteAllocation, RemoteDevice, type RemoteKernel } from './device.js';

class RemoteEvent implements PluginEvent {
  private settled = false;

  constructor(
    readonly queue: RemoteQueue,
    /** The event's id on the proxy (for `wait` requests of queues on the same connection). */
    readonly id: number,
    readonly done: Promise<void>,
    /** With timing: read on the proxy's clock (the connection stands for it). */
    readonly timing?: EventTiming,
  ) {
    const settle = () => {
      this.settled = true;
    };
    done.then(settle, settle);
  }

  query(): boolean {
    return this.settled;
  }
}

const noop = (): void => {};

/** A grid size on the wire: a number when it has one dimension. */
function wireSize(dims: Dims, total: number): WireGridSize {
  return dims[1] === 1 && dims[2] === 1 ? total : dims;
}

function bufferId(alloc: Allocation): number {
  return (alloc as RemoteAllocation).id;
}

function wireArg(arg: LaunchArg): WireArg {
  switch (arg.type) {
    case 'ptr':
      return arg.offset === 0 ? { buffer: bufferId(arg.alloc) } : { buffer: bufferId(arg.alloc), offset: arg.offset };
    case 'i64':
      return { i64: arg.value.toString() };
    default:
      return arg.value;
  }
}

/** The requests of queue operations, as a queue writes them (it adds its own `queue`). */
type QueueOp = { [Op in RequestOp]: Requests[Op] extends { queue: number } ? Op : never }[RequestOp];
type QueueRequestOf<Op extends QueueOp> = { op: Op } & Omit<Requests[Op], 'queue'>;
type QueueRequest = { [Op in QueueOp]: QueueRequestOf<Op> }[QueueOp];

/**
 * A launch's reply, told to its LaunchSettled as it arrives: no promise is made for a remote
 * launch (three of them, and their reactions, were most of what a launch allocated here).
 */
class LaunchReply implements ReplyTarget {
  constructor(
    /** The queue's count of pending operations, taken back. */
    private readonly counted: () => void,
    private readonly settled: LaunchSettled,
  ) {}

  resolve(): void {
    this.counted();
    this.settled.launchSettled(undefined, undefined);
  }

  reject(error: OffloadError): void {
    this.counted();
    this.settled.launchSettled(error, undefined);
  }
}

export class RemoteQueue implements PluginQueue {
  /** The queue's id on the proxy. */
  private readonly id: number;
  private pending = 0;
  /** Queues on other devices (and a second one on ours) for the client-side parts of copies. */
  private readonly peers = new PeerQueues();
  private readonly created: Promise<unknown>;

  /** Set by the runtime: the proxy's 'print' frames for this queue reach it (connection.ts). */
  set onPrint(listener: PrintListener | undefined) {
    this.connection.listenForPrints(this.id, listener);
  }

  /** Set by the runtime: the proxy's 'host-call' frames for this queue reach it (connection.ts). */
  set onHostCall(listener: HostCallListener | undefined) {
    this.connection.listenForHostCalls(this.id, listener);
  }

  constructor(private readonly device: RemoteDevice) {
    this.id = device.state.next('queue');
    this.created = this.connection.request({ op: 'queue', queue: this.id, device: device.index });
    this.created.catch(() => {});
  }

  private get connection(): RemoteConnection {
    return this.device.connection;
  }

  /** Sends one queue operation (its `queue` is this one) and counts it until its reply. */
  private op(
    request: QueueRequest,
    payload?: Uint8Array,
    handlers?: Parameters<RemoteConnection['request']>[2],
  ): Promise<void> {
    return this.track(this.connection.request({ ...request, queue: this.id }, payload, handlers));
  }

  /** The reactions that count an operation as no longer pending, made once per queue (one per launch cost 0.5 us). */
  private readonly settled = (): void => {
    this.pending--;
  };
  private readonly failed = (error: unknown): never => {
    this.pending--;
    throw error;
  };

  /** Work of this queue's (a request, a parked wait), counted as pending until it settles. */
  private track(result: Promise<unknown>): Promise<void> {
    this.pending++;
    const done = result.then(this.settled, this.failed);
    done.catch(noop); // observed by whoever enqueued it; never an unhandled rejection
    return done;
  }

  submit(dst: Allocation, dstOffset: number, src: Uint8Array): Promise<void> {
    const write = { op: 'write', buffer: bufferId(dst), offset: dstOffset, bytes: src.byteLength } as const;
    if (src.byteLength <= EAGER_BYTES) return this.op(write, src);
    return this.streamedWrite(write, () => src);
  }

  /**
   * A rendezvous write: the proxy says `ready` when its queue reaches the write; the bytes then
   * go as chunks, pausing whenever the connection's send buffer is full, so a large write holds
   * no second copy and lets other queues' frames through.
   */
  private streamedWrite(write: QueueRequestOf<'write'>, source: () => Uint8Array): Promise<void> {
    const connection = this.connection;
    const id = connection.peekId();
    const stream = async () => {
      const src = source();
      await streamChunks(src.byteLength, {
        send: (offset, length) => connection.post({ op: 'chunk', id, offset }, src.subarray(offset, offset + length)),
        drained: () => connection.drained(),
        stopped: () => connection.lost !== undefined,
      });
    };
    return this.op({ ...write, stream: true }, undefined, { onReady: () => void stream() });
  }

  retrieve(dst: Uint8Array, src: Allocation, srcOffset: number): Promise<void> {
    const reply = this.connection.request(
      { op: 'read', queue: this.id, buffer: bufferId(src), offset: srcOffset, bytes: dst.byteLength },
      undefined,
      {
        dataTarget: (offset, length) =>
          Number.isSafeInteger(offset) && offset >= 0 && offset + length <= dst.byteLength
            ? dst.subarray(offset, offset + length)
            : undefined,
        onData: (offset, payload) => {
          if (offset + payload.byteLength > dst.byteLength)
            throw errors.protocol(
              `read data at ${offset} (${payload.byteLength} bytes) overruns the ${dst.byteLength} bytes asked for`,
            );
          // Usually the decoder already put the bytes in place (dataTarget).
          if (payload.buffer !== dst.buffer || payload.byteOffset !== dst.byteOffset + offset) dst.set(payload, offset);
        },
      },
    );
    return this.track(
      reply.then((frame) => {
        if (frame.payload.byteLength > 0) {
          if (frame.payload.byteLength !== dst.byteLength)
            throw errors.protocol(`read reply of ${frame.payload.byteLength} bytes for ${dst.byteLength} asked`);
          dst.set(frame.payload);
        }
      }),
    );
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
    const own = this.device;
    const other = srcDevice === own ? dstDevice : srcDevice;
    if (own.sameProxy(other)) {
      return this.op({ op: 'copy', src: bufferId(src), srcOffset, dst: bufferId(dst), dstOffset, bytes });
    }
    if (srcDevice === own && other instanceof RemoteDevice && own.connection.linksTo(other.connection)) {
      // Proxy to proxy: ours sends to the other one directly, as the client's agent there.
      return this.op({
        op: 'send-peer',
        src: bufferId(src),
        srcOffset,
        bytes,
        peer: other.connection.address,
        grant: (dst as RemoteAllocation).grant,
        device: other.index,
        dst: bufferId(dst),
        dstOffset,
      });
    }
    return this.gated(async () => {
      if (other instanceof RemoteDevice && other.connection.linksTo(own.connection)) {
        // Pulling from another proxy that links to ours: that proxy's queue pushes the bytes here.
        await this.peers.of(other).exchange(srcDevice, src, srcOffset, dstDevice, dst, dstOffset, bytes);
        return;
      }
      // A device of another plugin, or a proxy that does not link to ours: through host memory.
      const staging = new Uint8Array(bytes);
      await this.peers.of(srcDevice).retrieve(staging, src, srcOffset);
      await this.peers.of(dstDevice).submit(dst, dstOffset, staging);
    });
  }

  /**
   * Runs `work` here once everything enqueued before it has completed on the proxy, and holds
   * the proxy queue's later operations until it is done.
   */
  private gated(work: () => Promise<void>): Promise<void> {
    return this.track(park(this.parking, work));
  }

  /**
   * This queue as the gate parks it: a mark is a `record`, a stop a `wait-host` of a new gate
   * that this client `signal`s once `until` settles (with its error if it failed).
   */
  private readonly parking: ParkingQueue = {
    reach: () => this.op({ op: 'record', event: this.device.state.next('event') }),
    stopUntil: (until) => {
      const gate = this.device.state.next('gate');
      const held = this.op({ op: 'wait-host', gate });
      until.then(
        () => this.signal(gate),
        (error: unknown) => this.signal(gate, error),
      );
      return held;
    },
  };

  private signal(gate: number, error?: unknown): void {
    const failure =
      error === undefined ? undefined : asOffloadError(error, `the host side of a copy through gate ${gate}`);
    this.connection
      .request({ op: 'signal', gate, error: failure && { code: failure.code, message: failure.message } })
      .catch(dropped(`proxy ${this.connection.address}`, `signalling gate ${gate}`));
  }

  launch(kernel: LoadedKernel, grid: Grid, args: readonly LaunchArg[], settled: LaunchSettled): void {
    const { name, image } = kernel as RemoteKernel;
    // One literal, no spreads: this is every remote launch. One-dimensional sizes travel as
    // numbers, as before dimensions existed.
    const request: { op: 'launch' } & Requests['launch'] = {
      op: 'launch',
      queue: this.id,
      image,
      kernel: name,
      teams: wireSize(grid.teamDims, grid.teams),
      threads: wireSize(grid.threadDims, grid.threads),
      args: args.map(wireArg),
    };
    if (grid.teamMemoryBytes > 0) request.teamMemoryBytes = grid.teamMemoryBytes;
    if (grid.timeoutMs !== undefined) request.timeoutMs = grid.timeoutMs;
    this.pending++;
    this.connection.requestTo(request, new LaunchReply(this.settled, settled));
  }

  waitEvent(event: PluginEvent): Promise<void> {
    if (event instanceof RemoteEvent && event.queue.connection === this.connection) {
      return this.op({ op: 'wait', event: event.id });
    }
    return this.parking.stopUntil(event.done);
  }

  record(timing = false): PluginEvent {
    const id = this.device.state.next('event');
    if (!timing) return new RemoteEvent(this, id, this.op({ op: 'record', event: id }));
    const at = this.connection
      .request({ op: 'record', event: id, timing: true, queue: this.id })
      .then((reply) => decodeRecordReply(reply, this.connection.address, id));
    at.catch(() => {});
    return new RemoteEvent(this, id, this.track(at), { clock: this.connection, at });
  }

  // --- liboffload's further operations: one frame each, however many bytes they touch ---

  fill(dst: Allocation, offset: number, bytes: number, pattern: Uint8Array): Promise<void> {
    return this.op({ op: 'fill', buffer: bufferId(dst), offset, bytes, pattern: [...pattern] });
  }

  /** The device side of `rect` on the wire (the host side travels packed: rows one after another). */
  private static deviceSide(alloc: Allocation, rect: Rect, side: 'src' | 'dst'): WireRect & { buffer: number } {
    return {
      buffer: bufferId(alloc),
      width: rect.width,
      height: rect.height,
      depth: rect.depth,
      offset: rect[`${side}Offset`],
      rowPitch: rect[`${side}RowPitch`],
      slicePitch: rect[`${side}SlicePitch`],
    };
  }

  submitRect(dst: Allocation, src: Uint8Array, rect: Rect): Promise<void> {
    const packed = new Uint8Array(rectBytes(rect));
    const { width, height } = rect;
    forEachRow({ ...rect, dstOffset: 0, dstRowPitch: width, dstSlicePitch: width * height }, (srcAt, at) =>
      packed.set(src.subarray(srcAt, srcAt + width), at),
    );
    return this.op({ op: 'write-rect', ...RemoteQueue.deviceSide(dst, rect, 'dst') }, packed);
  }

  retrieveRect(dst: Uint8Array, src: Allocation, rect: Rect): Promise<void> {
    const reply = this.connection.request({
      op: 'read-rect',
      queue: this.id,
      ...RemoteQueue.deviceSide(src, rect, 'src'),
    });
    const { width, height } = rect;
    return this.track(
      reply.then((frame) => {
        const packed = frame.payload;
        if (packed.byteLength !== rectBytes(rect))
          throw errors.protocol(`read-rect reply of ${packed.byteLength} bytes for ${rectBytes(rect)} asked`);
        forEachRow({ ...rect, srcOffset: 0, srcRowPitch: width, srcSlicePitch: width * height }, (at, dstAt) =>
          dst.set(packed.subarray(at, at + width), dstAt),
        );
      }),
    );
  }

  copyRect(dst: Allocation, src: Allocation, rect: Rect): Promise<void> {
    const srcSide = RemoteQueue.deviceSide(src, rect, 'src');
    const dstSide = RemoteQueue.deviceSide(dst, rect, 'dst');
    return this.op({
      op: 'copy-rect',
      width: rect.width,
      height: rect.height,
      depth: rect.depth,
      src: srcSide.buffer,
      srcOffset: srcSide.offset,
      srcRowPitch: srcSide.rowPitch,
      srcSlicePitch: srcSide.slicePitch,
      dst: dstSide.buffer,
      dstOffset: dstSide.offset,
      dstRowPitch: dstSide.rowPitch,
      dstSlicePitch: dstSide.slicePitch,
    });
  }

  /** The proxy queue is parked at a gate while `fn` runs here (see gated). */
  hostFunction(fn: () => Promise<void>): Promise<void> {
    return this.gated(fn);
  }

  synchronize(): Promise<void> {
    return this.connection.request({ op: 'sync', queue: this.id }).then(() => {});
  }

  query(): boolean {
    return this.pending === 0;
  }

  async destroy(): Promise<void> {
    this.connection.listenForPrints(this.id, undefined);
    this.connection.listenForHostCalls(this.id, undefined);
    await this.peers.destroy();
    if (this.connection.lost) return;
    await this.connection
      .request({ op: 'queue-destroy', queue: this.id })
      .catch(dropped(`proxy ${this.connection.address}`, `destroying queue ${this.id} there`));
  }
}
