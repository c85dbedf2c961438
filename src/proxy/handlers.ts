/**
 * What the proxy does for each request of a client: the handler table, one handler per op of the
 * typed protocol (protocol/messages.ts), in the shape of vscode-jsonrpc's `onRequest(type,
 * handler)`. Each handler is a function of the client's session (client-session.ts) and the
 * request that returns the request's reply (connection.ts, `Reply`) or throws an OffloadError (the
 * reply's error; PROTOCOL closes the connection). It works on the proxy's own runtime through the
 * api (so every request gets the same checks a local program gets). Queue operations are
 * enqueued synchronously, so per-queue order is the client's order; bulk transfers are
 * bulk-transfers.ts's, the login handshake.ts's.
 *
 * `serveClient` joins a new connection (frames, order, back-pressure) to a new client session
 * through this table.
 */
import { performance } from 'node:perf_hooks';
import { errors, OffloadError, quoted } from '../errors.js';
import type { Event, KernelArgument } from '../api/queue.js';
import type { Runtime } from '../api/runtime.js';
import { deviceAddress, pluginEvent, queueId, useBuffer } from '../api/internal.js';
import type { MemoryInfo } from '../plugins/interface.js';
import { encodeBundle } from '../image/bundle.js';
import type { Transport } from '../transport/transport.js';
import { deferred } from '../protocol/gate.js';
import { isKernelOf, kernelKey } from '../protocol/kernel-key.js';
import type { LoadedKernelInfo, Request, RequestOf } from '../protocol/messages.js';
import * as bulk from './bulk-transfers.js';
import { ClientSession } from './client-session.js';
import { ProxyConnection, type Reply } from './connection.js';
import { hello } from './handshake.js';
import { parking } from './parking.js';
import type { PeerLinks } from './peer-links.js';
import { checkSpan, inSlices, runsWhole } from './rect-slices.js';
import type { Session } from './session.js';
import type { ServingDirectory } from './metrics.js';

/** A request's handler: its reply, or undefined when it answers by itself (hello); throws for an error reply. */
type Handler<Op extends Request['op']> = (
  client: ClientSession,
  request: RequestOf<Op>,
  payload: Uint8Array,
) => Reply | undefined;

/** One handler per op: a new op of the protocol does not compile until it has its handler here. */
type HandlerTable = { readonly [Op in Request['op']]: Handler<Op> };

/** A reply with no fields when `done` resolves. */
const replyWhen = (done: Promise<unknown>): Reply => ({ done });
/** A reply with fields of `done`'s value (typed where it is made; the table holds every op's). */
const replyWith = <T>(reply: Reply<T>): Reply => reply as Reply;
const DONE: Reply = { done: Promise.resolve() };
/** The reply of a request that completed within its handler (an inline launch): it may go out at once. */
const COMPLETED: Reply = { done: DONE.done, now: true };

/** What a peer link may do: make its own queues and write into the buffer it was granted. */
const LINK_OPS = new Set<Request['op']>(['ping', 'queue', 'queue-destroy', 'write', 'sync']);

