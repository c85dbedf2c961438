/**
 * A client connection to one proxy: sends requests without waiting, matches replies by id, routes
 * the `ready` and `data` frames of bulk transfers, and turns a broken connection into DEVICE_LOST
 * for every pending and later request at once.
 *
 * Ownership: the connection owns its transport; `close()` closes it and rejects what is pending.
 */
import { MAX_REMOTE_EVENTS, Tracer, type ClockAlignment, type TraceEvent } from '../../runtime/trace.js';
import { asOffloadError, errors, messageOf, OffloadError } from '../../errors.js';
import {
  cut,
  type HostCallListener,
  MAX_HOST_FUNCTION_NAME,
  MAX_KERNEL_NAME_CHARS,
  MAX_PRINT_CHARS,
  type DeviceInfo,
  type PrintListener,
} from '../interface.js';
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
import type { ClientNote, OutgoingRequest, ProxyFrames, Requests } from '../../protocol/messages.js';
import { decodeHelloReply, decodeProxyFrame } from '../../protocol/decode-reply.js';
import { compactMeta } from '../../protocol/compact.js';
import { parseMilliseconds } from '../../units.js';
import { environment, letGo } from '../../platform.js';

/** Callbacks of a request that streams: `ready` (rendezvous write may start), `data` (read chunks). */
export interface StreamHandlers {
  onReady?(): void;
  onData?(offset: number, payload: Uint8Array): void;
  /** Where the `data` frame at `offset` may land directly (a view of `length` bytes), if anywhere. */
  dataTarget?(offset: number, length: number): Uint8Array | undefined;
}

interface Pending {
  resolve(frame: Frame): void;
  reject(error: OffloadError): void;
  handlers: StreamHandlers | undefined;
  /** The request's op and queue (undefined: not a queue operation), for its deadline. */
  op: string;
  queue: number | undefined;
  /** When it was sent (Date.now()), and how much longer than the request deadline it may take (a launch's own limit). */
  sentAt: number;
  extraMs: number;
}

/** How long a proxy has to answer a request once it can start it, by default (OFFLOAD_REQUEST_TIMEOUT overrides). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 600_000;

/** OFFLOAD_REQUEST_TIMEOUT in milliseconds, else DEFAULT_REQUEST_TIMEOUT_MS. */
export function requestTimeoutFromEnv(env: NodeJS.ProcessEnv = environment()): number {
  const text = env.OFFLOAD_REQUEST_TIMEOUT;
  return text === undefined || text === ''
    ? DEFAULT_REQUEST_TIMEOUT_MS
    : parseMilliseconds(text, 'OFFLOAD_REQUEST_TIMEOUT');
}

/**
 * What a proxy may print for one launch of a queue, in characters (the host device keeps 16 KiB
 * of a launch's lines; a GPU less): past it, lines are dropped and counted, and one line says so
 * when the launch ends.
 */
export const REMOTE_PRINT_BUDGET_CHARS = 256 * 1024;
/**
 * Host calls a proxy may have unanswered at once on one connection: each is a kernel thread
 * waiting on the proxy, so a legitimate proxy has at most its devices' threads in flight.
 */
export const MAX_HOST_CALLS_IN_FLIGHT = 4096;

/** What a queue's running launches may still send: print lines within the budget, host calls. */
interface LaunchWindow {
  /** Launches of the queue sent and not yet answered. */
  launches: number;
  /** Characters printed since the last launch of the queue ended, and lines dropped over the budget. */
  printed: number;
  dropped: number;
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
  private readonly pending = new Map<number, Pending>();
  /** Where each queue's print() lines go, by the queue's id on the proxy. */
  private readonly printListeners = new Map<number, PrintListener>();
  /** Where each queue's host calls go, by the queue's id on the proxy. */
  private readonly hostCallListeners = new Map<number, HostCallListener>();
  private nextId = 1;
  /** Whether the transport keeps the process alive: while requests are pending (see `holdWhileBusy`). */
  private holding = true;
  private lostError: OffloadError | undefined;
  private readonly lostListeners: ((error: OffloadError) => void)[] = [];
  devices: DeviceInfo[] = [];
  /** The proxies this one links to itself (its --peers): copies to others go through this client. */
  private peers: readonly string[] | 'any' = [];
  /** Deadlines of requests (see ConnectOptions.requestTimeoutMs): the last answer of each queue, and queues parked here. */
  private requestTimeoutMs = DEFAULT_REQUEST_TIMEOUT_MS;
  private readonly queueAnsweredAt = new Map<number, number>();
  private answeredAt = Date.now();
  /** Queues this client holds at a gate ('wait-host' until its 'signal'), by gate: their time is the client's, not the proxy's. */
  private readonly parkedGates = new Map<number, number>();
  private readonly parkedQueues = new Map<number, number>();
  /** Queues with a 'wait' for another queue's event pending, and how many. */
  private readonly waitingQueues = new Map<number, number>();
  private deadlineTimer: ReturnType<typeof setInterval> | undefined;
  /** Each queue's running launches, which bound what the proxy may print and call for it. */
  private readonly launchWindows = new Map<number, LaunchWindow>();
  private hostCallsInFlight = 0;

