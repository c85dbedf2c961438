/**
 * One client connection on a proxy: turns request frames into calls on the proxy's own runtime
 * (the public API, so every request gets the same checks a local program gets) and answers each
 * with one `reply` frame. Frames are handled in arrival order and queue operations are enqueued
 * synchronously on arrival, so per-queue order is the client's order. Malformed frames close
 * the connection with PROTOCOL; every other failure is a coded error in the reply.
 */
import { Tracer } from '../runtime/trace.js';
import { errors, OffloadError, quoted } from '../errors.js';
import { asOffloadError } from '../plugins/serial-queue.js';
import { debug } from '../runtime/debug.js';
import type { Buffer } from '../api/buffer.js';
import type { Device } from '../api/device.js';
import type { Event, KernelArgument, Queue, RectCopy } from '../api/queue.js';
import type { MemoryInfo } from '../plugins/interface.js';
import type { Runtime } from '../api/runtime.js';
import type { KernelPrint } from '../runtime/options.js';
import type { HostCall } from '../api/host-functions.js';
import type { EntryInfo, ImageInfo } from '../image/manifest.js';
import { encodeBundle } from '../image/bundle.js';
import { MAX_PAYLOAD_BYTES, type Frame, type FrameLimits } from '../transport/frame.js';
import { startHeartbeat } from '../transport/heartbeat.js';
import type { Transport } from '../transport/transport.js';
import { CHUNK_BYTES, EAGER_BYTES, Meta, PROTOCOL_VERSION, toWireError, type WireArg } from './protocol.js';
import type { Session } from './session.js';
import type { PeerLinks } from './peer-links.js';

/** How a proxy authenticates clients and finds sessions (implemented by ProxyServer). */
export interface SessionDirectory {
  /**
   * Checks a login from `peer`, by token (compared in constant time) or by write grant: the
   * session a grant belongs to and its buffer, or the error to answer (a wrong token, a grant that
   * does not exist, too many failures from that address lately).
   */
  login(peer: string, credentials: { token?: string; grant?: string }): OffloadError | { grant?: { session: Session; buffer: number } };
  /**
   * A new session for `client`, in a context of its own; its kernels' print() lines go to
   * `print`, their host calls to `hostCall`; `traced`: its work's spans are kept for it.
   */
  open(client: string, print: (line: KernelPrint) => void, hostCall: (call: HostCall) => Promise<number>, traced?: boolean): Promise<Session>;
  close(session: Session): Promise<void>;
  /** A new write grant for buffer `buffer` of `session` (kept in session.grants too). */
  grant(session: Session, buffer: number): string;
  revoke(session: Session, buffer: number): void;
  /** Whether this proxy may open a peer link to `address` (its --peers, or a rank of its own MPI job). */
  mayLink(address: string): boolean;
  /** Its --peers, as the hello reply tells clients (so they stage copies to other proxies themselves). */
  readonly peerList: readonly string[] | 'any';
  /** The proxy-wide cap on a launch's run time, if any. */
  readonly launchTimeoutMs: number | undefined;
  /** How long a new connection has to log in. */
  readonly loginTimeoutMs: number;
  /** A client silent this long is gone (its session ends). */
  readonly peerTimeoutMs: number;
}

/**
 * Requests (and their bytes) a client may send while one that makes an object is in progress
 * (see `barrier`); beyond them the connection is closed with PROTOCOL.
 */
const MAX_HELD_FRAMES = 4096;
const MAX_HELD_BYTES = 64 * 1024 * 1024;

/**
 * What a peer may send before it has logged in: one small frame, no payload. Nothing it does
 * before the token is checked can cost the proxy more than this, or outlive LOGIN_DEADLINE_MS.
 */
export const LOGIN_LIMITS: FrameLimits = { metaBytes: 4096, payloadBytes: 0, when: "before login (a 'hello' of at most 4 KiB)" };
export const LOGIN_DEADLINE_MS = 10_000;

interface Deferred {
  promise: Promise<void>;
  resolve(): void;
  reject(error: unknown): void;
}

function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/** A rendezvous write in progress: chunks land straight in device memory. */
interface IncomingWrite {
  buffer: Buffer;
  offset: number;
  bytes: number;
  received: number;
  writes: Promise<void>[];
  gate: Deferred;
  /** Device memory the chunks land in directly, from `ready` on (host-addressable devices). */
  direct?: Uint8Array;
}

