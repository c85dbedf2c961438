/**
 * OFFLOAD_TRACE=trace.json (or `Offload.init({ trace })`): a Chrome trace of the run, which
 * Perfetto and chrome://tracing open. One process per device, one track per queue plus a
 * `mapping` track; a span per copy, launch and mapping call, with bytes and kernel names.
 * Queue operations run in order, so an operation's span starts when it was enqueued or when the
 * one before it on its queue ended, whichever is later. Written at shutdown (or at exit).
 *
 * Interrupted (SIGINT, SIGTERM) a program would end without 'exit', and the run one most wants
 * to look at would leave no trace. So while the trace is unwritten, and the program listens to
 * neither signal itself, the first one writes what is known so far (operations still running end
 * at the interrupt, marked `interrupted`; the metadata names the signal), then ends the process
 * with that signal, as if nobody had listened: the shell sees the usual status (130, 143). The
 * listener is removed before writing, so a second Ctrl-C during the write ends the process at
 * once. A program with its own listener decides itself (and the trace is written at its exit).
 */
import type { Environment } from '../units.js';
import { errors } from '../errors.js';
import { environment, performance } from '../platform.js';
import { writeTextNow } from '../platform-files.js';

/** The signals that write the trace before the process ends (see the header). */
const INTERRUPTS = ['SIGINT', 'SIGTERM'] as const;
type Interrupt = (typeof INTERRUPTS)[number];

/** Track id of the mapping spans of a device (queue ids are small integers). */
const MAPPING_TRACK = 1_000_000;

export interface TraceEvent {
  name: string;
  cat: string;
  ph: 'X' | 'M';
  ts: number;
  dur?: number;
  pid: number;
  tid: number;
  args?: Record<string, unknown>;
}

export interface Span {
  end(failed?: boolean): void;
}

export function traceFile(option: string | boolean | undefined, env: Environment = environment()): string | undefined {
  if (typeof option === 'boolean') return undefined;
  const file = option ?? env.OFFLOAD_TRACE;
  return file === undefined || file === '' ? undefined : file;
}

/** Whether the runtime traces: to a file (`traceFile`), or kept for `runtime.trace()` only (`trace: true`, a page's way). */
export function tracing(option: string | boolean | undefined, env: Environment = environment()): boolean {
  return option === true || traceFile(option, env) !== undefined;
}

/**
 * A Chrome trace as Perfetto and chrome://tracing read it (the JSON object format): what a trace
 * file holds, and what `runtime.trace()` gives (a page saves it with `JSON.stringify` in a Blob).
 */
export interface TraceDocument {
  traceEvents: TraceEvent[];
  displayTimeUnit: 'ms';
  metadata: { 'offload-ts': Record<string, unknown> };
}

/** One proxy's spans for a trace, on its clock (the remote plugin's `traces()`). */
export interface ProxyTrace {
  events: readonly TraceEvent[];
  clock: ClockAlignment;
  dropped: number;
}

/** Events a proxy recorded for one client's session, most kept (MAX_REMOTE_EVENTS). */
export const MAX_REMOTE_EVENTS = 200_000;

/** How a proxy's clock was aligned with this process's: its offset estimated from one round trip. */
export interface ClockAlignment {
  proxy: string;
  /** The proxy's clock minus ours, in microseconds: its time at the reply minus the round trip's midpoint. */
  offsetUs: number;
  /** The round trip the estimate came from (its error is at most half of it), in microseconds. */
  roundTripUs: number;
}

/** First process id of the proxies' devices in a merged trace; each proxy gets a block of PROXY_PIDS. */
const PROXY_PID_BASE = 1000;
const PROXY_PIDS = 1000;

export class Tracer {
  private readonly events: TraceEvent[] = [];
  private readonly queueEnds = new Map<string, number>();
  private readonly named = new Set<string>();
  private readonly origin = performance.timeOrigin;
  private written = false;
  private readonly onExit = () => this.write();
  private readonly onSignal = (signal: Interrupt) => this.interrupted(signal);
  /** Queue operations not yet settled, for a trace written before they do (interrupted). */
  private readonly running = new Set<TraceEvent>();
  private readonly clocks: ClockAlignment[] = [];
  private dropped = 0;
  /** Spans kept, and those not kept because `maxSpans` were kept already. */
  private spans = 0;
  private overflow = 0;

