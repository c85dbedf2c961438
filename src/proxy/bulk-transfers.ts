/**
 * The bulk transfers of one client connection: writes (eager in the request, or streamed in
 * `chunk` frames after `ready`), reads (in the reply, or streamed as `data` frames), rectangles
 * (packed rows, one frame each way), and copies sent to a peer proxy. A streamed transfer parks
 * its queue at a gate (protocol/gate.ts) while the bytes travel, so the queue's order holds and
 * no second copy of the data is made.
 *
 * Ownership: one per ProxyConnection; its side queues (one per device, for chunks while the
 * client's queue is parked) and its writes in progress are released by `release()`.
 */
import { errors, quoted } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import { describeBuffer, directView, useBuffer } from '../api/internal.js';
import type { Device } from '../api/device.js';
import type { Event, Queue, RectCopy } from '../api/queue.js';
import { MAX_PAYLOAD_BYTES } from '../transport/frame.js';
import { streamChunks } from '../protocol/chunks.js';
import { deferred, park, type Deferred } from '../protocol/gate.js';
import type { RequestOf, WireRect } from '../protocol/messages.js';
import { EAGER_BYTES } from '../protocol/wire.js';
import type { ProxyConnection } from './connection.js';
import { parking } from './parking.js';
import { checkSpan, inSlices, runsWhole } from './rect-slices.js';

/** A rendezvous write in progress: chunks land straight in device memory. */
interface IncomingWrite {
  buffer: Buffer;
  offset: number;
  bytes: number;
  received: number;
  writes: Promise<void>[];
  /** Settles once every chunk has arrived and been written (or the transfer failed). */
  landed: Deferred;
  /** Device memory the chunks land in directly, from `ready` on (host-addressable devices). */
  direct?: Uint8Array;
}

export class BulkTransfers {
  private readonly incoming = new Map<number, IncomingWrite>();
  /** Per device, a queue for chunk transfers while the client's queue is parked at a gate. */
  private readonly sideQueues = new Map<Device, Queue>();

  constructor(private readonly connection: ProxyConnection) {}

  /** Side queues held now. */
  get queueCount(): number {
    return this.sideQueues.size;
  }

  write(request: RequestOf<'write'>, payload: Uint8Array): void {
    const { id, offset, bytes } = request;
    const connection = this.connection;
    const session = connection.session!;
    const queue = connection.queue(request.queue);
    const buffer = session.buffer(request.buffer);
    if (!request.stream) {
      if (payload.byteLength !== bytes)
        throw errors.protocol(
          `a write of ${bytes} bytes carries ${payload.byteLength}; it must carry them all or be streamed`,
        );
      // The data waits here until its queue gets to it: pending bytes, with a quota.
      const giveBack = session.take('pendingBytes', bytes);
      const done = queue.write(buffer, payload, { offset }).done;
      done.then(giveBack, giveBack);
      return connection.reply(id, done);
    }
    if (payload.byteLength !== 0 || bytes === 0)
      throw errors.protocol(
        `a streamed write must announce at least one byte and carry none, not ${bytes} announced and ${payload.byteLength} carried`,
      );
    // Rendezvous: park the queue at this point; say `ready` when it gets there.
    if (this.refusedBeyond(id, queue, 'write into', buffer, offset, bytes)) return;
    const write: IncomingWrite = { buffer, offset, bytes, received: 0, writes: [], landed: deferred() };
    this.incoming.set(id, write);
    const done = park(parking(queue), () => {
      // The queue is parked at this write: nothing of it touches the range until the gate opens.
      write.direct = directView(buffer, offset, bytes);
      connection.send({ op: 'ready', id });
      return write.landed.promise;
    });
    // The buffer stays allocated while chunks may land in it directly.
    useBuffer(buffer, done);
    connection.reply(
      id,
      done.finally(() => this.incoming.delete(id)),
    );
  }

  /** A chunk of streamed write `id`: the next bytes, in order. */
  chunk(id: number, offset: number, payload: Uint8Array): void {
    const write = this.incoming.get(id);
    if (!write) throw errors.protocol(`chunk for write ${id}, which is not waiting for data`);
    if (offset !== write.received || write.received + payload.byteLength > write.bytes || payload.byteLength === 0) {
      throw errors.protocol(
        `chunk of write ${id} at offset ${offset} (${payload.byteLength} bytes) does not continue it at ${write.received} of ${write.bytes}`,
      );
    }
    const landed =
      write.direct !== undefined &&
      payload.buffer === write.direct.buffer &&
      payload.byteOffset === write.direct.byteOffset + write.received;
    if (!landed) {
      const side = this.sideQueue(write.buffer.device);
      write.writes.push(side.write(write.buffer, payload, { offset: write.offset + write.received }).done);
    }
    write.received += payload.byteLength;
    if (write.received === write.bytes)
      Promise.all(write.writes).then(
        () => write.landed.resolve(),
        (error: unknown) => write.landed.reject(error),
      );
  }