export class ProxyConnection {
  private session: Session | undefined;
  /**
   * Requests that arrived while an earlier one that makes an object (the session of `hello`, an
   * image, a kernel, a buffer) was in progress: handled in order once it is done, so that a
   * pipelined request finds what the ones before it made.
   */
  private held: Frame[] | undefined;
  private heldBytes = 0;
  private loggingIn = false;
  /** Closes a connection that has not logged in by then. */
  private readonly loginDeadline: NodeJS.Timeout;
  /** For a peer proxy's link: the one buffer of the client's session it may write into. */
  private granted: number | undefined;
  private get attached(): boolean {
    return this.granted !== undefined;
  }
  private readonly queues = new Map<number, Queue>();
  /** The client's id of each of those queues, by the proxy queue's own id (print lines name the latter). */
  private readonly clientQueueIds = new Map<number, number>();
  private readonly events = new Map<number, Event>();
  private lastEvent = 0;
  private readonly gates = new Map<number, Deferred>();
  /** Host calls sent to the client and not answered yet, by call id. */
  private readonly hostCalls = new Map<number, { resolve: (value: number) => void; reject: (error: Error) => void }>();
  private nextHostCall = 1;
  private readonly incoming = new Map<number, IncomingWrite>();
  /** Per device, a queue for chunk transfers while the client's queue is parked at a gate. */
  private readonly sideQueues = new Map<Device, Queue>();

  constructor(
    private readonly transport: Transport,
    /** The proxy's runtime: what the devices are (each session works in a context of it). */
    private readonly runtime: Runtime,
    private readonly directory: SessionDirectory,
    private readonly peers: PeerLinks,
    /** Told once the connection has closed and everything it held is released. */
    private readonly onClosed: () => void = () => {},
  ) {
    transport.onFrame = (frame) => this.onFrame(frame);
    transport.payloadSink = (meta, length) => this.chunkTarget(meta, length);
    transport.onClose = () => void this.closed();
    transport.limits = LOGIN_LIMITS;
    // Request 0 is the connection itself: its error says why the proxy closes it.
    transport.onTooLarge = (error) => this.send({ op: 'reply', id: 0, error: toWireError(error) });
    this.loginDeadline = setTimeout(() => {
      if (!this.loggedIn) this.refuse(0, errors.protocol(`no login within ${directory.loginTimeoutMs} ms`));
    }, directory.loginTimeoutMs);
    this.loginDeadline.unref();
  }

  /** Closes the connection (the proxy makes room for others). */
  close(reason: OffloadError): void {
    this.refuse(0, reason);
  }

  /** True once the peer presented the right token (its session may still be in the making). */
  get loggedIn(): boolean {
    return this.session !== undefined || this.loggingIn;
  }

  /**
   * Sends a frame, whatever it holds: a frame that cannot be encoded (a reply grown past the
   * frame limits) closes this connection with PROTOCOL instead of throwing out of an event handler.
   */
  private send(meta: Record<string, unknown>, payload?: Uint8Array): boolean {
    try {
      return this.transport.send(meta, payload);
    } catch (error) {
      this.transport.close(errors.protocol(`a ${quoted(String(meta.op))} frame could not be sent: ${(error as Error).message}`));
      return true;
    }
  }

  /** Answers request `id` with `error` and closes the connection. */
  private refuse(id: number, error: OffloadError): void {
    debug.log('proxy', `closing the connection of ${this.transport.peer}: ${error.code}: ${error.message}`);
    this.send({ op: 'reply', id, error: toWireError(error) });
    this.transport.close(error);
  }

  /** Queues this connection holds (its client's and its own for chunked transfers). */
  get queueCount(): number {
    return this.queues.size + this.sideQueues.size;
  }

  private onFrame(frame: Frame): void {
    // Chunks feed a write already accepted, in their own order: they never wait.
    if (this.held && frame.meta.op !== 'chunk') {
      this.heldBytes += frame.payload.byteLength;
      if (this.held.length >= MAX_HELD_FRAMES || this.heldBytes > MAX_HELD_BYTES) {
        return this.refuse(0, errors.protocol(`more than ${MAX_HELD_FRAMES} requests or ${MAX_HELD_BYTES} bytes arrived behind one still in progress; wait for its reply`));
      }
      this.held.push(frame);
      return;
    }
    this.handle(frame);
  }

  /** Holds later requests until `making` settles (it makes an object they may name). */
  private barrier(making: Promise<unknown>): void {
    this.held ??= [];
    making.then(
      () => this.releaseHeld(),
      () => this.releaseHeld(),
    );
  }

  private get holding(): boolean {
    return this.held !== undefined;
  }

  private releaseHeld(): void {
    const frames = this.held ?? [];
    this.held = undefined;
    this.heldBytes = 0;
    while (frames.length > 0 && !this.holding && !this.transport.closed) this.handle(frames.shift()!);
    // A released request made a new barrier: the rest wait for it, still in order.
    const again = this.held as Frame[] | undefined;
    if (again && frames.length > 0) {
      again.unshift(...frames);
      this.heldBytes = again.reduce((sum, frame) => sum + frame.payload.byteLength, 0);
    }
  }