  /**
   * `file` undefined: events are only kept (a proxy's, for its client to fetch). `maxSpans`: the
   * spans kept at most (the first ones; later ones are counted as dropped), so that a long-lived
   * traced session holds bounded memory (a span is a few hundred bytes).
   */
  constructor(
    readonly file: string | undefined,
    private readonly maxSpans = Infinity,
  ) {
    if (file === undefined) return;
    // Written at exit or on a signal: a Node process's events (a page has neither, nor files).
    if ((globalThis as { process?: unknown }).process === undefined)
      throw errors.unsupported(`a trace file (${file}) needs Node: a page cannot write files`);
    process.once('exit', this.onExit);
    for (const signal of INTERRUPTS) process.on(signal, this.onSignal);
  }

  /** The first SIGINT or SIGTERM: writes the trace, then ends with the signal unless the program listens to it too. */
  private interrupted(signal: Interrupt): void {
    for (const other of INTERRUPTS) process.off(other, this.onSignal);
    // The program handles the signal itself: its exit (or shutdown) writes the trace.
    if (process.listenerCount(signal) > 0) return;
    try {
      this.write(signal);
    } finally {
      process.kill(process.pid, signal);
    }
  }

  /** Keeps a span, unless `maxSpans` are kept already. */
  private span(event: TraceEvent): void {
    if (this.spans >= this.maxSpans) {
      this.overflow++;
      return;
    }
    this.spans++;
    this.events.push(event);
  }

  /** Microseconds since the epoch on this process's clock (what `ts` holds). */
  static now(): number {
    return (performance.timeOrigin + performance.now()) * 1000;
  }

  /**
   * Adds a proxy's events (recorded on its clock, its device ids as pids) as processes of their
   * own: pids PROXY_PID_BASE + k * PROXY_PIDS + device, times moved onto this process's clock.
   */
  merge(proxyIndex: number, events: readonly TraceEvent[], clock: ClockAlignment, dropped = 0): void {
    this.clocks.push(clock);
    this.dropped += dropped;
    this.events.push(...Tracer.moved(proxyIndex, events, clock));
  }

  /** A proxy's events as `merge` adds them: its pids moved into its block, its times onto this clock. */
  private static moved(proxyIndex: number, events: readonly TraceEvent[], clock: ClockAlignment): TraceEvent[] {
    const base = PROXY_PID_BASE + proxyIndex * PROXY_PIDS;
    const moved: TraceEvent[] = [];
    for (const event of events) {
      const pid = base + event.pid;
      if (event.ph === 'M') {
        const name =
          // eslint-disable-next-line @typescript-eslint/no-base-to-string -- a proxy's trace is data from the wire: whatever its name is, shown as String() shows it
          event.name === 'process_name' ? `proxy ${clock.proxy} ${String(event.args?.name ?? '')}` : event.args?.name;
        moved.push({ ...event, pid, args: { name } });
      } else {
        moved.push({ ...event, pid, ts: event.ts - clock.offsetUs });
      }
    }
    return moved;
  }

  private now(): number {
    return (this.origin + performance.now()) * 1000;
  }

  /** Names a device's process and a track once, so the viewer shows labels, not numbers. */
  private name(pid: number, tid: number, device: string | undefined, track: string): void {
    const key = `${pid}/${tid}`;
    if (this.named.has(key)) return;
    this.named.add(key);
    if (!this.named.has(`${pid}`) && device !== undefined) {
      this.named.add(`${pid}`);
      this.events.push({
        name: 'process_name',
        cat: '__metadata',
        ph: 'M',
        ts: 0,
        pid,
        tid: 0,
        args: { name: `device ${pid}: ${device}` },
      });
    }
    this.events.push({ name: 'thread_name', cat: '__metadata', ph: 'M', ts: 0, pid, tid, args: { name: track } });
  }

