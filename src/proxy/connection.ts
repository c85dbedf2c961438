/**
 * One client connection on a proxy: takes its frames in arrival order, decodes each request
 * (protocol/decode-request.ts: a malformed frame closes the connection with PROTOCOL) and hands
 * it on: `hello` to handshake.ts, every other request to dispatch.ts (bulk data to
 * bulk-transfers.ts). Every request gets one `reply`; every failure but PROTOCOL is a coded
 * error in it. The connection keeps what its client named: queues, events, gates, and the host
 * calls it forwards to the client.
 *
 * Ownership: the server makes one per accepted transport; when the transport closes, the
 * connection releases what it holds (its session, unless it is a peer link's) and tells the server.
 */
import { errors, messageOf, OffloadError, quoted } from '../errors.js';
import { debug } from '../runtime/debug.js';
import type { Device } from '../api/device.js';
import type { Event, Queue } from '../api/queue.js';
import type { Runtime } from '../api/runtime.js';
import type { KernelPrint } from '../runtime/options.js';
import type { HostCall } from '../api/host-functions.js';
import type { Frame } from '../transport/frame.js';
import type { Transport } from '../transport/transport.js';
import { reportPollingTo } from '../transport/poll-window.js';
import { decodeChunk, decodeHostCallResult, decodeRequest, frameOp, requestId } from '../protocol/decode-request.js';
import type { Deferred } from '../protocol/gate.js';
import type { ProxyFrame, ReplyBody, ReplyFrame } from '../protocol/messages.js';
import { toWireError } from '../protocol/wire.js';
import { BulkTransfers } from './bulk-transfers.js';
import { dispatch } from './dispatch.js';
import { hello, LOGIN_LIMITS, type SessionDirectory } from './handshake.js';
import type { PeerLinks } from './peer-links.js';
import type { Session } from './session.js';

/**
 * Requests (and their bytes) a client may send while one that makes an object is in progress
 * (see `barrier`); beyond them the connection is closed with PROTOCOL.
 */
const MAX_HELD_FRAMES = 4096;
const MAX_HELD_BYTES = 64 * 1024 * 1024;
/** Queues refused at creation whose error is kept for the requests that name them. */
const MAX_QUEUE_REFUSALS = 256;

/**
 * Bytes of replies waiting to go to a client beyond which its requests are not read until they
 * have gone (see `stopReading`). A queued reply costs the proxy its bytes and a write request
 * besides (a few hundred bytes: 30-byte ping replies cost ten times their size), so the mark is
 * low: a client that never reads holds about this much of the proxy's memory, and the OS's buffers.
 */
export const REPLY_BACKLOG_BYTES = 1024 * 1024;

/**
 * The least a frame in progress must gain per window (or the rest of it, when less is left):
 * liveness counts bytes, so without it a client trickling a byte a second holds a 64 MiB frame
 * (and the memory it is buffered in) for ever. The window is a sixth of the peer timeout
 * (at least 1 s, at most 10 s): 10 s by default, and 16 KiB in 10 s is far below any network.
 */
export const MIN_FRAME_PROGRESS_BYTES = 16 * 1024;
export function frameWindowMs(peerTimeoutMs: number): number {
  return Math.min(10_000, Math.max(1000, Math.floor(peerTimeoutMs / 6)));
}