  private handle(frame: Frame): void {
    const meta = new Meta(frame);
    // Read before anything is checked, so that even a malformed request's answer names it.
    const given = frame.meta.id;
    let id = typeof given === 'number' && Number.isSafeInteger(given) && given >= 0 ? given : 0;
    try {
      const op = meta.op;
      if (op === 'chunk') return this.chunk(meta);
      // An answer, not a request: it never waits behind one (a launch may be waiting for it).
      if (op === 'host-call-result' && this.session) return this.hostCallResult(meta);
      id = meta.uint('id');
      if (!this.session) {
        if (op !== 'hello') throw errors.protocol(`the first frame must be 'hello', not ${quoted(op)}`);
        return this.hello(meta, id);
      }
      this.dispatch(op, meta, id);
    } catch (error) {
      if (error instanceof OffloadError && error.code === 'PROTOCOL') this.refuse(id, error);
      else this.reply(id, Promise.reject(error));
    }
  }

  private hello(meta: Meta, id: number): void {
    const version = meta.uint('version');
    const token = meta.optional('token', meta.string);
    const grant = meta.optional('grant', meta.string);
    const login = this.directory.login(this.transport.peer, { token, grant });
    if (login instanceof OffloadError) return this.refuse(id, login);
    if (version !== PROTOCOL_VERSION) {
      throw errors.protocol(`protocol version ${version} is not supported; this proxy speaks ${PROTOCOL_VERSION}`);
    }
    // Logged in: frames as large as any client's from now on, and a heartbeat both ways.
    clearTimeout(this.loginDeadline);
    this.transport.limits = undefined;
    startHeartbeat(this.transport, this.directory.peerTimeoutMs);
    if (login.grant) {
      // A peer proxy's link, on a client's behalf: it may write into the granted buffer only.
      this.session = login.grant.session;
      this.granted = login.grant.buffer;
      this.session.attached.add(this.transport);
      this.welcome(id);
      return;
    }
    this.loggingIn = true;
    const traced = meta.frame.meta.trace === true;
    const opening = this.directory.open(this.transport.peer, (line) => this.forwardPrint(line), (call) => this.forwardHostCall(call), traced).then(
      (session) => {
        if (this.transport.closed) {
          // The client left while its context was being made.
          void this.directory.close(session);
          return;
        }
        this.session = session;
        this.welcome(id);
      },
      (error: unknown) => this.refuse(id, asOffloadError(error)),
    );
    this.barrier(opening);
  }

  /**
   * Sends a line the client's kernel printed, as it is printed: before the launch's reply, which
   * goes out only once the launch's event completes. Named by the client's queue id.
   */
  private forwardPrint(line: KernelPrint): void {
    const queue = this.clientQueueIds.get(line.queue);
    if (queue !== undefined) this.send({ op: 'print', queue, kernel: line.kernel, team: line.team, text: line.text });
  }

  /**
   * Sends a kernel's host call to the client, whose program runs the function, and resolves
   * with its answer ('host-call-result'). A call of a queue the client has destroyed, or once
   * the client is gone, fails; at most one call per worker of the device waits at a time.
   */
  private forwardHostCall(call: HostCall): Promise<number> {
    const queue = this.clientQueueIds.get(call.queue);
    if (queue === undefined || this.transport.closed) return Promise.reject(new Error('the client that launched the kernel is gone'));
    const id = this.nextHostCall++;
    return new Promise<number>((resolve, reject) => {
      this.hostCalls.set(id, { resolve, reject });
      this.send({ op: 'host-call', call: id, queue, kernel: call.kernel, name: call.name, args: call.args });
    });
  }

  /** The client's answer to a host call (an unknown call is a protocol error: the client made it up). */
  private hostCallResult(meta: Meta): void {
    const id = meta.uint('call');
    const pending = this.hostCalls.get(id);
    if (pending === undefined) throw errors.protocol(`'host-call-result' for call ${id}, which is not waiting`);
    this.hostCalls.delete(id);
    const error = meta.error('error');
    if (error) return pending.reject(new Error(error.message));
    // JSON has no NaN or infinities: null stands for them.
    const value = meta.frame.meta.value;
    if (typeof value !== 'number' && value !== null) throw errors.protocol(`'host-call-result' for call ${id} has no number 'value'`);
    pending.resolve(value ?? Number.NaN);
  }

  private welcome(id: number): void {
    const devices = this.runtime.devices.map((device) => device.info);
    // `now`: this proxy's clock (microseconds since the epoch), to align its trace with the client's.
    this.send({ op: 'reply', id, devices, peers: this.directory.peerList, now: Tracer.now() });
  }

