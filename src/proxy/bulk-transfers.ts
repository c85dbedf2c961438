/**
 * The handlers of bulk transfers (handlers.ts's table takes them as they are): writes (eager in
 * the request, or streamed in `chunk` frames after `ready`), reads (in the reply, or streamed as
 * `data` frames), rectangles (packed rows, one frame each way), and copies sent to a peer proxy.
 * A streamed transfer parks its queue at a gate (protocol/gate.ts) while the bytes travel, so
 * the queue's order holds and no second copy of the data is made. Each is a function of the
 * client's session (client-session.ts: its streamed writes in progress, its side queues) and the
 * request, returning the request's reply.
 */
import { errors, quoted } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import { describeBuffer, directView, useBuffer } from '../api/internal.js';
import type { Event, Queue, RectCopy } from '../api/queue.js';
import { MAX_PAYLOAD_BYTES } from '../transport/frame.js';
import { streamChunks } from '../protocol/chunks.js';
import { deferred, park } from '../protocol/gate.js';
import type { RequestOf, WireRect } from '../protocol/messages.js';
import { EAGER_BYTES } from '../protocol/wire.js';
import type { IncomingWrite, ClientSession } from './client-session.js';
import type { Reply } from './connection.js';
import { parking } from './parking.js';
import { checkSpan, inSlices, runsWhole } from './rect-slices.js';

export function write(client: ClientSession, request: RequestOf<'write'>, payload: Uint8Array): Reply {
  const { id, offset, bytes } = request;
  const session = client.session!;
  const queue = client.queue(request.queue);
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
    return { done };
  }
  if (payload.byteLength !== 0 || bytes === 0)
    throw errors.protocol(
      `a streamed write must announce at least one byte and carry none, not ${bytes} announced and ${payload.byteLength} carried`,
    );
  // Rendezvous: park the queue at this point; say `ready` when it gets there.
  const beyond = refusedBeyond(queue, 'write into', buffer, offset, bytes);
  if (beyond) return beyond;
  const incoming: IncomingWrite = { buffer, offset, bytes, received: 0, writes: [], landed: deferred() };
  client.incoming.set(id, incoming);
  const done = park(parking(queue), () => {
    // The queue is parked at this write: nothing of it touches the range until the gate opens.
    incoming.direct = directView(buffer, offset, bytes);
    client.connection.send({ op: 'ready', id });
    return incoming.landed.promise;
  });
  // The buffer stays allocated while chunks may land in it directly.
  useBuffer(buffer, done);
  return { done: done.finally(() => client.incoming.delete(id)) };
}

export function read(client: ClientSession, request: RequestOf<'read'>): Reply {
  const { id, offset, bytes } = request;
  const queue = client.queue(request.queue);
  const buffer = client.session!.buffer(request.buffer);
  if (bytes <= EAGER_BYTES) {
    const giveBack = client.session!.take('pendingBytes', bytes);
    const out = new Uint8Array(bytes);
    const done = queue.read(buffer, out, { offset }).done;
    // Counted until the reply has left: a client that does not read its replies pays for them.
    return { done, payload: () => out, gone: giveBack };
  }
  // Checked here, not by a queue operation: the stream reads device memory directly. Unchecked,
  // a read past the buffer sent the memory after it, and one of 2^40 bytes a million empty frames.
  const beyond = refusedBeyond(queue, 'read from', buffer, offset, bytes);
  if (beyond) return beyond;
  const done = park(parking(queue), () => stream(client, buffer, offset, bytes, id));
  // The buffer stays allocated while chunks may be sent from it directly.
  useBuffer(buffer, done);
  return { done };
}

/**
 * Sends [offset, offset+bytes) of `buffer` as `data` frames, minding back-pressure. Where the
 * device's memory is host memory, the chunks are views of it, sent as they are: the queue is
 * parked at this read, so nothing of the queue changes the range until the stream ends, and it
 * ends only when the transport holds none of the views any more (`flushed`). Copying each
 * chunk out through the device's queue first made a 64 MiB read 2.5 times as long.
 */
async function stream(client: ClientSession, buffer: Buffer, offset: number, bytes: number, id: number): Promise<void> {
  const { connection } = client;
  const { transport } = connection;
  const direct = directView(buffer, offset, bytes);
  const chunkAt = direct
    ? (done: number, length: number): Uint8Array => direct.subarray(done, done + length)
    : async (done: number, length: number): Promise<Uint8Array> => {
        const chunk = new Uint8Array(length);
        await client.sideQueue(buffer.device).read(buffer, chunk, { offset: offset + done }).done;
        return chunk;
      };
  const sent = await streamChunks(bytes, {
    send: async (done, length) => connection.send({ op: 'data', id, offset: done }, await chunkAt(done, length)),
    drained: () => transport.drained(),
    stopped: () => transport.closed,
  });
  if (direct) await transport.flushed();
  if (!sent) throw errors.deviceLost('the client connection closed during a read');
}