export class ProxyConnection {
  /** The client's session, once logged in (a peer link: the session of the client that granted it). */
  session: Session | undefined;
  /** Set while the session of an accepted hello is being made. */
  loggingIn = false;
  /**
   * Requests that arrived while an earlier one that makes an object (the session of `hello`, an
   * image, a kernel, a buffer) was in progress: handled in order once it is done, so that a
   * pipelined request finds what the ones before it made.
   */
  private held: Frame[] | undefined;
  private heldBytes = 0;
  /** Requests whose reply has not gone yet (replies sent through `reply`). */
  private unanswered = 0;
  /** Closes a connection that has not logged in by then. */
  private readonly loginDeadline: NodeJS.Timeout;
  /** After login: closes the connection when a frame in progress stops coming (MIN_FRAME_PROGRESS_BYTES). */
  private progressWatch: NodeJS.Timeout | undefined;
  /**
   * While the client does not read its replies (more than REPLY_BACKLOG_BYTES wait to go), its
   * requests are not read either: what it makes the proxy hold is bounded by that mark, not by
   * how fast it sends.
   */
  private readingPaused = false;
  /** Gives back the pending bytes counted for the frame being received (its payload is buffered here). */
  private frameGiveBack: (() => void) | undefined;
  /** A refused login waits out its delay (the server slows failing logins down): nothing more is read. */
  refused = false;
  /** For a peer proxy's link: the one buffer of the client's session it may write into. */
  granted: number | undefined;
  get attached(): boolean {
    return this.granted !== undefined;
  }
  readonly queues = new Map<number, Queue>();
  /** Queues refused at creation, by client id, and why (see refusedQueue). */
  private readonly queueRefusals = new Map<number, OffloadError>();
  /** The client's id of each of those queues, by the proxy queue's own id (print lines name the latter). */
  readonly clientQueueIds = new Map<number, number>();
  readonly events = new Map<number, Event>();
  lastEvent = 0;
  /** Gates of `wait-host` requests, until the client's `signal`. */
  readonly gates = new Map<number, Deferred>();
  /** Host calls sent to the client and not answered yet, by call id. */
  private readonly hostCalls = new Map<number, { resolve: (value: number) => void; reject: (error: Error) => void }>();
  private nextHostCall = 1;
  readonly bulk = new BulkTransfers(this);

