/**
 * A client connection to one proxy: sends requests without waiting, matches replies by id, routes
 * the `ready` and `data` frames of bulk transfers, and turns a broken connection into DEVICE_LOST
 * for every pending and later request at once. Each request's deadline is request-deadlines.ts's;
 * what a proxy may send for a queue's running launches (print lines, host calls),
 * launch-windows.ts's.
 *
 * Ownership: the connection owns its transport; `close()` closes it and rejects what is pending.
 */
import { MAX_REMOTE_EVENTS, Tracer, type ClockAlignment, type TraceEvent } from '../../runtime/trace.js';
import { asOffloadError, errors, messageOf, OffloadError } from '../../errors.js';
import type { DeviceInfo, HostCallListener, PrintListener } from '../interface.js';
import {
  connectTo,
  DEFAULT_CONNECT_TIMEOUT_MS,
  linkedInJob,
  sameAddress,
  type TlsClientOptions,
} from '../../transport/connect.js';
import { abortError } from '../../abort.js';
import type { Frame } from '../../transport/frame.js';
import { peerTimeoutFromEnv, startHeartbeat } from '../../transport/heartbeat.js';
import { reportPollingTo } from '../../transport/poll-report.js';
import { debug } from '../../runtime/debug.js';
import type { Connector, Transport } from '../../transport/transport.js';
import { fromWireError, PROTOCOL_VERSION } from '../../protocol/wire.js';
import type { ClientNote, OutgoingRequest, Requests } from '../../protocol/messages.js';
import { decodeHelloReply, decodeProxyFrame } from '../../protocol/decode-reply.js';
import { compactMeta } from '../../protocol/compact.js';
import { LaunchWindows } from './launch-windows.js';
import { PendingRequests } from './pending-requests.js';
import { requestTimeoutFromEnv, RequestDeadlines, type TimedRequest } from './request-deadlines.js';
import { checkedTraceEvent } from './trace-events.js';

/** Callbacks of a request that streams: `ready` (rendezvous write may start), `data` (read chunks). */
export interface StreamHandlers {
  onReady?(): void;
  onData?(offset: number, payload: Uint8Array): void;
  /** Where the `data` frame at `offset` may land directly (a view of `length` bytes), if anywhere. */
  dataTarget?(offset: number, length: number): Uint8Array | undefined;
}

/** Where a request's reply goes: its promise's functions, or a launch's own listener (no promise). */
export interface ReplyTarget {
  resolve(frame: Frame): void;
  reject(error: OffloadError): void;
}

interface Pending extends TimedRequest {
  target: ReplyTarget;
  handlers: StreamHandlers | undefined;
}

export interface ConnectOptions {
  /** The proxy's token (a client), or a write grant of one of its buffers (a peer proxy's link). */
  token?: string;
  grant?: string;
  /**
   * How long the proxy has to accept the connection and answer its hello, in milliseconds
   * (default 10000): a proxy that accepts and never answers is DEVICE_LOST after it.
   */
  timeoutMs?: number;
  /** Gives up connecting (ABORTED, or the signal's reason). */
  signal?: AbortSignal;
  /** Ask the proxy to keep the spans of this session's work, for `traceEvents()`. */
  trace?: boolean;
  /** A proxy silent this long is DEVICE_LOST (default OFFLOAD_PEER_TIMEOUT, or 10 s). */
  peerTimeoutMs?: number;
  /**
   * How long the proxy has to answer a request once it can start it (default
   * OFFLOAD_REQUEST_TIMEOUT, or 10 minutes): from when it is sent, or a queue operation from its
   * queue's last answer, whichever is later; a launch has its own time limit more. A proxy that
   * misses a deadline is DEVICE_LOST, however many heartbeats it sends.
   */
  requestTimeoutMs?: number;
  /** TLS for every TCP address, trusting these CAs (a `tls://` address asks for TLS on its own). */
  tls?: TlsClientOptions;
  /**
   * Opens the transport to an address (default: `connectTo` with `timeoutMs`, `tls` and
   * `signal`, which knows the address forms). Tests pass one end of an in-memory pair.
   */
  connect?: Connector;
}