  /** A span of the mapping track of `device`, starting now. */
  begin(device: number, category: string, name: string, args: Record<string, unknown>, deviceName?: string): Span {
    this.name(device, MAPPING_TRACK, deviceName, 'mapping');
    const ts = this.now();
    return {
      end: (failed = false) =>
        this.span({
          name,
          cat: category,
          ph: 'X',
          ts,
          dur: this.now() - ts,
          pid: device,
          tid: MAPPING_TRACK,
          args: failed ? { ...args, failed } : args,
        }),
    };
  }

  /** Records a queue operation enqueued now that completes when `done` settles. */
  /**
   * An operation of a queue, from its enqueueing (`enqueuedAt`, a performance.now() time; by
   * default now) until `done` settles. An inline launch has already run when this is called, so
   * its caller passes the time it was enqueued.
   */
  operation(
    device: number,
    deviceName: string,
    queue: number,
    name: string,
    args: Record<string, unknown>,
    done: Promise<unknown>,
    enqueuedAt = performance.now(),
  ): void {
    this.name(device, queue, deviceName, `queue ${queue}`);
    const key = `${device}/${queue}`;
    const enqueued = (this.origin + enqueuedAt) * 1000;
    // What an interrupted trace shows for the operation if it has not settled by then.
    const running: TraceEvent = { name, cat: 'queue', ph: 'X', ts: enqueued, pid: device, tid: queue, args };
    this.running.add(running);
    const finish = (failed: boolean) => () => {
      this.running.delete(running);
      const end = this.now();
      const start = Math.max(enqueued, this.queueEnds.get(key) ?? 0);
      this.queueEnds.set(key, end);
      this.span({
        name,
        cat: 'queue',
        ph: 'X',
        ts: start,
        dur: end - start,
        pid: device,
        tid: queue,
        args: failed ? { ...args, failed } : args,
      });
    };
    done.then(finish(false), finish(true));
  }

  /**
   * Writes the trace file (once). Synchronous so that it also works from the 'exit' event and a
   * signal. `interrupt`: the signal that cut the run short; operations still running are written
   * as spans up to now, marked `interrupted`.
   */
  write(interrupt?: Interrupt): void {
    if (this.written || this.file === undefined) return;
    this.written = true;
    process.off('exit', this.onExit);
    for (const signal of INTERRUPTS) process.off(signal, this.onSignal);
    if (interrupt !== undefined) {
      const now = this.now();
      for (const event of this.running) {
        const start = Math.max(event.ts, this.queueEnds.get(`${event.pid}/${event.tid}`) ?? 0);
        this.events.push({
          ...event,
          ts: start,
          dur: Math.max(0, now - start),
          args: { ...event.args, interrupted: true },
        });
      }
    }
    writeTextNow(this.file, JSON.stringify(this.document([], interrupt)));
  }

  /**
   * The trace as it stands, as a Chrome trace object: the spans kept so far, with `proxies`'
   * spans (fetched now, not yet merged) added after those merged already. Changes nothing: the
   * next call, or the file, still has every span.
   */
  document(proxies: readonly ProxyTrace[] = [], interrupt?: Interrupt): TraceDocument {
    const events = [...this.events];
    for (const [index, proxy] of proxies.entries())
      events.push(...Tracer.moved(this.clocks.length + index, proxy.events, proxy.clock));
    return {
      traceEvents: events,
      displayTimeUnit: 'ms',
      metadata: {
        'offload-ts': {
          ...(interrupt === undefined ? {} : { interrupted: interrupt }),
          clockAlignment:
            'each proxy: offset = its clock at the hello reply minus the midpoint of that TCP (or MPI) round trip',
          proxies: [...this.clocks, ...proxies.map((proxy) => proxy.clock)],
          droppedProxyEvents: proxies.reduce((sum, proxy) => sum + proxy.dropped, this.dropped),
        },
      },
    };
  }

  /** The events a proxy sends its client, at most `limit` of them, and how many it left out. */
  take(limit = MAX_REMOTE_EVENTS): { events: TraceEvent[]; dropped: number } {
    const metadata = this.events.filter((event) => event.ph === 'M');
    const spans = this.events.filter((event) => event.ph !== 'M');
    const kept = spans.slice(0, Math.max(0, limit - metadata.length));
    return { events: [...metadata, ...kept], dropped: spans.length - kept.length + this.overflow };
  }
}