  /** What a peer link may do: make its own queues and write into the buffer it was granted. */
  private static readonly LINK_OPS = new Set(['ping', 'queue', 'queue-destroy', 'write', 'sync']);

  private dispatch(op: string, meta: Meta, id: number): void {
    const session = this.session!;
    if (this.attached && (!ProxyConnection.LINK_OPS.has(op) || (op === 'write' && meta.uint('buffer') !== this.granted))) {
      throw errors.unauthorized(`a peer link may only write into the buffer it was granted, not ${quoted(op)} there`);
    }
    switch (op) {
      case 'ping':
        return this.reply(id, Promise.resolve());
      // These make what later requests name: those wait for them (pipelining stays safe).
      case 'register':
        return this.reply(id, this.made(this.register(meta, session)));
      case 'load':
        return this.reply(id, this.made(this.load(meta, session)), (kernels) => ({ kernels }));
      case 'unload':
        return this.reply(id, this.unload(meta, session));
      case 'alloc':
        return this.reply(id, this.made(this.alloc(meta, session)), (made) => made);
      case 'global':
        return this.reply(id, this.made(this.global(meta, session)), (made) => made);
      case 'free': {
        const bufferId = meta.uint('buffer');
        const buffer = session.buffer(bufferId);
        // A device global was never counted against the quotas; it goes with its image.
        if (buffer.isGlobal) throw errors.invalidBuffer(`buffer ${bufferId} is a device global: it lives until its image is unloaded`);
        session.buffers.delete(bufferId);
        this.directory.revoke(session, bufferId);
        return this.reply(
          id,
          buffer.free().finally(() => {
            session.give('memoryBytes', buffer.byteLength);
            session.give('buffers');
          }),
        );
      }
      case 'queue': {
        const queueId = meta.uint('queue');
        if (this.queues.has(queueId)) throw errors.invalidArgument(`queue ${queueId} exists already`);
        const device = this.device(meta);
        session.take('queues');
        const queue = device.queue();
        this.queues.set(queueId, queue);
        this.clientQueueIds.set(queue.id, queueId);
        return this.reply(id, Promise.resolve());
      }
      case 'queue-destroy': {
        const queue = this.queue(meta);
        this.queues.delete(meta.uint('queue'));
        this.clientQueueIds.delete(queue.id);
        session.give('queues');
        return this.reply(id, queue.destroy());
      }
      case 'write':
        return this.write(meta, id);
      case 'read':
        return this.read(meta, id);
      case 'copy': {
        const queue = this.queue(meta);
        const event = queue.copy(session.buffer(meta.uint('dst')), session.buffer(meta.uint('src')), {
          srcOffset: meta.uint('srcOffset'),
          dstOffset: meta.uint('dstOffset'),
          byteLength: meta.uint('bytes'),
        });
        return this.reply(id, event.done);
      }
      case 'send-peer':
        return this.sendPeer(meta, id);
      case 'launch':
        return this.reply(id, this.launch(meta, session).done);
      case 'record': {
        const eventId = meta.uint('event');
        if (eventId <= this.lastEvent) throw errors.protocol(`event ids must increase: ${eventId} after ${this.lastEvent}`);
        this.lastEvent = eventId;
        const timing = meta.frame.meta.timing === true;
        const event = this.queue(meta).record({ timing });
        // Only failed events are kept: an older id that is absent completed successfully.
        this.events.set(eventId, event);
        event.done.then(() => this.events.delete(eventId), () => {});
        // A timed event's reply says when this proxy's queue reached it, on this proxy's clock.
        if (timing) return this.reply(id, event.plugin.timing!.at, (time) => ({ time }));
        return this.reply(id, event.done);
      }
      case 'wait': {
        const eventId = meta.uint('event');
        if (eventId > this.lastEvent) throw errors.invalidArgument(`event ${eventId} was never recorded on this connection`);
        const event = this.events.get(eventId);
        return this.reply(id, event ? this.queue(meta).wait(event).done : this.queue(meta).record().done);
      }
      case 'wait-host': {
        const gateId = meta.uint('gate');
        const queue = this.queue(meta);
        // A replaced gate could never be signalled: its queue would wait forever.
        if (this.gates.has(gateId)) throw errors.invalidArgument(`gate ${gateId} exists already`);
        const gate = deferred();
        this.gates.set(gateId, gate);
        return this.reply(id, queue.hold(gate.promise).done);
      }
      case 'signal': {
        const gateId = meta.uint('gate');
        const gate = this.gates.get(gateId);
        if (!gate) throw errors.invalidArgument(`gate ${gateId} does not exist (or was signalled already)`);
        this.gates.delete(gateId);
        const failure = meta.error('error');
        if (failure) gate.reject(new OffloadError(failure.code, failure.message));
        else gate.resolve();
        return this.reply(id, Promise.resolve());
      }
      case 'sync':
        return this.reply(id, this.queue(meta).finish());
      // liboffload's further operations (fill, rectangles, memory info): one frame each.
      case 'fill':
        return this.reply(id, this.queue(meta).fill(session.buffer(meta.uint('buffer')), meta.bytes('pattern', 8), meta.uint('offset'), meta.uint('bytes')).done);
      case 'write-rect':
        return this.writeRect(meta, id);
      case 'read-rect':
        return this.readRect(meta, id);
      case 'copy-rect': {
        const side = (name: 'src' | 'dst') => ({ offset: meta.uint(`${name}Offset`), rowPitch: meta.uint(`${name}RowPitch`), slicePitch: meta.uint(`${name}SlicePitch`) });
        const rect = { width: meta.uint('width'), height: meta.uint('height'), depth: meta.uint('depth'), src: side('src'), dst: side('dst') };
        return this.reply(id, this.queue(meta).copyRect(session.buffer(meta.uint('dst')), session.buffer(meta.uint('src')), rect).done);
      }
      case 'memory-info':
        return this.reply(id, this.memoryInfo(meta, session), (info) => ({ ...info }));
      case 'trace': {
        // The spans of this session's work so far (none unless its hello asked), as JSON in the payload.
        const taken = session.tracer?.take() ?? { events: [], dropped: 0 };
        return this.reply(id, Promise.resolve(), () => ({ dropped: taken.dropped }), () => new TextEncoder().encode(JSON.stringify(taken.events)));
      }
      default:
        throw errors.protocol(`unknown op '${op}'`);
    }
  }