  /** Where a `chunk` frame's payload lands: straight in device memory when that is possible and the chunk is the next one. */
  chunkTarget(meta: Record<string, unknown>, length: number): Uint8Array | undefined {
    if (meta.op !== 'chunk' || typeof meta.id !== 'number') return undefined;
    const write = this.incoming.get(meta.id);
    if (!write?.direct || meta.offset !== write.received || write.received + length > write.bytes) return undefined;
    return write.direct.subarray(write.received, write.received + length);
  }

  read(request: RequestOf<'read'>): void {
    const { id, offset, bytes } = request;
    const connection = this.connection;
    const queue = connection.queue(request.queue);
    const buffer = connection.session!.buffer(request.buffer);
    if (bytes <= EAGER_BYTES) {
      const giveBack = connection.session!.take('pendingBytes', bytes);
      const out = new Uint8Array(bytes);
      const done = queue.read(buffer, out, { offset }).done;
      // Counted until the reply has left: a client that does not read its replies pays for them.
      return connection.reply(id, done, undefined, () => out, giveBack);
    }
    // Checked here, not by a queue operation: the stream reads device memory directly. Unchecked,
    // a read past the buffer sent the memory after it, and one of 2^40 bytes a million empty frames.
    if (this.refusedBeyond(id, queue, 'read from', buffer, offset, bytes)) return;
    const done = park(parking(queue), () => this.stream(buffer, offset, bytes, id));
    // The buffer stays allocated while chunks may be sent from it directly.
    useBuffer(buffer, done);
    connection.reply(id, done);
  }

  /**
   * Sends [offset, offset+bytes) of `buffer` as `data` frames, minding back-pressure. Where the
   * device's memory is host memory, the chunks are views of it, sent as they are: the queue is
   * parked at this read, so nothing of the queue changes the range until the stream ends, and it
   * ends only when the transport holds none of the views any more (`flushed`). Copying each
   * chunk out through the device's queue first made a 64 MiB read 2.5 times as long.
   */
  private async stream(buffer: Buffer, offset: number, bytes: number, id: number): Promise<void> {
    const transport = this.connection.transport;
    const direct = directView(buffer, offset, bytes);
    const chunkAt = direct
      ? (done: number, length: number): Uint8Array => direct.subarray(done, done + length)
      : async (done: number, length: number): Promise<Uint8Array> => {
          const chunk = new Uint8Array(length);
          await this.sideQueue(buffer.device).read(buffer, chunk, { offset: offset + done }).done;
          return chunk;
        };
    const sent = await streamChunks(bytes, {
      send: async (done, length) => this.connection.send({ op: 'data', id, offset: done }, await chunkAt(done, length)),
      drained: () => transport.drained(),
      stopped: () => transport.closed,
    });
    if (direct) await transport.flushed();
    if (!sent) throw errors.deviceLost('the client connection closed during a read');
  }

  /**
   * Whether streamed transfer `id` of `bytes` at `offset` reaches beyond `buffer`: then it is
   * answered OUT_OF_BOUNDS, in its queue's order, and true returned.
   */
  private refusedBeyond(
    id: number,
    queue: Queue,
    what: string,
    buffer: Buffer,
    offset: number,
    bytes: number,
  ): boolean {
    if (offset + bytes <= buffer.byteLength) return false;
    const beyond = errors.outOfBounds(
      `${what} ${describeBuffer(buffer)}: ${bytes} bytes at offset ${offset} reach byte ${offset + bytes}, beyond its ${buffer.byteLength} bytes`,
    );
    this.connection.reply(
      id,
      park(parking(queue), () => Promise.reject(beyond)),
    );
    return true;
  }

  /** The device side of a rectangle from a request: the host side is packed rows. */
  private static rectOf(request: WireRect, side: 'src' | 'dst'): RectCopy {
    const { width, height, depth, offset, rowPitch, slicePitch } = request;
    return { width, height, depth, [side]: { offset, rowPitch, slicePitch } };
  }

  /** A rectangle of many rows, in slices (rect-slices.ts; its span checked by the caller); the buffer stays allocated until they are done. */
  private rectInSlices(
    queue: Queue,
    buffer: Buffer,
    rect: RectCopy,
    what: string,
    slice: (side: Queue, part: RectCopy) => Event,
  ): Promise<void> {
    const rows = rect.height * (rect.depth ?? 1);
    const done = inSlices(queue, rect, slice, this.connection.directory.launchTimeoutMs, `a ${what} of ${rows} rows`);
    useBuffer(buffer, done);
    return done;
  }

