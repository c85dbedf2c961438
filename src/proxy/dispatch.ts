/**
 * What the proxy does for each request of a logged-in client: one case per op of the typed
 * protocol (protocol/messages.ts), each a call on the proxy's own runtime through the public API
 * (so every request gets the same checks a local program gets), answered by one `reply`. Queue
 * operations are enqueued synchronously, so per-queue order is the client's order; bulk
 * transfers are bulk-transfers.ts's.
 */
import { errors, OffloadError, quoted } from '../errors.js';
import type { Event, KernelArgument } from '../api/queue.js';
import type { MemoryInfo } from '../plugins/interface.js';
import { encodeBundle } from '../image/bundle.js';
import { deferred } from '../protocol/gate.js';
import { isKernelOf, kernelKey } from '../protocol/kernel-key.js';
import type { LoadedKernelInfo, Request, RequestOf } from '../protocol/messages.js';
import type { ProxyConnection } from './connection.js';
import { parking } from './parking.js';
import { checkSpan, inSlices, runsWhole } from './rect-slices.js';
import type { Session } from './session.js';

/** What a peer link may do: make its own queues and write into the buffer it was granted. */
const LINK_OPS = new Set<Request['op']>(['ping', 'queue', 'queue-destroy', 'write', 'sync']);

export function dispatch(connection: ProxyConnection, request: Request, payload: Uint8Array): void {
  const session = connection.session!;
  const { id } = request;
  if (
    connection.attached &&
    (!LINK_OPS.has(request.op) || (request.op === 'write' && request.buffer !== connection.granted))
  ) {
    throw errors.unauthorized(
      `a peer link may only write into the buffer it was granted, not ${quoted(request.op)} there`,
    );
  }
  connection.directory.metrics.request(session, request);
  switch (request.op) {
    case 'hello':
      // Once logged in, a second hello is no request at all.
      throw errors.protocol("unknown op 'hello'");
    case 'ping':
      return connection.reply(id, Promise.resolve());
    // These make what later requests name: those wait for them (pipelining stays safe).
    case 'register':
      return connection.reply(id, connection.made(register(connection, request, payload, session)));
    case 'load':
      return connection.reply(id, connection.made(load(connection, request, session)), (kernels) => ({ kernels }));
    case 'unload':
      return connection.reply(id, unload(connection, request, session));
    case 'alloc':
      return connection.reply(id, connection.made(alloc(connection, request, session)), (made) => made);
    case 'global':
      return connection.reply(id, connection.made(global(connection, request, session)), (made) => made);
    case 'free': {
      const buffer = session.buffer(request.buffer);
      // A device global was never counted against the quotas; it goes with its image.
      if (buffer.isGlobal)
        throw errors.invalidBuffer(`buffer ${request.buffer} is a device global: it lives until its image is unloaded`);
      session.buffers.delete(request.buffer);
      connection.directory.revoke(session, request.buffer);
      return connection.reply(
        id,
        buffer.free().finally(() => {
          session.give('memoryBytes', buffer.byteLength);
          session.give('buffers');
        }),
      );
    }
    case 'queue': {
      if (connection.queues.has(request.queue)) throw errors.invalidArgument(`queue ${request.queue} exists already`);
      const device = connection.device(request.device);
      try {
        session.take('queues');
      } catch (error) {
        // Its client learns of it at the queue's first operation: that one fails with this error.
        connection.refusedQueue(request.queue, error as OffloadError);
        throw error;
      }
      const queue = device.queue();
      connection.queues.set(request.queue, queue);
      connection.clientQueueIds.set(queue.id, request.queue);
      return connection.reply(id, Promise.resolve());
    }
    case 'queue-destroy': {
      const queue = connection.queue(request.queue);
      connection.queues.delete(request.queue);
      connection.clientQueueIds.delete(queue.id);
      session.give('queues');
      return connection.reply(id, queue.destroy());
    }
    case 'write':
      return connection.bulk.write(request, payload);
    case 'read':
      return connection.bulk.read(request);
    case 'copy': {
      const queue = connection.queue(request.queue);
      const event = queue.copy(session.buffer(request.dst), session.buffer(request.src), {
        srcOffset: request.srcOffset,
        dstOffset: request.dstOffset,
        byteLength: request.bytes,
      });
      return connection.reply(id, event.done);
    }
    case 'send-peer':
      return connection.bulk.sendPeer(request);
    case 'launch':
      return connection.reply(id, connection.directory.metrics.launch(session, launch(connection, request, session)));
    case 'record': {
      if (request.event <= connection.lastEvent)
        throw errors.protocol(`event ids must increase: ${request.event} after ${connection.lastEvent}`);
      connection.lastEvent = request.event;
      const event = connection.queue(request.queue).record({ timing: request.timing });
      // Only failed events are kept: an older id that is absent completed successfully.
      connection.events.set(request.event, event);
      event.done.then(
        () => connection.events.delete(request.event),
        () => {},
      );
      // A timed event's reply says when this proxy's queue reached it, on this proxy's clock.
      if (request.timing) return connection.reply(id, event.plugin.timing!.at, (time) => ({ time }));
      return connection.reply(id, event.done);
    }
    case 'wait': {
      if (request.event > connection.lastEvent)
        throw errors.invalidArgument(`event ${request.event} was never recorded on this connection`);
      const event = connection.events.get(request.event);
      const queue = connection.queue(request.queue);
      return connection.reply(id, event ? queue.wait(event).done : queue.record().done);
    }
    case 'wait-host': {
      const queue = connection.queue(request.queue);
      // A replaced gate could never be signalled: its queue would wait forever.
      if (connection.gates.has(request.gate)) throw errors.invalidArgument(`gate ${request.gate} exists already`);
      const gate = deferred();
      connection.gates.set(request.gate, gate);
      return connection.reply(id, parking(queue).stopUntil(gate.promise));
    }
    case 'signal': {
      const gate = connection.gates.get(request.gate);
      if (!gate) throw errors.invalidArgument(`gate ${request.gate} does not exist (or was signalled already)`);
      connection.gates.delete(request.gate);
      if (request.error) gate.reject(new OffloadError(request.error.code, request.error.message));
      else gate.resolve();
      return connection.reply(id, Promise.resolve());
    }
    case 'sync':
      return connection.reply(id, connection.queue(request.queue).finish());
    // liboffload's further operations (fill, rectangles, memory info): one frame each.
    case 'fill':
      return connection.reply(
        id,
        connection
          .queue(request.queue)
          .fill(session.buffer(request.buffer), Uint8Array.from(request.pattern), request.offset, request.bytes).done,
      );
    case 'write-rect':
      return connection.bulk.writeRect(request, payload);
    case 'read-rect':
      return connection.bulk.readRect(request);
    case 'copy-rect': {
      const { width, height, depth } = request;
      const rect = {
        width,
        height,
        depth,
        src: { offset: request.srcOffset, rowPitch: request.srcRowPitch, slicePitch: request.srcSlicePitch },
        dst: { offset: request.dstOffset, rowPitch: request.dstRowPitch, slicePitch: request.dstSlicePitch },
      };
      const queue = connection.queue(request.queue);
      const [dst, src] = [session.buffer(request.dst), session.buffer(request.src)];
      if (runsWhole(rect)) return connection.reply(id, queue.copyRect(dst, src, rect).done);
      // Many rows: in slices, so that the proxy's other clients are served meanwhile.
      checkSpan('copyRect', rect, 'src', src);
      checkSpan('copyRect', rect, 'dst', dst);
      const done = inSlices(
        queue,
        rect,
        (side, part) => side.copyRect(dst, src, part),
        connection.directory.launchTimeoutMs,
        `a copyRect of ${height * depth} rows`,
      );
      dst.use(done);
      src.use(done);
      return connection.reply(id, done);
    }
    case 'memory-info':
      return connection.reply(id, memoryInfo(connection, request, session), (info) => ({ ...info }));
    case 'trace': {
      // The spans of this session's work so far (none unless its hello asked), as JSON in the payload.
      const taken = session.tracer?.take() ?? { events: [], dropped: 0 };
      return connection.reply(
        id,
        Promise.resolve(),
        () => ({ dropped: taken.dropped }),
        () => new TextEncoder().encode(JSON.stringify(taken.events)),
      );
    }
  }
}