  /** `making`, with later requests held until it settles. */
  private made<T>(making: Promise<T>): Promise<T> {
    // Released a tick after `making` settles: its own reply goes out before the requests held behind it are handled.
    this.barrier(making.then(
      () => {},
      () => {},
    ));
    return making;
  }

  /** Sends the reply of request `id` when `result` settles. */
  private reply<T>(id: number, result: Promise<T>, fields?: (value: T) => Record<string, unknown>, payload?: () => Uint8Array): void {
    result.then(
      (value) => {
        this.send({ op: 'reply', id, ...fields?.(value) }, payload?.());
      },
      (error: unknown) => {
        this.send({ op: 'reply', id, error: toWireError(error) });
      },
    );
  }

  private device(meta: Meta): Device {
    const index = meta.uint('device');
    const device = this.session!.runtime.devices[index];
    if (!device) throw errors.notFound(`this proxy has no device ${index}`);
    return device;
  }

  private queue(meta: Meta): Queue {
    const id = meta.uint('queue');
    const queue = this.queues.get(id);
    if (!queue) throw errors.invalidArgument(`queue ${id} does not exist on this connection`);
    return queue;
  }

  private sideQueue(device: Device): Queue {
    let queue = this.sideQueues.get(device);
    if (!queue) this.sideQueues.set(device, (queue = device.queue()));
    return queue;
  }

  private ownerOnly(what: string): void {
    if (this.attached) throw errors.unauthorized(`a peer link may not ${what}`);
  }

  private async register(meta: Meta, session: Session): Promise<void> {
    this.ownerOnly('register images');
    const imageId = meta.uint('image');
    if (session.images.has(imageId)) throw errors.protocol(`image ${imageId} is registered already`);
    const info = meta.object('info') as unknown as ImageInfo;
    const entries = meta.array('entries') as EntryInfo[];
    // The image travels alone; the proxy wraps it in a one-image bundle, which the bundle
    // decoder then validates field by field like any bundle from disk.
    const bundle = encodeBundle({ name: meta.string('name'), images: [{ ...info, offset: 0, size: 0 }], entries }, [meta.frame.payload]);
    const giveBack = [session.take('images'), session.take('imageBytes', meta.frame.payload.byteLength)];
    try {
      session.images.set(imageId, await session.runtime.register(bundle));
      session.imageBytes.set(imageId, meta.frame.payload.byteLength);
    } catch (error) {
      for (const give of giveBack) give();
      throw error;
    }
  }

  private async load(meta: Meta, session: Session): Promise<{ name: string; params: unknown; format: string; staticBytes: number }[]> {
    const imageId = meta.uint('image');
    const image = session.image(imageId);
    const device = this.device(meta);
    const kernels = [];
    for (const entry of image.kernels) {
      // A bundle's entries are every image's kernels; the device's image may have fewer.
      const kernel = await device.kernel(image, entry.name).catch((error: unknown) => {
        if (OffloadError.is(error, 'NOT_FOUND')) return undefined;
        throw error;
      });
      if (!kernel) continue;
      session.kernels.set(`${imageId}/${device.id}/${entry.name}`, kernel);
      const { imageFormat: format, staticDataBytes: staticBytes } = kernel.info;
      kernels.push({ name: entry.name, params: kernel.params, format, staticBytes });
    }
    return kernels;
  }