/**
 * When a streamed transfer of `bytes` at `offset` reaches beyond `buffer`: its reply, OUT_OF_BOUNDS
 * in its queue's order; undefined when it fits.
 */
function refusedBeyond(queue: Queue, what: string, buffer: Buffer, offset: number, bytes: number): Reply | undefined {
  if (offset + bytes <= buffer.byteLength) return undefined;
  const beyond = errors.outOfBounds(
    `${what} ${describeBuffer(buffer)}: ${bytes} bytes at offset ${offset} reach byte ${offset + bytes}, beyond its ${buffer.byteLength} bytes`,
  );
  return { done: park(parking(queue), () => Promise.reject(beyond)) };
}

/** The device side of a rectangle from a request: the host side is packed rows. */
function rectOf(request: WireRect, side: 'src' | 'dst'): RectCopy {
  const { width, height, depth, offset, rowPitch, slicePitch } = request;
  return { width, height, depth, [side]: { offset, rowPitch, slicePitch } };
}

/** A rectangle of many rows, in slices (rect-slices.ts; its span checked by the caller); the buffer stays allocated until they are done. */
function rectInSlices(
  client: ClientSession,
  queue: Queue,
  buffer: Buffer,
  rect: RectCopy,
  what: string,
  slice: (side: Queue, part: RectCopy) => Event,
): Promise<void> {
  const rows = rect.height * (rect.depth ?? 1);
  const done = inSlices(queue, rect, slice, client.directory.launchTimeoutMs, `a ${what} of ${rows} rows`);
  useBuffer(buffer, done);
  return done;
}

/** A rectangle's rows arrive packed in the request's payload; they wait there for their queue (pending bytes). */
export function writeRect(client: ClientSession, request: RequestOf<'write-rect'>, payload: Uint8Array): Reply {
  const queue = client.queue(request.queue);
  const buffer = client.session!.buffer(request.buffer);
  const rect = rectOf(request, 'dst');
  const bytes = rect.width * rect.height * (rect.depth ?? 1);
  if (payload.byteLength !== bytes)
    throw errors.protocol(
      `a write-rect of ${rect.width} x ${rect.height} x ${rect.depth} bytes carries ${payload.byteLength}`,
    );
  if (!runsWhole(rect)) checkSpan('writeRect', rect, 'dst', buffer);
  const giveBack = client.session!.take('pendingBytes', bytes);
  const done = runsWhole(rect)
    ? queue.writeRect(buffer, payload, rect).done
    : rectInSlices(client, queue, buffer, packed(rect, 'src'), 'writeRect', (side, part) =>
        side.writeRect(buffer, payload, part),
      );
  done.then(giveBack, giveBack);
  return { done };
}

/** A rectangle's rows go back packed in the reply's payload: at most what one frame holds. */
export function readRect(client: ClientSession, request: RequestOf<'read-rect'>): Reply {
  const queue = client.queue(request.queue);
  const buffer = client.session!.buffer(request.buffer);
  const rect = rectOf(request, 'src');
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
  const giveBack = client.session!.take('pendingBytes', bytes);
  const out = new Uint8Array(bytes);
  const done = runsWhole(rect)
    ? queue.readRect(buffer, out, rect).done
    : rectInSlices(client, queue, buffer, packed(rect, 'dst'), 'readRect', (side, part) =>
        side.readRect(buffer, out, part),
      );
  return { done, payload: () => out, gone: giveBack };
}

/** A copy from a buffer here to a buffer of the same client on another proxy, proxy to proxy. */
export function sendPeer(client: ClientSession, request: RequestOf<'send-peer'>): Reply {
  const queue = client.queue(request.queue);
  const src = client.session!.buffer(request.src);
  const { srcOffset, bytes } = request;
  const target = {
    address: request.peer,
    grant: request.grant,
    device: request.device,
    buffer: request.dst,
    offset: request.dstOffset,
  };
  // Only to proxies this one was told about: a client cannot make it connect anywhere it likes.
  if (!client.directory.mayLink(target.address)) {
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
    client.sideQueue(src.device).read(src, chunk, { offset: srcOffset + done }).done;
  return { done: park(parking(queue), () => client.peers.send(target, bytes, readChunk)) };
}

/** `rect` with its host side (`side`) laid out packed, as the wire carries its rows. */
function packed(rect: RectCopy, side: 'src' | 'dst'): RectCopy {
  return { ...rect, [side]: { offset: 0, rowPitch: rect.width, slicePitch: rect.width * rect.height } };
}
