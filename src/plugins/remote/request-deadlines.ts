/**
 * The deadlines of a connection's requests (ConnectOptions.requestTimeoutMs): a proxy has that
 * long to answer a request once it can start it, from when it is sent, or a queue operation from
 * its queue's last answer, whichever is later; a launch has its own time limit more. A queue the
 * client holds at a gate runs on the client's time, not the proxy's. A proxy that misses a
 * deadline is DEVICE_LOST, however many heartbeats it sends.
 */
import { errors, type OffloadError } from '../../errors.js';
import { parseMilliseconds } from '../../units.js';
import { environment, letGo } from '../../platform.js';

/** How long a proxy has to answer a request once it can start it, by default (OFFLOAD_REQUEST_TIMEOUT overrides). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 600_000;

/** OFFLOAD_REQUEST_TIMEOUT in milliseconds, else DEFAULT_REQUEST_TIMEOUT_MS. */
export function requestTimeoutFromEnv(env: NodeJS.ProcessEnv = environment()): number {
  const text = env.OFFLOAD_REQUEST_TIMEOUT;
  return text === undefined || text === ''
    ? DEFAULT_REQUEST_TIMEOUT_MS
    : parseMilliseconds(text, 'OFFLOAD_REQUEST_TIMEOUT');
}

/** What a deadline knows of a pending request. */
export interface TimedRequest {
  /** The request's op and queue (undefined: not a queue operation), for its deadline. */
  op: string;
  queue: number | undefined;
  /** When it was sent (Date.now()), and how much longer than the request deadline it may take (a launch's own limit). */
  sentAt: number;
  extraMs: number;
}

/** The deadlines of one connection's pending requests. */
export class RequestDeadlines {
  private requestTimeoutMs = DEFAULT_REQUEST_TIMEOUT_MS;
  /** The last answer of each queue, and of any queue. */
  private readonly queueAnsweredAt = new Map<number, number>();
  private answeredAt = Date.now();
  /** Queues this client holds at a gate ('wait-host' until its 'signal'), by gate: their time is the client's, not the proxy's. */
  private readonly parkedGates = new Map<number, number>();
  private readonly parkedQueues = new Map<number, number>();
  /** Queues with a 'wait' for another queue's event pending, and how many. */
  private readonly waitingQueues = new Map<number, number>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private stopped = false;

  constructor(
    /** The proxy's address, for the error of a missed deadline. */
    private readonly address: string,
    /** The connection's pending requests, by id. */
    private readonly pending: Iterable<[number, TimedRequest]> & { readonly size: number },
    /** Whether a launch of any queue is running (RemoteConnection's launch windows). */
    private readonly launchesRunning: () => boolean,
    /** Closes the connection with the error of a missed deadline. */
    private readonly expire: (error: OffloadError) => void,
  ) {}

  /** Checks every pending request's deadline every second (less for short deadlines), until `stop()`. */
  start(timeoutMs: number): void {
    this.requestTimeoutMs = timeoutMs;
    this.timer = setInterval(() => this.check(), Math.max(10, Math.min(1000, Math.floor(timeoutMs / 4))));
    // The deadlines never keep a process alive by themselves: the transport's own handle decides.
    letGo(this.timer);
  }

  private check(): void {
    if (this.pending.size === 0 || this.stopped) return;
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
        if (this.parkedQueues.size > 0 || this.launchesRunning()) continue;
        since = Math.max(since, this.answeredAt);
      }
      const allowed = this.requestTimeoutMs + request.extraMs;
      if (now - since < allowed) continue;
      this.expire(
        errors.deviceLost(
          `proxy ${this.address} did not answer its '${request.op}' request ${id} within ${allowed} ms of being able to start it (requestTimeoutMs, OFFLOAD_REQUEST_TIMEOUT); taken as gone`,
        ),
      );
      return;
    }
  }

  /** Stops checking: the connection failed. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  /** A request is sent: a 'wait-host' parks its queue at its gate, a 'signal' lets it go, a 'wait' is counted. */
  sent(op: string, queue: number | undefined, gate: unknown): void {
    if (op === 'wait-host' && queue !== undefined) this.park(gate as number, queue);
    if (op === 'wait' && queue !== undefined) count(this.waitingQueues, queue, 1);
    if (op === 'signal') this.unpark(gate as number);
  }

  /** The proxy answered a request (of queue `queue`, if a queue operation): deadlines count from now. */
  answered(queue: number | undefined): void {
    this.answeredAt = Date.now();
    if (queue !== undefined) this.queueAnsweredAt.set(queue, this.answeredAt);
  }

  /** A request of queue `queue` settles (or is never sent): what it held here is released. */
  settled(op: string, queue: number): void {
    if (op === 'queue-destroy') this.queueAnsweredAt.delete(queue);
    if (op === 'wait') count(this.waitingQueues, queue, -1);
    if (op === 'wait-host') {
      for (const [gate, parked] of this.parkedGates) if (parked === queue) this.unpark(gate);
    }
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
}

/** Adds `by` to the count of `key` in `counts`, which holds no zero counts. */
function count(counts: Map<number, number>, key: number, by: number): void {
  const next = (counts.get(key) ?? 0) + by;
  if (next === 0) counts.delete(key);
  else counts.set(key, next);
}