  private async unload(meta: Meta, session: Session): Promise<void> {
    this.ownerOnly('unload images');
    const imageId = meta.uint('image');
    const image = session.image(imageId);
    session.images.delete(imageId);
    session.give('images');
    session.give('imageBytes', session.imageBytes.get(imageId) ?? 0);
    session.imageBytes.delete(imageId);
    for (const key of [...session.kernels.keys()]) if (key.startsWith(`${imageId}/`)) session.kernels.delete(key);
    await image.unregister();
  }

  private async alloc(meta: Meta, session: Session): Promise<{ address: number; grant: string }> {
    this.ownerOnly('allocate');
    const bufferId = meta.uint('buffer');
    if (session.buffers.has(bufferId)) throw errors.protocol(`buffer ${bufferId} exists already`);
    const kind = meta.string('kind');
    const bytes = meta.uint('bytes');
    const device = this.device(meta);
    const giveBack = [session.take('buffers'), session.take('memoryBytes', bytes)];
    try {
      const buffer = await device.alloc(bytes, { kind: kind as never });
      session.buffers.set(bufferId, buffer);
      // The grant goes to the client, which hands it to a proxy it asks to copy here.
      return { address: buffer.allocation.address ?? 0, grant: this.directory.grant(session, bufferId) };
    } catch (error) {
      for (const give of giveBack) give();
      throw error;
    }
  }

  /** A device global of image `image` on a device, named `buffer` for the client from now on. */
  private async global(meta: Meta, session: Session): Promise<{ bytes: number; address: number }> {
    this.ownerOnly('name device globals');
    const bufferId = meta.uint('buffer');
    if (session.buffers.has(bufferId)) throw errors.protocol(`buffer ${bufferId} exists already`);
    const library = session.image(meta.uint('image'));
    const device = this.device(meta);
    const giveBack = session.take('buffers');
    try {
      const { buffer } = await library.global(device, meta.string('name'));
      session.buffers.set(bufferId, buffer);
      return { bytes: buffer.byteLength, address: buffer.allocation.address ?? 0 };
    } catch (error) {
      giveBack();
      throw error;
    }
  }

  private launch(meta: Meta, session: Session): Event {
    const queue = this.queue(meta);
    const key = `${meta.uint('image')}/${queue.device.id}/${meta.string('kernel')}`;
    const kernel = session.kernels.get(key);
    if (!kernel) throw errors.notFound(`kernel '${meta.string('kernel')}' of image ${meta.uint('image')} is not loaded on device ${queue.device.id}`);
    const args: KernelArgument[] = meta.args('args').map((arg: WireArg) => {
      if (typeof arg === 'number') return arg;
      if ('i64' in arg) return BigInt(arg.i64);
      const buffer = session.buffer(arg.buffer);
      return arg.offset ? buffer.at(arg.offset) : buffer;
    });
    // The client's time limit, capped by the proxy's where the device can stop a launch: no
    // client holds a shared device forever.
    const asked = meta.optional('timeoutMs', meta.uint);
    const cap = queue.device.info.launchTimeouts ? this.directory.launchTimeoutMs : undefined;
    const timeoutMs = asked === undefined ? cap : Math.min(asked, cap ?? asked);
    const grid = { teams: meta.gridSize('teams'), threads: meta.gridSize('threads'), teamMemoryBytes: meta.optional('teamMemoryBytes', meta.uint), timeoutMs };
    return queue.launch(kernel, grid, args);
  }