export class RemoteConnection {
  private readonly pending = new PendingRequests<Pending>();
  private nextId = 1;
  /** Whether the transport keeps the process alive: while requests are pending (see `holdWhileBusy`). */
  private holding = true;
  private lostError: OffloadError | undefined;
  private readonly lostListeners: ((error: OffloadError) => void)[] = [];
  devices: DeviceInfo[] = [];
  /** The proxies this one links to itself (its --peers): copies to others go through this client. */
  private peers: readonly string[] | 'any' = [];
  /** Each queue's running launches, which bound what the proxy may print and call for it. */
  private readonly launches: LaunchWindows;
  /** Deadlines of requests (see ConnectOptions.requestTimeoutMs). */
  private readonly deadlines: RequestDeadlines;

  private constructor(
    readonly transport: Transport,
    readonly address: string,
  ) {
    this.launches = new LaunchWindows(address, (note) => this.post(note));
    this.deadlines = new RequestDeadlines(
      address,
      this.pending,
      () => this.launches.running,
      (error) => transport.close(error),
    );
    transport.onFrame = (frame) => this.onFrame(frame);
    // What the polling policy chooses, and each change of mind, under OFFLOAD_DEBUG.
    reportPollingTo((line) => debug.log('client polling', line));
    // Offered in the hello; taken back if the proxy's welcome does not take it (an older proxy).
    transport.metaCodec = compactMeta;
    transport.payloadSink = (meta, length) => {
      if (meta.op !== 'data' || typeof meta.id !== 'number' || typeof meta.offset !== 'number') return undefined;
      return this.pending.get(meta.id)?.handlers?.dataTarget?.(meta.offset, length);
    };
    transport.onClose = (reason) =>
      this.fail(reason ?? errors.deviceLost(`the connection to proxy ${address} was closed`));
  }