export const handlers: HandlerTable = {
  // Before login, hello opens the session; once logged in, a second hello is no request at all.
  hello: (client, request) => {
    if (client.session) throw errors.protocol("unknown op 'hello'");
    return hello(client, request);
  },
  ping: () => DONE,
  // These make what later requests name: those wait for them (pipelining stays safe).
  register: (client, request, payload) => ({ done: register(client, request, payload, client.session!), makes: true }),
  load: (client, request) =>
    replyWith({ done: load(client, request, client.session!), fields: (kernels) => ({ kernels }), makes: true }),
  unload: (client, request) => replyWhen(unload(client, request, client.session!)),
  alloc: (client, request) =>
    replyWith({ done: alloc(client, request, client.session!), fields: (made) => made, makes: true }),
  global: (client, request) =>
    replyWith({ done: global(client, request, client.session!), fields: (made) => made, makes: true }),
  free: (client, request) => {
    const session = client.session!;
    const buffer = session.buffer(request.buffer);
    // A device global was never counted against the quotas; it goes with its image.
    if (buffer.isGlobal)
      throw errors.invalidBuffer(`buffer ${request.buffer} is a device global: it lives until its image is unloaded`);
    session.buffers.delete(request.buffer);
    client.directory.revoke(session, request.buffer);
    return replyWhen(
      buffer.free().finally(() => {
        session.give('memoryBytes', buffer.byteLength);
        session.give('buffers');
      }),
    );
  },
  queue: (client, request) => {
    if (client.queues.has(request.queue)) throw errors.invalidArgument(`queue ${request.queue} exists already`);
    const device = client.device(request.device);
    try {
      client.session!.take('queues');
    } catch (error) {
      // Its client learns of it at the queue's first operation: that one fails with this error.
      client.refusedQueue(request.queue, error as OffloadError);
      throw error;
    }
    const queue = device.queue();
    client.queues.set(request.queue, queue);
    client.clientQueueIds.set(queueId(queue), request.queue);
    return DONE;
  },
  'queue-destroy': (client, request) => {
    const queue = client.queue(request.queue);
    client.queues.delete(request.queue);
    client.clientQueueIds.delete(queueId(queue));
    client.session!.give('queues');
    return replyWhen(queue.destroy());
  },
  write: bulk.write,
  read: bulk.read,
  copy: (client, request) => {
    const session = client.session!;
    const event = client.queue(request.queue).copy(session.buffer(request.dst), session.buffer(request.src), {
      srcOffset: request.srcOffset,
      dstOffset: request.dstOffset,
      byteLength: request.bytes,
    });
    return replyWhen(event.done);
  },
  'send-peer': bulk.sendPeer,
  launch: (client, request) => {
    const session = client.session!;
    const start = performance.now();
    const event = launch(client, request, session);
    return client.directory.metrics.launch(session, event, start) ? COMPLETED : replyWhen(event.done);
  },
  record: (client, request) => {
    if (request.event <= client.lastEvent)
      throw errors.protocol(`event ids must increase: ${request.event} after ${client.lastEvent}`);
    client.lastEvent = request.event;
    const event = client.queue(request.queue).record({ timing: request.timing });
    // Only failed events are kept: an older id that is absent completed successfully.
    client.events.set(request.event, event);
    event.done.then(
      () => client.events.delete(request.event),
      () => {},
    );
    // A timed event's reply says when this proxy's queue reached it, on this proxy's clock.
    if (request.timing) return replyWith({ done: pluginEvent(event).timing!.at, fields: (time) => ({ time }) });
    return replyWhen(event.done);
  },
  wait: (client, request) => {
    if (request.event > client.lastEvent)
      throw errors.invalidArgument(`event ${request.event} was never recorded on this connection`);
    const event = client.events.get(request.event);
    const queue = client.queue(request.queue);
    return replyWhen(event ? queue.wait(event).done : queue.record().done);
  },
  'wait-host': (client, request) => {
    const queue = client.queue(request.queue);
    // A replaced gate could never be signalled: its queue would wait forever.
    if (client.gates.has(request.gate)) throw errors.invalidArgument(`gate ${request.gate} exists already`);
    const gate = deferred();
    client.gates.set(request.gate, gate);
    return replyWhen(parking(queue).stopUntil(gate.promise));
  },
  signal: (client, request) => {
    const gate = client.gates.get(request.gate);
    if (!gate) throw errors.invalidArgument(`gate ${request.gate} does not exist (or was signalled already)`);
    client.gates.delete(request.gate);
    if (request.error) gate.reject(new OffloadError(request.error.code, request.error.message));
    else gate.resolve();
    return DONE;
  },
  sync: (client, request) => replyWhen(client.queue(request.queue).finish()),
  // liboffload's further operations (fill, rectangles, memory info): one frame each.
  fill: (client, request) =>
    replyWhen(
      client
        .queue(request.queue)
        .fill(client.session!.buffer(request.buffer), Uint8Array.from(request.pattern), request.offset, request.bytes)
        .done,
    ),
  'write-rect': bulk.writeRect,
  'read-rect': bulk.readRect,
  'copy-rect': (client, request) => {
    const session = client.session!;
    const { width, height, depth } = request;
    const rect = {
      width,
      height,
      depth,
      src: { offset: request.srcOffset, rowPitch: request.srcRowPitch, slicePitch: request.srcSlicePitch },
      dst: { offset: request.dstOffset, rowPitch: request.dstRowPitch, slicePitch: request.dstSlicePitch },
    };
    const queue = client.queue(request.queue);
    const [dst, src] = [session.buffer(request.dst), session.buffer(request.src)];
    if (runsWhole(rect)) return replyWhen(queue.copyRect(dst, src, rect).done);
    // Many rows: in slices, so that the proxy's other clients are served meanwhile.
    checkSpan('copyRect', rect, 'src', src);
    checkSpan('copyRect', rect, 'dst', dst);
    const done = inSlices(
      queue,
      rect,
      (side, part) => side.copyRect(dst, src, part),
      client.directory.launchTimeoutMs,
      `a copyRect of ${height * depth} rows`,
    );
    useBuffer(dst, done);
    useBuffer(src, done);
    return replyWhen(done);
  },
  'memory-info': (client, request) =>
    replyWith({ done: memoryInfo(client, request, client.session!), fields: (info) => ({ ...info }) }),
  trace: (client) => {
    // The spans of this session's work so far (none unless its hello asked), as JSON in the payload.
    const taken = client.session!.tracer?.take() ?? { events: [], dropped: 0 };
    return {
      done: Promise.resolve(),
      fields: () => ({ dropped: taken.dropped }),
      payload: () => new TextEncoder().encode(JSON.stringify(taken.events)),
    };
  },
};