  private write(meta: Meta, id: number): void {
    const queue = this.queue(meta);
    const buffer = this.session!.buffer(meta.uint('buffer'));
    const offset = meta.uint('offset');
    const bytes = meta.uint('bytes');
    const payload = meta.frame.payload;
    const streamed = meta.frame.meta.stream === true;
    if (!streamed) {
      if (payload.byteLength !== bytes) throw errors.protocol(`a write of ${bytes} bytes carries ${payload.byteLength}; it must carry them all or be streamed`);
      // The data waits here until its queue gets to it: pending bytes, with a quota.
      const giveBack = this.session!.take('pendingBytes', bytes);
      const done = queue.write(buffer, payload, { offset }).done;
      done.then(giveBack, giveBack);
      return this.reply(id, done);
    }
    if (payload.byteLength !== 0 || bytes === 0) throw errors.protocol(`a streamed write must announce at least one byte and carry none, not ${bytes} announced and ${payload.byteLength} carried`);
    // Rendezvous: park the queue at this point; say `ready` when it gets there.
    const gate = deferred();
    const reached = queue.record();
    const held = queue.hold(gate.promise);
    if (offset + bytes > buffer.byteLength) {
      gate.reject(errors.outOfBounds(`write into ${buffer.describe()}: ${bytes} bytes at offset ${offset} reach byte ${offset + bytes}, beyond its ${buffer.byteLength} bytes`));
    } else {
      const write: IncomingWrite = { buffer, offset, bytes, received: 0, writes: [], gate };
      this.incoming.set(id, write);
      // The buffer stays allocated while chunks may land in it directly.
      buffer.use(held.done);
      reached.done.then(
        () => {
          // The queue is parked at this write: nothing of it touches the range until the gate opens.
          write.direct = buffer.directView(offset, bytes);
          this.send({ op: 'ready', id });
        },
        (error: unknown) => gate.reject(error),
      );
    }
    this.reply(id, held.done.finally(() => this.incoming.delete(id)));
  }

  /** The device side of a rectangle from a request: the host side is packed rows. */
  private rectOf(meta: Meta, side: 'src' | 'dst'): RectCopy {
    return {
      width: meta.uint('width'),
      height: meta.uint('height'),
      depth: meta.uint('depth'),
      [side]: { offset: meta.uint('offset'), rowPitch: meta.uint('rowPitch'), slicePitch: meta.uint('slicePitch') },
    };
  }

  /** A rectangle's rows arrive packed in the request's payload; they wait there for their queue (pending bytes). */
  private writeRect(meta: Meta, id: number): void {
    const queue = this.queue(meta);
    const buffer = this.session!.buffer(meta.uint('buffer'));
    const rect = this.rectOf(meta, 'dst');
    const payload = meta.frame.payload;
    const bytes = rect.width * rect.height * (rect.depth ?? 1);
    if (payload.byteLength !== bytes) throw errors.protocol(`a write-rect of ${rect.width} x ${rect.height} x ${rect.depth} bytes carries ${payload.byteLength}`);
    const giveBack = this.session!.take('pendingBytes', bytes);
    const done = queue.writeRect(buffer, payload, rect).done;
    done.then(giveBack, giveBack);
    this.reply(id, done);
  }

  /** A rectangle's rows go back packed in the reply's payload: at most what one frame holds. */
  private readRect(meta: Meta, id: number): void {
    const queue = this.queue(meta);
    const buffer = this.session!.buffer(meta.uint('buffer'));
    const rect = this.rectOf(meta, 'src');
    const bytes = rect.width * rect.height * (rect.depth ?? 1);
    if (bytes > MAX_PAYLOAD_BYTES) {
      throw errors.invalidArgument(`a readRect of ${bytes} bytes is more than one reply carries (${MAX_PAYLOAD_BYTES}); read it in parts`);
    }
    // Rows (pitches at least their width) never hold more than their buffer: nothing is allocated for a rectangle that cannot fit.
    if (bytes > buffer.byteLength) {
      throw errors.outOfBounds(`a readRect of ${bytes} bytes of rows is more than ${buffer.describe()} holds`);
    }
    const giveBack = this.session!.take('pendingBytes', bytes);
    const out = new Uint8Array(bytes);
    const done = queue.readRect(buffer, out, rect).done;
    done.then(giveBack, giveBack);
    this.reply(id, done, undefined, () => out);
  }

  /** The device's memory as this client may use it: within what is left of its memory quota. */
  private async memoryInfo(meta: Meta, session: Session): Promise<MemoryInfo> {
    const info = await this.device(meta).memoryInfo();
    const left = Math.max(0, session.quotas.memoryBytes - session.usage.memoryBytes);
    const freeBytes = Math.min(info.freeBytes, left);
    return { totalBytes: info.totalBytes, freeBytes, largestFreeBlockBytes: Math.min(info.largestFreeBlockBytes, freeBytes) };
  }

  private chunk(meta: Meta): void {
    const id = meta.uint('id');
    const write = this.incoming.get(id);
    if (!write) throw errors.protocol(`chunk for write ${id}, which is not waiting for data`);
    const payload = meta.frame.payload;
    if (meta.uint('offset') !== write.received || write.received + payload.byteLength > write.bytes || payload.byteLength === 0) {
      throw errors.protocol(`chunk of write ${id} at offset ${meta.uint('offset')} (${payload.byteLength} bytes) does not continue it at ${write.received} of ${write.bytes}`);
    }
    const landed = write.direct !== undefined && payload.buffer === write.direct.buffer && payload.byteOffset === write.direct.byteOffset + write.received;
    if (!landed) {
      const side = this.sideQueue(write.buffer.device);
      write.writes.push(side.write(write.buffer, payload, { offset: write.offset + write.received }).done);
    }
    write.received += payload.byteLength;
    if (write.received === write.bytes) Promise.all(write.writes).then(() => write.gate.resolve(), write.gate.reject);
  }