  /** Connects and says hello; rejects with UNAUTHORIZED for a wrong token, DEVICE_LOST if unreachable. */
  static async open(address: string, options: ConnectOptions): Promise<RemoteConnection> {
    const started = Date.now();
    const timeoutMs = options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const { signal } = options;
    const connect = options.connect ?? ((to: string) => connectTo(to, { timeoutMs, tls: options.tls, signal }));
    const transport = await connect(address);
    const connection = new RemoteConnection(transport, address);
    // The hello's reply counts against the same time limit as the connect: a proxy (or anything
    // else on that port) that accepts and never answers is DEVICE_LOST, not a wait for ever.
    let timedOut = false;
    const silent = setTimeout(
      () => {
        timedOut = true;
        transport.close(
          errors.deviceLost(
            `proxy ${address} accepted the connection but did not answer within ${timeoutMs} ms (connectTimeoutMs)`,
          ),
        );
      },
      Math.max(0, timeoutMs - (Date.now() - started)),
    );
    const onAbort = () => transport.close(abortError(signal!, `connecting to proxy ${address}`));
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    const hello: Requests['hello'] = { version: PROTOCOL_VERSION, compact: true };
    if (options.token !== undefined) hello.token = options.token;
    if (options.grant !== undefined) hello.grant = options.grant;
    if (options.trace === true) hello.trace = true;
    // A proxy on this host learns this process, to tell whether the two share their only core.
    const local = transport.localProcess?.();
    if (local) Object.assign(hello, local);
    try {
      const sent = Tracer.now();
      const reply = await connection.request({ op: 'hello', ...hello });
      const received = Tracer.now();
      const { devices, peers, now, compact, process } = decodeHelloReply(reply);
      if (!compact) transport.metaCodec = undefined;
      if (process) transport.peerProcess?.(process);
      // The proxy's clock read between send and receive: at the midpoint, within half the round trip.
      if (now !== undefined)
        connection.clock = { proxy: address, offsetUs: now - (sent + received) / 2, roundTripUs: received - sent };
      connection.devices = devices;
      connection.peers = peers;
      startHeartbeat(transport, options.peerTimeoutMs ?? peerTimeoutFromEnv());
      connection.deadlines.start(options.requestTimeoutMs ?? requestTimeoutFromEnv());
      connection.holdWhileBusy();
      return connection;
    } catch (error) {
      transport.close();
      throw transport.stats.bytesReceived === 0 && !timedOut && !signal?.aborted
        ? closedBeforeHello(address, error)
        : error;
    } finally {
      clearTimeout(silent);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** How the proxy's clock relates to ours, from the hello's round trip (undefined: the proxy did not say). */
  clock: ClockAlignment | undefined;

  /**
   * The spans the proxy kept of this session's work (its hello asked for them), checked: what
   * is not a well-formed trace event is left out, so a hostile proxy cannot break the trace.
   */
  async traceEvents(): Promise<{ events: TraceEvent[]; dropped: number }> {
    const reply = await this.request({ op: 'trace' });
    let parsed: unknown;
    try {
      parsed = JSON.parse(new TextDecoder().decode(reply.payload));
    } catch {
      throw errors.protocol(`proxy ${this.address} sent a trace that is not JSON`);
    }
    if (!Array.isArray(parsed))
      throw errors.protocol(`proxy ${this.address} sent a trace that is not an array of events`);
    const events: TraceEvent[] = [];
    for (const told of parsed) {
      if (events.length === MAX_REMOTE_EVENTS) break;
      const event = checkedTraceEvent(told);
      if (event) events.push(event);
    }
    const told = reply.meta.dropped;
    const dropped = typeof told === 'number' && Number.isSafeInteger(told) && told >= 0 ? told : 0;
    return { events, dropped: dropped + parsed.length - events.length };
  }

  /**
   * Whether this proxy copies to `other` itself (proxy to proxy), rather than through the client:
   * it then gets the write grant of the destination buffer on `other`. Only when its hello named
   * `other` by the address this client itself gave for it, or both are ranks of this client's MPI
   * job: a proxy that says it links to 'any' address gets no grant (a hostile one would keep it
   * and write into that buffer later), and its copies go through the client.
   */
  linksTo(other: RemoteConnection): boolean {
    if (linkedInJob(this.address, other.address)) return true;
    if (this.peers === 'any') return false;
    return this.peers.some((peer) => sameAddress(peer, other.address));
  }

  get lost(): OffloadError | undefined {
    return this.lostError;
  }

  onLost(listener: (error: OffloadError) => void): void {
    this.lostListeners.push(listener);
  }

  /**
   * Sends a request; resolves with its reply frame, rejects with the reply's error. `request` is
   * a fresh object, given its `id` here rather than copied: a spread of every request (of every
   * shape, so never the fast one) cost more than encoding it.
   */
  request(request: OutgoingRequest, payload?: Uint8Array, handlers?: StreamHandlers): Promise<Frame> {
    if (this.lostError) return Promise.reject(this.lostError);
    return new Promise<Frame>((resolve, reject) => this.requestTo(request, { resolve, reject }, payload, handlers));
  }

  /**
   * Sends a request whose reply goes to `target`, as it arrives: a launch's reply settles its
   * event with no promise made for it. A request that cannot be sent is rejected at once.
   */
  requestTo(request: OutgoingRequest, target: ReplyTarget, payload?: Uint8Array, handlers?: StreamHandlers): void {
    if (this.lostError) return target.reject(this.lostError);
    const id = this.nextId++;
    const meta = request as unknown as Record<string, unknown>;
    const queue = typeof meta.queue === 'number' ? meta.queue : undefined;
    const extraMs = request.op === 'launch' && typeof meta.timeoutMs === 'number' ? meta.timeoutMs : 0;
    const pending: Pending = { target, handlers, op: request.op, queue, sentAt: Date.now(), extraMs };
    this.pending.set(id, pending);
    if (request.op === 'launch' && queue !== undefined) this.launches.started(queue);
    this.deadlines.sent(request.op, queue, meta.gate);
    if (!this.holding) this.holdWhileBusy();
    try {
      meta.id = id;
      this.transport.send(meta, payload);
      // The one request in flight: its reply is awaited, so read it eagerly (TCP polls a while).
      if (this.pending.size === 1) this.transport.expectSoon?.();
    } catch (error) {
      // A request that cannot be framed (an image over 64 MiB, a manifest over 64 KiB) fails
      // alone, as its own rejection: never an exception out of an enqueueing call.
      this.settled(pending);
      this.pending.delete(id);
      this.holdWhileBusy();
      target.reject(
        new OffloadError(
          'INVALID_ARGUMENT',
          `a '${request.op}' request to proxy ${this.address} cannot be sent: ${messageOf(error)}`,
          { cause: error },
        ),
      );
    }
  }

  /** Sends a frame that gets no reply (chunks of a write). Returns false above the high-water mark. */
  post(note: ClientNote, payload?: Uint8Array): boolean {
    try {
      return this.transport.send(note, payload);
    } catch (error) {
      this.transport.close(
        new OffloadError(
          'PROTOCOL',
          `a '${note.op}' frame to proxy ${this.address} cannot be sent: ${messageOf(error)}`,
          { cause: error },
        ),
      );
      return true;
    }
  }

  /**
   * The connection keeps the process alive only while a request is pending (its reply is work
   * in flight), as Node's own sockets after `unref()`: a program that is done exits with its
   * proxies still connected, shut down or not. Heartbeats never hold it (heartbeat.ts).
   */
  private holdWhileBusy(): void {
    const busy = this.pending.size > 0;
    if (busy === this.holding) return;
    this.holding = busy;
    this.transport.hold?.(busy);
  }

  drained(): Promise<void> {
    return this.transport.drained();
  }

  /** Id the next request will get (lets a caller route frames before the request is sent). */
  peekId(): number {
    return this.nextId;
  }

  private onFrame(frame: Frame): void {
    try {
      const decoded = decodeProxyFrame(frame, this.address);
      switch (decoded.op) {
        case 'print':
          return this.launches.printed(decoded);
        case 'host-call':
          return this.launches.hostCalled(decoded);
        case 'reply':
          if (decoded.id === 0) {
            // Request 0 is the connection itself: the proxy says why it closes it.
            throw decoded.error
              ? fromWireError(decoded.error, this.address)
              : errors.protocol(`proxy ${this.address} answered request 0 without an error`);
          }
      }
      const pending = this.pending.get(decoded.id);
      if (!pending) throw errors.protocol(`proxy ${this.address} answered request ${decoded.id}, which is not pending`);
      this.deadlines.answered(pending.queue);
      if (decoded.op === 'reply') {
        this.settled(pending);
        this.pending.delete(decoded.id);
        if (this.pending.size === 0) this.holdWhileBusy();
        if (decoded.error) pending.target.reject(fromWireError(decoded.error, this.address));
        else pending.target.resolve(frame);
      } else if (decoded.op === 'ready' && pending.handlers?.onReady) {
        pending.handlers.onReady();
      } else if (decoded.op === 'data' && pending.handlers?.onData) {
        pending.handlers.onData(decoded.offset, frame.payload);
      } else {
        throw errors.protocol(`unexpected '${decoded.op}' frame from proxy ${this.address}`);
      }
    } catch (error) {
      this.transport.close(asOffloadError(error, `handling a frame from proxy ${this.address}`));
    }
  }

  /** A request of this client's settles (or is never sent): what it held here is released. */
  private settled(request: Pending): void {
    if (request.queue === undefined) return;
    if (request.op === 'launch') this.launches.ended(request.queue);
    this.deadlines.settled(request.op, request.queue);
  }
  /** Where the host calls of the proxy's queue `queue` go (undefined: nowhere any more). */
  listenForHostCalls(queue: number, listener: HostCallListener | undefined): void {
    this.launches.listenForHostCalls(queue, listener);
  }

  /** Where the print() lines of the proxy's queue `queue` go (undefined: nowhere any more). */
  listenForPrints(queue: number, listener: PrintListener | undefined): void {
    this.launches.listenForPrints(queue, listener);
  }

  private fail(reason: OffloadError): void {
    if (this.lostError) return;
    this.deadlines.stop();
    this.lostError =
      reason.code === 'DEVICE_LOST' || reason.code === 'UNAUTHORIZED'
        ? reason
        : errors.deviceLost(`the connection to proxy ${this.address} failed: ${reason.message}`);
    const pending = this.pending.values();
    this.pending.clear();
    for (const request of pending) request.target.reject(this.lostError);
    for (const listener of this.lostListeners) listener(this.lostError);
  }

  close(): void {
    this.transport.close();
  }
}
/**
 * A peer that hung up on the hello without a byte: a TLS proxy reached in clear text does that
 * (its handshake fails on our frame), and so does a server of another protocol that waits for
 * more than it got. Said so, rather than "connection closed".
 */
function closedBeforeHello(address: string, error: unknown): unknown {
  if (!(error instanceof OffloadError) || error.code !== 'DEVICE_LOST') return error;
  return new OffloadError(
    'DEVICE_LOST',
    `proxy ${address} closed the connection without answering the hello (${error.message}): a proxy started with --tls-cert is reached as tls://${address}; is \`offload proxy\` running at ${address}?`,
    { cause: error },
  );
}
