/**
 * OFFLOAD_TRACE=trace.json (or `Offload.init({ trace })`): a Chrome trace of the run, which
 * Perfetto and chrome://tracing open. One process per device, one track per queue plus a
 * `mapping` track; a span per copy, launch and mapping call, with bytes and kernel names.
 * Queue operations run in order, so an operation's span starts when it was enqueued or when the
 * one before it on its queue ended, whichever is later. Written at shutdown (or at exit).
 */
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

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

export function traceFile(option: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const file = option ?? env.OFFLOAD_TRACE;
  return file === undefined || file === '' ? undefined : file;
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
    if (file !== undefined) process.once('exit', this.onExit);
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
    const base = PROXY_PID_BASE + proxyIndex * PROXY_PIDS;
    this.clocks.push(clock);
    this.dropped += dropped;
    for (const event of events) {
      const pid = base + event.pid;
      if (event.ph === 'M') {
        const name =
          // eslint-disable-next-line @typescript-eslint/no-base-to-string -- a proxy's trace is data from the wire: whatever its name is, shown as String() shows it
          event.name === 'process_name' ? `proxy ${clock.proxy} ${String(event.args?.name ?? '')}` : event.args?.name;
        this.events.push({ ...event, pid, args: { name } });
      } else {
        this.events.push({ ...event, pid, ts: event.ts - clock.offsetUs });
      }
    }
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
    const finish = (failed: boolean) => () => {
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

  /** Writes the trace file (once). Synchronous so that it also works from the 'exit' event. */
  write(): void {
    if (this.written || this.file === undefined) return;
    this.written = true;
    process.off('exit', this.onExit);
    const metadata = {
      'offload-ts': {
        clockAlignment:
          'each proxy: offset = its clock at the hello reply minus the midpoint of that TCP (or MPI) round trip',
        proxies: this.clocks,
        droppedProxyEvents: this.dropped,
      },
    };
    writeFileSync(this.file, JSON.stringify({ traceEvents: this.events, displayTimeUnit: 'ms', metadata }));
  }

  /** The events a proxy sends its client, at most `limit` of them, and how many it left out. */
  take(limit = MAX_REMOTE_EVENTS): { events: TraceEvent[]; dropped: number } {
    const metadata = this.events.filter((event) => event.ph === 'M');
    const spans = this.events.filter((event) => event.ph !== 'M');
    const kept = spans.slice(0, Math.max(0, limit - metadata.length));
    return { events: [...metadata, ...kept], dropped: spans.length - kept.length + this.overflow };
  }
}