async function register(
  connection: ProxyConnection,
  request: RequestOf<'register'>,
  payload: Uint8Array,
  session: Session,
): Promise<void> {
  connection.ownerOnly('register images');
  const imageId = request.image;
  if (session.images.has(imageId)) throw errors.protocol(`image ${imageId} is registered already`);
  // The image travels alone; the proxy wraps it in a one-image bundle, which the bundle
  // decoder then validates field by field like any bundle from disk.
  const bundle = encodeBundle(
    { name: request.name, images: [{ ...request.info, offset: 0, size: 0 }], entries: [...request.entries] },
    [payload],
  );
  const giveBack = session.takeAll(['images', 1], ['imageBytes', payload.byteLength]);
  try {
    session.images.set(imageId, await session.runtime.register(bundle));
    session.imageBytes.set(imageId, payload.byteLength);
  } catch (error) {
    for (const give of giveBack) give();
    throw error;
  }
}

async function load(
  connection: ProxyConnection,
  request: RequestOf<'load'>,
  session: Session,
): Promise<LoadedKernelInfo[]> {
  const imageId = request.image;
  const image = session.image(imageId);
  const device = connection.device(request.device);
  const kernels: LoadedKernelInfo[] = [];
  for (const entry of image.kernels) {
    // A bundle's entries are every image's kernels; the device's image may have fewer.
    const kernel = await device.kernel(image, entry.name).catch((error: unknown) => {
      if (OffloadError.is(error, 'NOT_FOUND')) return undefined;
      throw error;
    });
    if (!kernel) continue;
    session.kernels.set(kernelKey(imageId, device.id, entry.name), kernel);
    const { imageFormat: format, staticDataBytes: staticBytes } = kernel.info;
    kernels.push({ name: entry.name, params: [...kernel.params], format, staticBytes });
  }
  return kernels;
}

