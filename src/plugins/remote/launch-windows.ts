/**
 * What a proxy may send for a queue's running launches: the print() lines of a launch, within
 * REMOTE_PRINT_BUDGET_CHARS, and host calls, at most MAX_HOST_CALLS_IN_FLIGHT unanswered. A
 * proxy is a peer like any other: what it sends for a queue with no launch running is dropped
 * (a line) or closes the connection (a host call).
 */
import { errors } from '../../errors.js';
import {
  cut,
  type HostCallListener,
  MAX_HOST_FUNCTION_NAME,
  MAX_KERNEL_NAME_CHARS,
  MAX_PRINT_CHARS,
  type PrintListener,
} from '../interface.js';
import type { ClientNote, ProxyFrames } from '../../protocol/messages.js';

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

/** The launch windows of one connection's queues, and where their lines and host calls go. */
export class LaunchWindows {
  /**
   * Each queue's running launches, which bound what the proxy may print and call for it. A live
   * queue keeps its window between launches (a Map emptied and filled again per launch
   * reallocates its table each time); a destroyed queue's goes with its last launch.
   */
  private readonly windows = new Map<number, LaunchWindow>();
  /** Queues with a launch running. */
  private runningQueues = 0;
  /** Where each queue's print() lines go, by the queue's id on the proxy. */
  private readonly printListeners = new Map<number, PrintListener>();
  /** Where each queue's host calls go, by the queue's id on the proxy. */
  private readonly hostCallListeners = new Map<number, HostCallListener>();
  private hostCallsInFlight = 0;

  constructor(
    /** The proxy's address, for errors and the dropped-lines note. */
    private readonly address: string,
    /** Sends a host call's answer to the proxy (RemoteConnection.post). */
    private readonly post: (note: ClientNote) => void,
  ) {}

  /** Whether a launch of any queue is running (its own deadline then covers the connection's waits). */
  get running(): boolean {
    return this.runningQueues > 0;
  }

  /** A launch of `queue` is sent. */
  started(queue: number): void {
    const window = this.windows.get(queue);
    if (window) {
      if (window.launches++ === 0) this.runningQueues++;
    } else {
      this.windows.set(queue, { launches: 1, printed: 0, dropped: 0 });
      this.runningQueues++;
    }
  }

  /** A launch of `queue` is answered: the lines dropped from it are told, and its budget starts again. */
  ended(queue: number): void {
    const window = this.windows.get(queue);
    if (!window || window.launches === 0) return;
    if (window.dropped > 0) {
      this.printListeners.get(queue)?.(
        '',
        -1,
        `(${window.dropped} more line${window.dropped === 1 ? '' : 's'} of this launch dropped: a launch on proxy ${this.address} may print ${REMOTE_PRINT_BUDGET_CHARS / 1024} KiB)`,
      );
    }
    window.printed = 0;
    window.dropped = 0;
    if (--window.launches > 0) return;
    this.runningQueues--;
    if (!this.printListeners.has(queue)) this.windows.delete(queue);
  }

  /**
   * A line a kernel printed on the proxy, for the queue it names. The proxy is a peer like any
   * other: a line is cut to what a device prints, a launch's lines together to
   * REMOTE_PRINT_BUDGET_CHARS, and a line for a queue with no launch running (or gone) is
   * dropped, so a proxy cannot flood the program's stderr.
   */
  printed({ queue, kernel, team, text }: ProxyFrames['print']): void {
    const window = this.windows.get(queue);
    if (!window || window.launches === 0) return;
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
  hostCalled({ call, queue, kernel, name, args }: ProxyFrames['host-call']): void {
    if ((this.windows.get(queue)?.launches ?? 0) === 0)
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
    if (listener) return void this.printListeners.set(queue, listener);
    // The queue is destroyed: its window goes now, or with its last launch (ended).
    this.printListeners.delete(queue);
    if (this.windows.get(queue)?.launches === 0) this.windows.delete(queue);
  }
}