  /** A rectangle's rows arrive packed in the request's payload; they wait there for their queue (pending bytes). */
  writeRect(request: RequestOf<'write-rect'>, payload: Uint8Array): void {
    const connection = this.connection;
    const queue = connection.queue(request.queue);
    const buffer = connection.session!.buffer(request.buffer);
    const rect = BulkTransfers.rectOf(request, 'dst');
    const bytes = rect.width * rect.height * (rect.depth ?? 1);
    if (payload.byteLength !== bytes)
      throw errors.protocol(
        `a write-rect of ${rect.width} x ${rect.height} x ${rect.depth} bytes carries ${payload.byteLength}`,
      );
    if (!runsWhole(rect)) checkSpan('writeRect', rect, 'dst', buffer);
    const giveBack = connection.session!.take('pendingBytes', bytes);
    const done = runsWhole(rect)
      ? queue.writeRect(buffer, payload, rect).done
      : this.rectInSlices(queue, buffer, packed(rect, 'src'), 'writeRect', (side, part) =>
          side.writeRect(buffer, payload, part),
        );
    done.then(giveBack, giveBack);
    connection.reply(request.id, done);
  }

  /** A rectangle's rows go back packed in the reply's payload: at most what one frame holds. */
  readRect(request: RequestOf<'read-rect'>): void {
    const connection = this.connection;
    const queue = connection.queue(request.queue);
    const buffer = connection.session!.buffer(request.buffer);
    const rect = BulkTransfers.rectOf(request, 'src');
    const bytes = rect.width * rect.height * (rect.depth ?? 1);
    if (bytes > MAX_PAYLOAD_BYTES) {
      throw errors.invalidArgument(
        `a readRect of ${bytes} bytes is more than one reply carries (${MAX_PAYLOAD_BYTES}); read it in parts`,
      );
    }
    // Rows (pitches at least their width) never hold more than their buffer: nothing is allocated for a rectangle that cannot fit.
    if (bytes > buffer.byteLength) {
      throw errors.outOfBounds(`a readRect of ${bytes} bytes of rows is more than ${describeBuffer(buffer)} holds`);
    }
    if (!runsWhole(rect)) checkSpan('readRect', rect, 'src', buffer);
    const giveBack = connection.session!.take('pendingBytes', bytes);
    const out = new Uint8Array(bytes);
    const done = runsWhole(rect)
      ? queue.readRect(buffer, out, rect).done
      : this.rectInSlices(queue, buffer, packed(rect, 'dst'), 'readRect', (side, part) =>
          side.readRect(buffer, out, part),
        );
    connection.reply(request.id, done, undefined, () => out, giveBack);
  }

  /** A copy from a buffer here to a buffer of the same client on another proxy, proxy to proxy. */
  sendPeer(request: RequestOf<'send-peer'>): void {
    const connection = this.connection;
    const queue = connection.queue(request.queue);
    const src = connection.session!.buffer(request.src);
    const { srcOffset, bytes } = request;
    const target = {
      address: request.peer,
      grant: request.grant,
      device: request.device,
      buffer: request.dst,
      offset: request.dstOffset,
    };
    // Only to proxies this one was told about: a client cannot make it connect anywhere it likes.
    if (!connection.directory.mayLink(target.address)) {
      throw errors.unauthorized(
        `this proxy links only to its peers (offload proxy --peers); ${quoted(target.address)} is not one of them`,
      );
    }
    if (srcOffset + bytes > src.byteLength) {
      throw errors.outOfBounds(
        `copy from ${describeBuffer(src)}: ${bytes} bytes at offset ${srcOffset} reach beyond its ${src.byteLength} bytes`,
      );
    }
    const readChunk = (done: number, chunk: Uint8Array) =>
      this.sideQueue(src.device).read(src, chunk, { offset: srcOffset + done }).done;
    connection.reply(
      request.id,
      park(parking(queue), () => connection.peers.send(target, bytes, readChunk)),
    );
  }

  private sideQueue(device: Device): Queue {
    let queue = this.sideQueues.get(device);
    if (!queue) this.sideQueues.set(device, (queue = device.queue()));
    return queue;
  }

  /** The client is gone: writes waiting for chunks fail; returns the side queues, for the connection to destroy or drop. */
  release(): Queue[] {
    for (const write of this.incoming.values())
      write.landed.reject(errors.deviceLost('the client connection closed during a write'));
    this.incoming.clear();
    const queues = [...this.sideQueues.values()];
    this.sideQueues.clear();
    return queues;
  }
}

/** `rect` with its host side (`side`) laid out packed, as the wire carries its rows. */
function packed(rect: RectCopy, side: 'src' | 'dst'): RectCopy {
  return { ...rect, [side]: { offset: 0, rowPitch: rect.width, slicePitch: rect.width * rect.height } };
}