async function unload(connection: ProxyConnection, request: RequestOf<'unload'>, session: Session): Promise<void> {
  connection.ownerOnly('unload images');
  const imageId = request.image;
  const image = session.image(imageId);
  session.images.delete(imageId);
  session.give('images');
  session.give('imageBytes', session.imageBytes.get(imageId) ?? 0);
  session.imageBytes.delete(imageId);
  for (const key of [...session.kernels.keys()]) if (isKernelOf(key, imageId)) session.kernels.delete(key);
  await image.unregister();
}

async function alloc(
  connection: ProxyConnection,
  request: RequestOf<'alloc'>,
  session: Session,
): Promise<{ address: number; grant: string }> {
  connection.ownerOnly('allocate');
  const bufferId = request.buffer;
  if (session.buffers.has(bufferId)) throw errors.protocol(`buffer ${bufferId} exists already`);
  const device = connection.device(request.device);
  const giveBack = session.takeAll(['buffers', 1], ['memoryBytes', request.bytes]);
  try {
    const buffer = await device.alloc(request.bytes, { kind: request.kind as never });
    session.buffers.set(bufferId, buffer);
    // The grant goes to the client, which hands it to a proxy it asks to copy here.
    return { address: buffer.allocation.address ?? 0, grant: connection.directory.grant(session, bufferId) };
  } catch (error) {
    for (const give of giveBack) give();
    throw error;
  }
}

/** A device global of image `image` on a device, named `buffer` for the client from now on. */
async function global(
  connection: ProxyConnection,
  request: RequestOf<'global'>,
  session: Session,
): Promise<{ bytes: number; address: number }> {
  connection.ownerOnly('name device globals');
  const bufferId = request.buffer;
  if (session.buffers.has(bufferId)) throw errors.protocol(`buffer ${bufferId} exists already`);
  const library = session.image(request.image);
  const device = connection.device(request.device);
  const giveBack = session.take('buffers');
  try {
    const { buffer } = await library.global(device, request.name);
    session.buffers.set(bufferId, buffer);
    return { bytes: buffer.byteLength, address: buffer.allocation.address ?? 0 };
  } catch (error) {
    giveBack();
    throw error;
  }
}

function launch(connection: ProxyConnection, request: RequestOf<'launch'>, session: Session): Event {
  const queue = connection.queue(request.queue);
  const kernel = session.kernels.get(kernelKey(request.image, queue.device.id, request.kernel));
  if (!kernel)
    throw errors.notFound(
      `kernel '${request.kernel}' of image ${request.image} is not loaded on device ${queue.device.id}`,
    );
  const args: KernelArgument[] = request.args.map((arg) => {
    if (typeof arg === 'number') return arg;
    if ('i64' in arg) return BigInt(arg.i64);
    const buffer = session.buffer(arg.buffer);
    return arg.offset ? buffer.at(arg.offset) : buffer;
  });
  // The client's time limit, capped by the proxy's where the device can stop a launch: no
  // client holds a shared device forever.
  const asked = request.timeoutMs;
  const cap = queue.device.info.launchTimeouts ? connection.directory.launchTimeoutMs : undefined;
  const timeoutMs = asked === undefined ? cap : Math.min(asked, cap ?? asked);
  const grid = { teams: request.teams, threads: request.threads, teamMemoryBytes: request.teamMemoryBytes, timeoutMs };
  return queue.launch(kernel, grid, args);
}

/** The device's memory as this client may use it: within what is left of its memory quota. */
async function memoryInfo(
  connection: ProxyConnection,
  request: RequestOf<'memory-info'>,
  session: Session,
): Promise<MemoryInfo> {
  const info = await connection.device(request.device).memoryInfo();
  const left = Math.max(0, session.quotas.memoryBytes - session.usage.memoryBytes);
  const freeBytes = Math.min(info.freeBytes, left);
  return {
    totalBytes: info.totalBytes,
    freeBytes,
    largestFreeBlockBytes: Math.min(info.largestFreeBlockBytes, freeBytes),
  };
}