  private constructor(
    readonly transport: Transport,
    readonly address: string,
  ) {
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

  /** Checks every pending request's deadline every second (less for short deadlines); stops when the connection fails. */
  private startDeadlines(timeoutMs: number): void {
    this.requestTimeoutMs = timeoutMs;
    this.deadlineTimer = setInterval(
      () => this.checkDeadlines(),
      Math.max(10, Math.min(1000, Math.floor(timeoutMs / 4))),
    );
    // The deadlines never keep a process alive by themselves: the transport's own handle decides.
    letGo(this.deadlineTimer);
  }

  private checkDeadlines(): void {
    if (this.pending.size === 0 || this.lostError) return;
    const now = Date.now();
    for (const [id, request] of this.pending) {
      if (request.op === 'wait-host') continue;
      let since = request.sentAt;
      if (request.queue !== undefined) {
        if (this.parkedQueues.has(request.queue)) continue;
        since = Math.max(since, this.queueAnsweredAt.get(request.queue) ?? 0);
      }
      // A wait for another queue's event (and what its queue holds behind it) goes on as the
      // connection's other queues do: not while one of them is parked here or runs a launch
      // (which has its own deadline), else from the connection's last answer.
      if (request.op === 'wait' || (request.queue !== undefined && this.waitingQueues.has(request.queue))) {
        if (this.parkedQueues.size > 0 || this.launchWindows.size > 0) continue;
        since = Math.max(since, this.answeredAt);
      }
      const allowed = this.requestTimeoutMs + request.extraMs;
      if (now - since < allowed) continue;
      this.transport.close(
        errors.deviceLost(
          `proxy ${this.address} did not answer its '${request.op}' request ${id} within ${allowed} ms of being able to start it (requestTimeoutMs, OFFLOAD_REQUEST_TIMEOUT); taken as gone`,
        ),
      );
      return;
    }
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
    try {
      const sent = Tracer.now();
      const reply = await connection.request({ op: 'hello', ...hello });
      const received = Tracer.now();
      const { devices, peers, now, compact } = decodeHelloReply(reply);
      if (!compact) transport.metaCodec = undefined;
      // The proxy's clock read between send and receive: at the midpoint, within half the round trip.
      if (now !== undefined)
        connection.clock = { proxy: address, offsetUs: now - (sent + received) / 2, roundTripUs: received - sent };
      connection.devices = devices;
      connection.peers = peers;
      startHeartbeat(transport, options.peerTimeoutMs ?? peerTimeoutFromEnv());
      connection.startDeadlines(options.requestTimeoutMs ?? requestTimeoutFromEnv());
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
    const id = this.nextId++;
    const meta = request as unknown as Record<string, unknown>;
    const queue = typeof meta.queue === 'number' ? meta.queue : undefined;
    const extraMs = request.op === 'launch' && typeof meta.timeoutMs === 'number' ? meta.timeoutMs : 0;
    const reply = new Promise<Frame>((resolve, reject) =>
      this.pending.set(id, { resolve, reject, handlers, op: request.op, queue, sentAt: Date.now(), extraMs }),
    );
    if (request.op === 'launch' && queue !== undefined) this.launchStarted(queue);
    if (request.op === 'wait-host' && queue !== undefined) this.park(meta.gate as number, queue);
    if (request.op === 'wait' && queue !== undefined) count(this.waitingQueues, queue, 1);
    if (request.op === 'signal') this.unpark(meta.gate as number);
    if (!this.holding) this.holdWhileBusy();
    try {
      meta.id = id;
      this.transport.send(meta, payload);
      // The one request in flight: its reply is awaited, so read it eagerly (TCP polls a while).
      if (this.pending.size === 1) this.transport.expectSoon?.();
    } catch (error) {
      // A request that cannot be framed (an image over 64 MiB, a manifest over 64 KiB) fails
      // alone, as its own rejection: never an exception out of an enqueueing call.
      this.settled(this.pending.get(id)!);
      this.pending
        .get(id)!
        .reject(
          new OffloadError(
            'INVALID_ARGUMENT',
            `a '${request.op}' request to proxy ${this.address} cannot be sent: ${messageOf(error)}`,
            { cause: error },
          ),
        );
      this.pending.delete(id);
      this.holdWhileBusy();
    }
    return reply;
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
          return this.printed(decoded);
        case 'host-call':
          return this.hostCalled(decoded);
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
      this.answeredAt = Date.now();
      if (pending.queue !== undefined) this.queueAnsweredAt.set(pending.queue, this.answeredAt);
      if (decoded.op === 'reply') {
        this.settled(pending);
        this.pending.delete(decoded.id);
        if (this.pending.size === 0) this.holdWhileBusy();
        if (decoded.error) pending.reject(fromWireError(decoded.error, this.address));
        else pending.resolve(frame);
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
    if (request.op === 'launch') this.launchEnded(request.queue);
    if (request.op === 'queue-destroy') this.queueAnsweredAt.delete(request.queue);
    if (request.op === 'wait') count(this.waitingQueues, request.queue, -1);
    if (request.op === 'wait-host') {
      for (const [gate, queue] of this.parkedGates) if (queue === request.queue) this.unpark(gate);
    }
  }

  private launchStarted(queue: number): void {
    const window = this.launchWindows.get(queue);
    if (window) window.launches++;
    else this.launchWindows.set(queue, { launches: 1, printed: 0, dropped: 0 });
  }

  /** A launch of `queue` is answered: the lines dropped from it are told, and its budget starts again. */
  private launchEnded(queue: number): void {
    const window = this.launchWindows.get(queue);
    if (!window) return;
    if (window.dropped > 0) {
      this.printListeners.get(queue)?.(
        '',
        -1,
        `(${window.dropped} more line${window.dropped === 1 ? '' : 's'} of this launch dropped: a launch on proxy ${this.address} may print ${REMOTE_PRINT_BUDGET_CHARS / 1024} KiB)`,
      );
    }
    window.printed = 0;
    window.dropped = 0;
    if (--window.launches === 0) this.launchWindows.delete(queue);
  }

  private park(gate: number, queue: number): void {
    this.parkedGates.set(gate, queue);
    this.parkedQueues.set(queue, (this.parkedQueues.get(queue) ?? 0) + 1);
  }

  /** The client signals `gate`: its queue is the proxy's to run again, and its deadlines count from now. */
  private unpark(gate: number): void {
    const queue = this.parkedGates.get(gate);
    if (queue === undefined) return;
    this.parkedGates.delete(gate);
    const count = this.parkedQueues.get(queue)! - 1;
    if (count === 0) this.parkedQueues.delete(queue);
    else this.parkedQueues.set(queue, count);
    this.queueAnsweredAt.set(queue, Date.now());
  }

  /**
   * A line a kernel printed on the proxy, for the queue it names. The proxy is a peer like any
   * other: a line is cut to what a device prints, a launch's lines together to
   * REMOTE_PRINT_BUDGET_CHARS, and a line for a queue with no launch running (or gone) is
   * dropped, so a proxy cannot flood the program's stderr.
   */
  private printed({ queue, kernel, team, text }: ProxyFrames['print']): void {
    const window = this.launchWindows.get(queue);
    if (!window) return;
    const line = cut(text, 2 * MAX_PRINT_CHARS);
    if (window.printed + line.length > REMOTE_PRINT_BUDGET_CHARS) {
      window.dropped++;
      return;
    }
    window.printed += line.length;
    this.printListeners.get(queue)?.(cut(kernel, MAX_KERNEL_NAME_CHARS), team, line);
  }

  /**
   * A kernel on the proxy calls one of the program's host functions for the queue it names: the
   * answer goes back as 'host-call-result' (a failure as its error). Only while a launch of that
   * queue runs, and at most MAX_HOST_CALLS_IN_FLIGHT unanswered: a kernel calls from inside a
   * launch, so any other call is forged, and the connection closes (PROTOCOL) before it reaches
   * a function of the program.
   */
  private hostCalled({ call, queue, kernel, name, args }: ProxyFrames['host-call']): void {
    if (!this.launchWindows.has(queue))
      throw errors.protocol(
        `proxy ${this.address} sent host call ${call} for queue ${queue}, which has no launch running: host calls come only from a running launch`,
      );
    if (this.hostCallsInFlight >= MAX_HOST_CALLS_IN_FLIGHT)
      throw errors.protocol(
        `proxy ${this.address} has more than ${MAX_HOST_CALLS_IN_FLIGHT} host calls unanswered at once (MAX_HOST_CALLS_IN_FLIGHT)`,
      );
    const listener = this.hostCallListeners.get(queue);
    const numbers = args.map((arg) => (arg === null ? Number.NaN : arg));
    const answer = listener
      ? listener(cut(kernel, MAX_KERNEL_NAME_CHARS), cut(name, MAX_HOST_FUNCTION_NAME), numbers)
      : Promise.reject(new Error('its queue was destroyed'));
    this.hostCallsInFlight++;
    answer.then(
      (value) => {
        this.hostCallsInFlight--;
        this.post({ op: 'host-call-result', call, value });
      },
      (error: unknown) => {
        this.hostCallsInFlight--;
        this.post({
          op: 'host-call-result',
          call,
          error: { code: 'KERNEL_TRAP', message: cut(error instanceof Error ? error.message : String(error), 4096) },
        });
      },
    );
  }

  /** Where the host calls of the proxy's queue `queue` go (undefined: nowhere any more). */
  listenForHostCalls(queue: number, listener: HostCallListener | undefined): void {
    if (listener) this.hostCallListeners.set(queue, listener);
    else this.hostCallListeners.delete(queue);
  }

  /** Where the print() lines of the proxy's queue `queue` go (undefined: nowhere any more). */
  listenForPrints(queue: number, listener: PrintListener | undefined): void {
    if (listener) this.printListeners.set(queue, listener);
    else this.printListeners.delete(queue);
  }

  private fail(reason: OffloadError): void {
    if (this.lostError) return;
    clearInterval(this.deadlineTimer);
    this.lostError =
      reason.code === 'DEVICE_LOST' || reason.code === 'UNAUTHORIZED'
        ? reason
        : errors.deviceLost(`the connection to proxy ${this.address} failed: ${reason.message}`);
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const request of pending) request.reject(this.lostError);
    for (const listener of this.lostListeners) listener(this.lostError);
  }

  close(): void {
    this.transport.close();
  }
}

/** Adds `by` to the count of `key` in `counts`, which holds no zero counts. */
function count(counts: Map<number, number>, key: number, by: number): void {
  const next = (counts.get(key) ?? 0) + by;
  if (next === 0) counts.delete(key);
  else counts.set(key, next);
}

/** The most fields of a proxy's span args kept, and the longest string among them. */
const MAX_TRACE_ARGS = 16;
const MAX_TRACE_STRING = 256;

/**
 * A trace event as a proxy may send it, rebuilt from checked fields (undefined: left out): a span
 * or a name, with small integer ids, and args of at most MAX_TRACE_ARGS plain values (strings up
 * to MAX_TRACE_STRING characters, finite numbers, booleans). A proxy is a peer like any other:
 * nothing it sends reaches the trace as an object of its making (a `toString` that is not a
 * function, args nested 100,000 deep), so merging and writing the trace cannot throw.
 */
function checkedTraceEvent(value: unknown): TraceEvent | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const event = value as Record<string, unknown>;
  const { name, cat, ph, ts, dur, pid, tid, args } = event;
  const id = (n: unknown) => Number.isInteger(n) && (n as number) >= 0 && (n as number) < 1_000_000_000;
  if (
    typeof name !== 'string' ||
    name.length > MAX_TRACE_STRING ||
    typeof cat !== 'string' ||
    cat.length > 64 ||
    (ph !== 'X' && ph !== 'M') ||
    typeof ts !== 'number' ||
    !Number.isFinite(ts) ||
    (dur !== undefined && (typeof dur !== 'number' || !Number.isFinite(dur))) ||
    !id(pid) ||
    (pid as number) >= 1000 ||
    !id(tid) ||
    (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args)))
  )
    return undefined;
  const checked: TraceEvent = { name, cat, ph, ts, pid: pid as number, tid: tid as number };
  if (dur !== undefined) checked.dur = dur;
  if (args !== undefined) {
    const kept: Record<string, string | number | boolean> = {};
    let fields = 0;
    for (const [key, field] of Object.entries(args as Record<string, unknown>)) {
      if (fields === MAX_TRACE_ARGS) break;
      if (key.length > 64 || key === '__proto__') continue;
      if (typeof field === 'string') kept[key] = cut(field, MAX_TRACE_STRING);
      else if ((typeof field === 'number' && Number.isFinite(field)) || typeof field === 'boolean') kept[key] = field;
      else continue;
      fields++;
    }
    checked.args = kept;
  }
  return checked;
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