  constructor(
    readonly transport: Transport,
    /** The proxy's runtime: what the devices are (each session works in a context of it). */
    readonly runtime: Runtime,
    readonly directory: SessionDirectory,
    readonly peers: PeerLinks,
    /** Told once the connection has closed and everything it held is released. */
    private readonly onClosed: () => void = () => {},
  ) {
    transport.onFrame = (frame) => this.onFrame(frame);
    // What the polling policy chooses, and each change of mind, under OFFLOAD_DEBUG.
    reportPollingTo((line) => debug.log('proxy polling', line));
    transport.payloadSink = (meta, length) => this.payloadTarget(meta, length);
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

  /** The login was accepted: the login deadline no longer applies, the frame progress rule does. */
  loggedInNow(): void {
    clearTimeout(this.loginDeadline);
    this.watchProgress();
  }

  /**
   * Where a frame's payload lands: in device memory for a streamed write's chunk; else it is
   * buffered here until the frame is whole, and counted meanwhile as the session's pending bytes
   * (and the proxy's memory): over the quota, the connection is closed with OUT_OF_MEMORY.
   */
  private payloadTarget(meta: Record<string, unknown>, length: number): Uint8Array | undefined {
    const target = this.bulk.chunkTarget(meta, length);
    if (target !== undefined || !this.session) return target;
    try {
      this.frameGiveBack = this.session.take('pendingBytes', length);
    } catch (error) {
      this.refuse(0, error as OffloadError);
    }
    return undefined;
  }

  /** Checks each window that a frame in progress gained MIN_FRAME_PROGRESS_BYTES (or its rest); closes the connection if not. */
  private watchProgress(): void {
    const windowMs = frameWindowMs(this.directory.peerTimeoutMs);
    let frames = -1;
    let received = 0;
    this.progressWatch = setInterval(() => {
      const { transport } = this;
      const progress = this.readingPaused ? undefined : transport.frameInProgress?.();
      const count = transport.stats.framesReceived;
      if (progress && count === frames) {
        const gained = progress.received - received;
        if (gained < Math.min(MIN_FRAME_PROGRESS_BYTES, progress.total - received)) {
          return this.refuse(
            0,
            errors.protocol(
              `a frame of ${progress.total} bytes gained ${gained} bytes in ${windowMs} ms (${progress.received} so far); ` +
                `a frame must keep coming at ${MIN_FRAME_PROGRESS_BYTES} bytes per ${windowMs} ms at least`,
            ),
          );
        }
      }
      frames = count;
      received = progress?.received ?? 0;
    }, windowMs);
    this.progressWatch.unref();
  }

  /** A peer link's login: it works in `session`, and may write into its buffer `buffer` only. */
  attach(session: Session, buffer: number): void {
    this.session = session;
    this.granted = buffer;
    session.attached.add(this.transport);
  }

  /**
   * Sends a frame, whatever it holds: a frame that cannot be encoded (a reply grown past the
   * frame limits) closes this connection with PROTOCOL instead of throwing out of an event handler.
   */
  send(frame: ProxyFrame | ReplyFrame, payload?: Uint8Array): boolean {
    try {
      const room = this.transport.send(frame, payload);
      if (!room || (this.transport.queuedBytes?.() ?? 0) > REPLY_BACKLOG_BYTES) this.stopReading();
      return room;
    } catch (error) {
      this.transport.close(
        new OffloadError('PROTOCOL', `a ${quoted(frame.op)} frame could not be sent: ${messageOf(error)}`, {
          cause: error,
        }),
      );
      return true;
    }
  }

  /** Stops reading the client's requests until every reply sent so far has gone to the OS. */
  private stopReading(): void {
    const { transport } = this;
    if (this.readingPaused || !transport.pauseReading) return;
    this.readingPaused = true;
    transport.pauseReading();
    void transport.flushed().then(() => {
      this.readingPaused = false;
      if (!this.refused) transport.resumeReading?.();
    });
  }

  /** Answers request `id` with `error` and closes the connection. */
  refuse(id: number, error: OffloadError): void {
    debug.log('proxy', `closing the connection of ${this.transport.peer}: ${error.code}: ${error.message}`);
    this.send({ op: 'reply', id, error: toWireError(error) });
    this.transport.close(error);
  }

  /**
   * Sends the reply of request `id` when `result` settles. The last of the client's requests
   * answered, its next one may follow at once: the transport is told to expect it (TCP polls a
   * while instead of sleeping). `gone`: called once the reply has left for the OS (the memory
   * of its payload is free then), or at once when it failed.
   */
  reply<T>(
    id: number,
    result: Promise<T>,
    fields?: (value: T) => ReplyBody,
    payload?: () => Uint8Array,
    gone?: () => void,
  ): void {
    this.unanswered++;
    result.then(
      (value) => {
        // No spread for the common reply, which has no fields (a launch's): it is every request's.
        this.send(fields ? { op: 'reply', id, ...fields(value) } : { op: 'reply', id }, payload?.());
        if (gone) void this.transport.flushed().then(gone);
        this.answered();
      },
      (error: unknown) => {
        this.send({ op: 'reply', id, error: toWireError(error) });
        gone?.();
        this.answered();
      },
    );
  }

  private answered(): void {
    if (--this.unanswered === 0) this.transport.expectSoon?.();
  }

  /** Queues this connection holds (its client's and its own for chunked transfers). */
  get queueCount(): number {
    return this.queues.size + this.bulk.queueCount;
  }

  private onFrame(frame: Frame): void {
    // The frame is whole: its payload is counted from here as its request counts it.
    this.frameGiveBack?.();
    this.frameGiveBack = undefined;
    if (this.refused) return;
    // Chunks feed a write already accepted, in their own order: they never wait.
    if (this.held && frame.meta.op !== 'chunk') {
      this.heldBytes += frame.payload.byteLength;
      if (this.held.length >= MAX_HELD_FRAMES || this.heldBytes > MAX_HELD_BYTES) {
        return this.refuse(
          0,
          errors.protocol(
            `more than ${MAX_HELD_FRAMES} requests or ${MAX_HELD_BYTES} bytes arrived behind one still in progress; wait for its reply`,
          ),
        );
      }
      this.held.push(frame);
      return;
    }
    this.handle(frame);
  }

  /** Holds later requests until `making` settles (it makes an object they may name). */
  barrier(making: Promise<unknown>): void {
    this.held ??= [];
    making.then(
      () => this.releaseHeld(),
      () => this.releaseHeld(),
    );
  }

  /** `making`, with later requests held until it settles. */
  made<T>(making: Promise<T>): Promise<T> {
    // Released a tick after `making` settles: its own reply goes out before the requests held behind it are handled.
    this.barrier(
      making.then(
        () => {},
        () => {},
      ),
    );
    return making;
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
    // Read before anything is checked, so that even a malformed request's answer names it.
    const given = frame.meta.id;
    let id = typeof given === 'number' && Number.isSafeInteger(given) && given >= 0 ? given : 0;
    try {
      const op = frameOp(frame);
      if (op === 'chunk') {
        const chunk = decodeChunk(frame);
        return this.bulk.chunk(chunk.id, chunk.offset, frame.payload);
      }
      // An answer, not a request: it never waits behind one (a launch may be waiting for it).
      if (op === 'host-call-result' && this.session) return this.hostCallResult(frame);
      id = requestId(frame);
      if (!this.session) {
        if (op !== 'hello') throw errors.protocol(`the first frame must be 'hello', not ${quoted(op)}`);
      }
      const request = decodeRequest(frame);
      if (request.op === 'hello' && !this.session) return hello(this, request);
      dispatch(this, request, frame.payload);
    } catch (error) {
      if (error instanceof OffloadError && error.code === 'PROTOCOL') this.refuse(id, error);
      else this.reply(id, Promise.reject(error));
    }
  }

  /**
   * Sends a line the client's kernel printed, as it is printed: before the launch's reply, which
   * goes out only once the launch's event completes. Named by the client's queue id.
   */
  forwardPrint(line: KernelPrint): void {
    const queue = this.clientQueueIds.get(line.queue);
    if (queue !== undefined) this.send({ op: 'print', queue, kernel: line.kernel, team: line.team, text: line.text });
  }

  /**
   * Sends a kernel's host call to the client, whose program runs the function, and resolves
   * with its answer ('host-call-result'). A call of a queue the client has destroyed, or once
   * the client is gone, fails; at most one call per worker of the device waits at a time.
   */
  forwardHostCall(call: HostCall): Promise<number> {
    const queue = this.clientQueueIds.get(call.queue);
    if (queue === undefined || this.transport.closed)
      return Promise.reject(new Error('the client that launched the kernel is gone'));
    const id = this.nextHostCall++;
    return new Promise<number>((resolve, reject) => {
      this.hostCalls.set(id, { resolve, reject });
      this.send({ op: 'host-call', call: id, queue, kernel: call.kernel, name: call.name, args: call.args });
    });
  }

  /** The client's answer to a host call (an unknown call is a protocol error: the client made it up). */
  private hostCallResult(frame: Frame): void {
    const result = decodeHostCallResult(frame);
    const pending = this.hostCalls.get(result.call);
    if (pending === undefined)
      throw errors.protocol(`'host-call-result' for call ${result.call}, which is not waiting`);
    this.hostCalls.delete(result.call);
    if (result.error) return pending.reject(new Error(result.error.message));
    pending.resolve(result.value ?? Number.NaN);
  }

  device(index: number): Device {
    const device = this.session!.runtime.devices[index];
    if (!device) throw errors.notFound(`this proxy has no device ${index}`);
    return device;
  }

  queue(id: number): Queue {
    const queue = this.queues.get(id);
    if (!queue)
      throw this.queueRefusals.get(id) ?? errors.invalidArgument(`queue ${id} does not exist on this connection`);
    return queue;
  }

  /**
   * Queue `id` was not made (over --quota-queues): requests naming it fail with `error`, not as
   * naming no queue. The latest MAX_QUEUE_REFUSALS are remembered.
   */
  refusedQueue(id: number, error: OffloadError): void {
    if (this.queueRefusals.size >= MAX_QUEUE_REFUSALS)
      this.queueRefusals.delete(this.queueRefusals.keys().next().value!);
    this.queueRefusals.set(id, error);
  }

  ownerOnly(what: string): void {
    if (this.attached) throw errors.unauthorized(`a peer link may not ${what}`);
  }

  private async closed(): Promise<void> {
    clearTimeout(this.loginDeadline);
    clearInterval(this.progressWatch);
    this.frameGiveBack?.();
    this.frameGiveBack = undefined;
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
    const sideQueues = this.bulk.release();
    this.gates.clear();
    const queues = [...this.queues.values(), ...sideQueues];
    this.queues.clear();
    this.clientQueueIds.clear();
    this.events.clear();
    // A peer link's queues are its own; the owner's context shutdown (below) drains the rest.
    if (this.attached) await Promise.all(queues.map((queue) => queue.destroy()));
    if (!session) return;
    if (this.attached) session.attached.delete(this.transport);
    else await this.directory.close(session);
  }
}