/** The handler of `request`, for a client of `client`: a peer link's is refused unless a link may send it. */
function handle(client: ClientSession, request: Request, payload: Uint8Array): Reply | undefined {
  if (client.attached && (!LINK_OPS.has(request.op) || (request.op === 'write' && request.buffer !== client.granted))) {
    throw errors.unauthorized(
      `a peer link may only write into the buffer it was granted, not ${quoted(request.op)} there`,
    );
  }
  client.directory.metrics.request(client.session, request);
  return (handlers[request.op] as Handler<Request['op']>)(client, request, payload);
}

/**
 * Serves a client on `transport`: a connection for its frames and a session for its state,
 * joined by the handler table. `onClosed`: told once the connection has closed and everything
 * the client held is released.
 */
export function serveClient(
  transport: Transport,
  runtime: Runtime,
  directory: ServingDirectory,
  peers: PeerLinks,
  onClosed?: () => void,
): ClientSession {
  const connection = new ProxyConnection(transport, directory, onClosed);
  const client = new ClientSession(connection, runtime, directory, peers);
  connection.serve({
    get loggedIn() {
      return client.loggedIn;
    },
    request: (request, payload) => handle(client, request, payload),
    chunk: (id, offset, payload) => client.chunk(id, offset, payload),
    answer: (frame) => client.hostCallResult(frame),
    payloadTarget: (meta, length) => client.payloadTarget(meta, length),
    frameWhole: () => client.frameWhole(),
    closed: () => client.release(),
    refused: (error) => directory.metrics.refused(transport.peer, error, client.session),
  });
  return client;
}

async function register(
  client: ClientSession,
  request: RequestOf<'register'>,
  payload: Uint8Array,
  session: Session,
): Promise<void> {
  client.ownerOnly('register images');
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

async function load(client: ClientSession, request: RequestOf<'load'>, session: Session): Promise<LoadedKernelInfo[]> {
  const imageId = request.image;
  const image = session.image(imageId);
  const device = client.device(request.device);
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

async function unload(client: ClientSession, request: RequestOf<'unload'>, session: Session): Promise<void> {
  client.ownerOnly('unload images');
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
  client: ClientSession,
  request: RequestOf<'alloc'>,
  session: Session,
): Promise<{ address: number; grant: string }> {
  client.ownerOnly('allocate');
  const bufferId = request.buffer;
  if (session.buffers.has(bufferId)) throw errors.protocol(`buffer ${bufferId} exists already`);
  const device = client.device(request.device);
  const giveBack = session.takeAll(['buffers', 1], ['memoryBytes', request.bytes]);
  try {
    const buffer = await device.alloc(request.bytes, { kind: request.kind as never });
    session.buffers.set(bufferId, buffer);
    // The grant goes to the client, which hands it to a proxy it asks to copy here.
    return { address: deviceAddress(buffer) ?? 0, grant: client.directory.grant(session, bufferId) };
  } catch (error) {
    for (const give of giveBack) give();
    throw error;
  }
}

/** A device global of image `image` on a device, named `buffer` for the client from now on. */
async function global(
  client: ClientSession,
  request: RequestOf<'global'>,
  session: Session,
): Promise<{ bytes: number; address: number }> {
  client.ownerOnly('name device globals');
  const bufferId = request.buffer;
  if (session.buffers.has(bufferId)) throw errors.protocol(`buffer ${bufferId} exists already`);
  const library = session.image(request.image);
  const device = client.device(request.device);
  const giveBack = session.take('buffers');
  try {
    const { buffer } = await library.global(device, request.name);
    session.buffers.set(bufferId, buffer);
    return { bytes: buffer.byteLength, address: deviceAddress(buffer) ?? 0 };
  } catch (error) {
    giveBack();
    throw error;
  }
}

function launch(client: ClientSession, request: RequestOf<'launch'>, session: Session): Event {
  const queue = client.queue(request.queue);
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
  const cap = queue.device.info.launchTimeouts ? client.directory.launchTimeoutMs : undefined;
  const timeoutMs = asked === undefined ? cap : Math.min(asked, cap ?? asked);
  const grid = { teams: request.teams, threads: request.threads, teamMemoryBytes: request.teamMemoryBytes, timeoutMs };
  return queue.launch(kernel, grid, args);
}

/** The device's memory as this client may use it: within what is left of its tenant's memory quota. */
async function memoryInfo(
  client: ClientSession,
  request: RequestOf<'memory-info'>,
  session: Session,
): Promise<MemoryInfo> {
  const info = await client.device(request.device).memoryInfo();
  const left = Math.max(0, session.quotas.memoryBytes - session.tenant.usage.memoryBytes);
  const freeBytes = Math.min(info.freeBytes, left);
  return {
    totalBytes: info.totalBytes,
    freeBytes,
    largestFreeBlockBytes: Math.min(info.largestFreeBlockBytes, freeBytes),
  };
}