  /** Where a `chunk` frame's payload lands: straight in device memory when that is possible and the chunk is the next one. */
  private chunkTarget(meta: Record<string, unknown>, length: number): Uint8Array | undefined {
    if (meta.op !== 'chunk' || typeof meta.id !== 'number') return undefined;
    const write = this.incoming.get(meta.id);
    if (!write?.direct || meta.offset !== write.received || write.received + length > write.bytes) return undefined;
    return write.direct.subarray(write.received, write.received + length);
  }

  private read(meta: Meta, id: number): void {
    const queue = this.queue(meta);
    const buffer = this.session!.buffer(meta.uint('buffer'));
    const offset = meta.uint('offset');
    const bytes = meta.uint('bytes');
    if (bytes <= EAGER_BYTES) {
      const giveBack = this.session!.take('pendingBytes', bytes);
      const out = new Uint8Array(bytes);
      const done = queue.read(buffer, out, { offset }).done;
      done.then(giveBack, giveBack);
      return this.reply(id, done, undefined, () => out);
    }
    const gate = deferred();
    const reached = queue.record();
    const held = queue.hold(gate.promise);
    reached.done.then(() => this.stream(buffer, offset, bytes, id)).then(gate.resolve, gate.reject);
    this.reply(id, held.done);
  }

  /** Sends [offset, offset+bytes) of `buffer` as `data` frames, minding back-pressure. */
  private async stream(buffer: Buffer, offset: number, bytes: number, id: number): Promise<void> {
    const side = this.sideQueue(buffer.device);
    for (let done = 0; done < bytes; done += CHUNK_BYTES) {
      const chunk = new Uint8Array(Math.min(CHUNK_BYTES, bytes - done));
      await side.read(buffer, chunk, { offset: offset + done }).done;
      if (!this.send({ op: 'data', id, offset: done }, chunk)) await this.transport.drained();
      if (this.transport.closed) throw errors.deviceLost('the client connection closed during a read');
    }
  }

  /** A copy from a buffer here to a buffer of the same client on another proxy, proxy to proxy. */
  private sendPeer(meta: Meta, id: number): void {
    const queue = this.queue(meta);
    const src = this.session!.buffer(meta.uint('src'));
    const srcOffset = meta.uint('srcOffset');
    const bytes = meta.uint('bytes');
    const target = {
      address: meta.string('peer'),
      grant: meta.string('grant'),
      device: meta.uint('device'),
      buffer: meta.uint('dst'),
      offset: meta.uint('dstOffset'),
    };
    // Only to proxies this one was told about: a client cannot make it connect anywhere it likes.
    if (!this.directory.mayLink(target.address)) {
      throw errors.unauthorized(`this proxy links only to its peers (offload proxy --peers); ${quoted(target.address)} is not one of them`);
    }
    if (srcOffset + bytes > src.byteLength) {
      throw errors.outOfBounds(`copy from ${src.describe()}: ${bytes} bytes at offset ${srcOffset} reach beyond its ${src.byteLength} bytes`);
    }
    const gate = deferred();
    const reached = queue.record();
    const held = queue.hold(gate.promise);
    reached.done
      .then(() => this.peers.send(target, bytes, (done, chunk) => this.sideQueue(src.device).read(src, chunk, { offset: srcOffset + done }).done))
      .then(gate.resolve, gate.reject);
    this.reply(id, held.done);
  }

  private async closed(): Promise<void> {
    clearTimeout(this.loginDeadline);
    try {
      await this.release();
    } finally {
      this.onClosed();
    }
  }

  private async release(): Promise<void> {
    this.peers.close();
    const session = this.session;
    this.session = undefined;
    for (const gate of this.gates.values()) gate.reject(errors.deviceLost('the client connection closed'));
    for (const call of this.hostCalls.values()) call.reject(new Error('the client connection closed'));
    this.hostCalls.clear();
    for (const write of this.incoming.values()) write.gate.reject(errors.deviceLost('the client connection closed during a write'));
    this.gates.clear();
    this.incoming.clear();
    const queues = [...this.queues.values(), ...this.sideQueues.values()];
    this.queues.clear();
    this.clientQueueIds.clear();
    this.sideQueues.clear();
    this.events.clear();
    // A peer link's queues are its own; the owner's context shutdown (below) drains the rest.
    if (this.attached) await Promise.all(queues.map((queue) => queue.destroy()));
    if (!session) return;
    if (this.attached) session.attached.delete(this.transport);
    else await this.directory.close(session);
  }
}
