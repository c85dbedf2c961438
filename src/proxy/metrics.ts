/**
 * What a proxy counts for its operators: the connections and sessions it serves, each device's
 * launches (by outcome), their time, the bytes its clients copy and the memory they hold, each
 * tenant's holdings against its quotas, refusals by reason, and the process's own memory and
 * event-loop delay. `ProxyServer` owns one (`server.metrics`) and calls its hooks (`launch`,
 * `refused`, `sessionOpened`...); `snapshot()` reads the rest from the server as the SIGUSR2
 * `stats` line does (`server.stats()`), and `prometheus()` / `state()` format it for
 * `/metrics` and the dashboard (metrics-http.ts).
 *
 * A tenant here is a client's session, named by a number in the order sessions opened (quotas
 * bound all sessions of one token together; see proxy/session.ts Tenant). Its address and its
 * token's name (--tenants) are shown only when the operator asks (`names`): the endpoint is read without a token. Nothing here ever holds a token, a grant
 * or a buffer's bytes; refusals keep their code and reason, and their message only with `names`.
 *
 * Counting costs a few additions per request; a snapshot walks the sessions and is cached for
 * SNAPSHOT_TTL_MS, so that a flood of scrapes costs the event loop one walk per interval.
 */
import { performance } from 'node:perf_hooks';
import { OffloadError } from '../errors.js';
import type { Event } from '../api/queue.js';
import { completedNow, eventDevice } from '../api/internal.js';
import type { Request } from '../protocol/messages.js';
import { DEFAULT_QUOTAS, type SessionDirectory, type SessionQuotas } from './session.js';
import type { ProxyLog } from './log.js';
import { nurseryBytes } from './nursery.js';
import { LoopDelay, type LoopWindow } from './loop-delay.js';

/** Why a proxy said no: a quota (or its own memory), a login, a time limit, a bad frame, or no room for a connection. */
export const REFUSAL_REASONS = ['quota', 'login', 'time_limit', 'bad_frame', 'connections'] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];
export const LAUNCH_OUTCOMES = ['ok', 'trap', 'timeout', 'lost', 'error'] as const;
export type LaunchOutcome = (typeof LAUNCH_OUTCOMES)[number];
/** Upper bounds of the launch duration histogram, in seconds (Prometheus `le`). */
export const LAUNCH_BUCKETS = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30] as const;
/** How long the launch-rate history reaches back, in seconds (the dashboard's charts). */
export const HISTORY_SECONDS = 300;
/** Refusals kept for the dashboard. */
const RECENT_REFUSALS = 50;
/** A snapshot is reused this long (scrapes in a flood share one). */
const SNAPSHOT_TTL_MS = 250;
/** The event-loop delay window: its figures are those of the last complete window. */
const LOOP_WINDOW_MS = 10_000;
/** How often device loss is looked for (it is logged once, when seen). */
const DEVICE_WATCH_MS = 1000;

/** The server as the handlers see it: its directory of sessions, and what it counts for its operators. */
export interface ServingDirectory extends SessionDirectory {
  readonly metrics: ProxyMetrics;
}

/** What the recorder reads of a session (proxy/session.ts). */
export interface SessionView {
  readonly client: string;
  /** Whose token it logged in with: its name in the --tenants file, if any. */
  readonly tenant?: { readonly name?: string };
  readonly usage: SessionQuotas;
  readonly buffers: ReadonlyMap<number, { readonly device: { readonly id: number }; readonly byteLength: number }>;
}

/** What the recorder reads of a connected client (proxy/client-session.ts) and its connection. */
export interface ConnectionView {
  readonly session: SessionView | undefined;
  readonly loggingIn: boolean;
  readonly attached: boolean;
  readonly connection: { readonly refused: boolean; readonly transport: { readonly peer: string } };
}

/** What the recorder reads of the server (proxy/server.ts). */
export interface ServerView {
  readonly runtime: {
    readonly devices: readonly {
      readonly id: number;
      readonly info: { readonly name: string; readonly memoryBytes: number };
      readonly plugin: { readonly lost: OffloadError | undefined };
    }[];
  };
  readonly quotas: SessionQuotas;
  readonly maxConnections: number;
  /** The SIGUSR2 figures; given the delay to report, so that it does not reset the server's own measurement. */
  stats(eventLoopDelayMaxMs: number): {
    queues: number;
    buffers: number;
    images: number;
    proxyMemoryBytes: number;
    rssBytes: number;
    heapUsedBytes: number;
    externalBytes: number;
  };
}

interface DeviceCounts {
  launches: Record<LaunchOutcome, number>;
  kernelSeconds: number;
  /** Launches per LAUNCH_BUCKETS bound (not cumulative; the last one is +Inf). */
  buckets: number[];
  bytesIn: number;
  bytesOut: number;
  inFlight: number;
}

interface TenantCounts {
  id: number;
  launches: number;
  refusals: Record<RefusalReason, number>;
  opened: number;
}

/** One second of launches, for the dashboard's charts. */
interface Second {
  second: number;
  launches: number;
  totalMs: number;
  maxMs: number;
}

export interface RefusalRecord {
  /** Milliseconds since the epoch. */
  time: number;
  reason: RefusalReason;
  code: string;
  /** The tenant's number, when a session was refused something. */
  tenant?: number;
  /** The error's message and the peer's address: only with `names`. */
  message?: string;
  client?: string;
}

/** What the dashboard (and `/state`) shows: every figure of `/metrics`, as JSON. */
export interface MetricsState {
  time: number;
  uptimeSeconds: number;
  ready: { ready: boolean; reasons: string[] };
  connections: Record<'logging_in' | 'client' | 'peer_link' | 'refused', number>;
  maxConnections: number;
  connectionsAccepted: number;
  sessions: number;
  sessionsOpened: number;
  tenants: number;
  devices: {
    id: number;
    name: string;
    up: boolean;
    lost?: string;
    launches: Record<LaunchOutcome, number>;
    kernelSeconds: number;
    launchBuckets: number[];
    bytesIn: number;
    bytesOut: number;
    memoryHeldBytes: number;
    memoryLimitBytes: number;
    queueDepth: number;
  }[];
  tenantsHeld: {
    tenant: number;
    client?: string;
    /** The name of the session's token in the --tenants file: only with `names`. */
    name?: string;
    held: SessionQuotas;
    launches: number;
    refusals: Record<RefusalReason, number>;
    openedAt: number;
  }[];
  quotas: SessionQuotas;
  refusals: Record<RefusalReason, number>;
  requestErrors: Record<string, number>;
  recentRefusals: RefusalRecord[];
  /** Per second, oldest first, up to HISTORY_SECONDS: launches completed and their mean and longest time. */
  history: { second: number; launches: number; meanMs: number; maxMs: number }[];
  proxy: { queues: number; buffers: number; images: number; memoryHeldBytes: number };
  process: {
    rssBytes: number;
    heapUsedBytes: number;
    /** V8's young generation, both semi-spaces (1 MiB each in a proxy offload-ts starts: nursery.ts). */
    youngGenerationBytes: number;
    externalBytes: number;
    eventLoopDelayP99Seconds: number;
    eventLoopDelayMaxSeconds: number;
  };
}

const zeroes = <K extends string>(keys: readonly K[]): Record<K, number> =>
  Object.fromEntries(keys.map((key) => [key, 0])) as Record<K, number>;

/** The refusal reason of a failure, or undefined for an error that is no refusal (a bad argument, a trap). */
export function refusalReason(error: unknown): RefusalReason | undefined {
  if (!(error instanceof OffloadError)) return undefined;
  switch (error.code) {
    case 'OUT_OF_MEMORY':
      return 'quota';
    case 'UNAUTHORIZED':
      return 'login';
    case 'TIMEOUT':
      return 'time_limit';
    case 'PROTOCOL':
      return /connections/.test(error.message) ? 'connections' : 'bad_frame';
    default:
      return undefined;
  }
}

function outcomeOf(error: unknown): LaunchOutcome {
  if (!(error instanceof OffloadError)) return 'error';
  if (error.code === 'KERNEL_TRAP') return 'trap';
  if (error.code === 'TIMEOUT') return 'timeout';
  if (error.code === 'DEVICE_LOST') return 'lost';
  return 'error';
}

export interface ProxyMetricsOptions {
  /** Show clients' addresses (and refusals' messages) to readers of the endpoint (`--metrics-names`). */
  names?: boolean;
  /** Where events are logged (default: none). */
  log?: ProxyLog;
}

export class ProxyMetrics {
  readonly names: boolean;
  readonly log: ProxyLog | undefined;
  private readonly started = Date.now();
  private readonly connections = new Set<ConnectionView>();
  private readonly sessions = new Map<SessionView, TenantCounts>();
  private readonly devices = new Map<number, DeviceCounts>();
  private readonly refusals = zeroes(REFUSAL_REASONS);
  private readonly requestErrors: Record<string, number> = {};
  private readonly recent: RefusalRecord[] = [];
  private readonly seconds: Second[] = [];
  private connectionsAccepted = 0;
  private sessionsOpened = 0;
  private readonly loopDelay = new LoopDelay();
  private loopWindow: LoopWindow = { p99: 0, max: 0 };
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly lostSeen = new Set<number>();
  private cached: { at: number; state: MetricsState } | undefined;
  private server: ServerView | undefined;

  constructor(options: ProxyMetricsOptions = {}) {
    this.names = options.names ?? false;
    this.log = options.log;
  }

  /** Starts measuring for `server` (its event loop, its devices' health); `stop()` ends it. */
  start(server: ServerView): void {
    this.server = server;
    this.loopDelay.work();
    const window = setInterval(() => {
      this.loopWindow = this.loopDelay.closeWindow();
    }, LOOP_WINDOW_MS);
    const watch = setInterval(() => this.watchDevices(), DEVICE_WATCH_MS);
    for (const timer of [window, watch]) {
      timer.unref();
      this.timers.push(timer);
    }
  }

  stop(): void {
    for (const timer of this.timers) clearInterval(timer);
    this.timers.length = 0;
    this.loopDelay.stop();
  }

  private device(id: number): DeviceCounts {
    let counts = this.devices.get(id);
    if (!counts) {
      counts = {
        launches: zeroes(LAUNCH_OUTCOMES),
        kernelSeconds: 0,
        buckets: new Array<number>(LAUNCH_BUCKETS.length + 1).fill(0),
        bytesIn: 0,
        bytesOut: 0,
        inFlight: 0,
      };
      this.devices.set(id, counts);
    }
    return counts;
  }

  private who(peer: string): { client?: string } {
    return this.names ? { client: peer } : {};
  }

  // Hooks, called by the server, its connections and dispatch.

  connectionOpened(connection: ConnectionView): void {
    this.loopDelay.work();
    this.connections.add(connection);
    this.connectionsAccepted++;
    this.log?.event('debug', 'connection', `connection from ${connection.connection.transport.peer}`, {
      peer: connection.connection.transport.peer,
    });
  }

  connectionClosed(connection: ConnectionView): void {
    this.connections.delete(connection);
  }

  /** A login was accepted: a client's (its session follows) or a peer proxy's link. */
  loggedIn(connection: ConnectionView, as: 'client' | 'peer-link'): void {
    this.log?.event('info', 'login', `${as} ${connection.connection.transport.peer} logged in`, {
      peer: connection.connection.transport.peer,
      as,
    });
  }

  sessionOpened(session: SessionView): void {
    const tenant = ++this.sessionsOpened;
    this.sessions.set(session, { id: tenant, launches: 0, refusals: zeroes(REFUSAL_REASONS), opened: Date.now() });
    this.log?.event('info', 'session-open', `session ${tenant} opened for ${session.client}`, {
      tenant,
      peer: session.client,
    });
  }

  /** The session ends (before its context is released: what it held is still counted). */
  sessionClosed(session: SessionView): void {
    const tenant = this.sessions.get(session);
    if (!tenant) return;
    this.sessions.delete(session);
    if (this.log?.enabled('info')) {
      const held = { ...session.usage };
      const seconds = (Date.now() - tenant.opened) / 1000;
      this.log.event(
        'info',
        'session-end',
        `session ${tenant.id} of ${session.client} ended after ${seconds.toFixed(1)} s holding ` +
          `${held.buffers} buffers (${held.memoryBytes} bytes), ${held.queues} queues, ${held.images} images; ` +
          `${tenant.launches} launches`,
        { tenant: tenant.id, peer: session.client, seconds, launches: tenant.launches, held },
      );
    }
  }

  /**
   * A request was accepted for dispatch: the proxy has work; a session's bytes are counted on
   * their device (written: in; read: out). `session` is undefined for a peer proxy's link.
   */
  request(session: SessionView | undefined, request: Request): void {
    this.loopDelay.work();
    if (session === undefined) return;
    let direction: 'in' | 'out';
    let bytes: number;
    switch (request.op) {
      case 'write':
        [direction, bytes] = ['in', request.bytes];
        break;
      case 'read':
        [direction, bytes] = ['out', request.bytes];
        break;
      case 'write-rect':
        [direction, bytes] = ['in', request.width * request.height * request.depth];
        break;
      case 'read-rect':
        [direction, bytes] = ['out', request.width * request.height * request.depth];
        break;
      default:
        return;
    }
    const buffer = session.buffers.get(request.buffer);
    if (!buffer || !Number.isFinite(bytes)) return; // the request fails; nothing moves
    const counts = this.device(buffer.device.id);
    if (direction === 'in') counts.bytesIn += bytes;
    else counts.bytesOut += bytes;
  }

  /**
   * A launch was enqueued for `session` at `start` (performance.now()): counted, timed until it
   * settles. True when it has already completed (it ran inline): counted now, with no promise.
   */
  launch(session: SessionView, event: Event, start: number): boolean {
    const counts = this.device(eventDevice(event).id);
    const tenant = this.sessions.get(session);
    if (completedNow(event)) {
      this.count(counts, tenant, 'ok', performance.now() - start);
      return true;
    }
    counts.inFlight++;
    event.done.then(
      () => this.settled(counts, tenant, 'ok', start),
      (error: unknown) => this.settled(counts, tenant, outcomeOf(error), start),
    );
    return false;
  }

  private settled(counts: DeviceCounts, tenant: TenantCounts | undefined, outcome: LaunchOutcome, start: number): void {
    counts.inFlight--;
    this.count(counts, tenant, outcome, performance.now() - start);
  }

  /** A launch that settled with `outcome` after `ms` milliseconds, counted. */
  private count(counts: DeviceCounts, tenant: TenantCounts | undefined, outcome: LaunchOutcome, ms: number): void {
    counts.launches[outcome]++;
    counts.kernelSeconds += ms / 1000;
    // The first bucket it fits (the last, +Inf, when none): a loop, not a closure per launch.
    let bucket = 0;
    while (bucket < LAUNCH_BUCKETS.length && ms / 1000 > LAUNCH_BUCKETS[bucket]!) bucket++;
    counts.buckets[bucket]!++;
    if (tenant) tenant.launches++;
    this.second(ms);
  }

  private second(ms: number): void {
    const now = Math.floor(Date.now() / 1000);
    let last = this.seconds[this.seconds.length - 1];
    if (!last || last.second !== now) {
      last = { second: now, launches: 0, totalMs: 0, maxMs: 0 };
      this.seconds.push(last);
      while (this.seconds.length > 0 && this.seconds[0]!.second <= now - HISTORY_SECONDS) this.seconds.shift();
    }
    last.launches++;
    last.totalMs += ms;
    last.maxMs = Math.max(last.maxMs, ms);
  }

  /**
   * A request failed (`refusal` false: the client goes on) or a connection was closed (true). A
   * quota, a wrong login, a time limit, a bad frame or a full proxy counts as a refusal by
   * reason; any other failure counts by its code only.
   */
  refused(peer: string, error: unknown, session?: SessionView): void {
    this.loopDelay.work();
    const code = error instanceof OffloadError ? error.code : 'INTERNAL';
    const reason = refusalReason(error);
    if (reason === undefined) {
      this.requestErrors[code] = (this.requestErrors[code] ?? 0) + 1;
      return;
    }
    this.refusals[reason]++;
    const tenant = session ? this.sessions.get(session) : undefined;
    if (tenant) tenant.refusals[reason]++;
    const record: RefusalRecord = { time: Date.now(), reason, code, tenant: tenant?.id };
    if (this.names) Object.assign(record, { message: (error as OffloadError).message, client: peer });
    this.recent.push(record);
    if (this.recent.length > RECENT_REFUSALS) this.recent.shift();
    const message = (error as OffloadError).message;
    this.log?.event('warn', 'refusal', `refused ${peer} (${reason}): ${code}: ${message}`, {
      peer,
      reason,
      code,
      tenant: tenant?.id,
      error: message,
    });
  }

  private watchDevices(): void {
    for (const device of this.server?.runtime.devices ?? []) {
      const lost = device.plugin.lost;
      if (!lost || this.lostSeen.has(device.id)) continue;
      this.lostSeen.add(device.id);
      this.log?.event('error', 'device-lost', `device ${device.id} (${device.info.name}) is lost: ${lost.message}`, {
        device: device.id,
        name: device.info.name,
        error: lost.message,
      });
    }
  }

  /** Whether the proxy should get new clients: every device up, room for another connection. */
  readiness(): { ready: boolean; reasons: string[] } {
    const server = this.server;
    if (!server) return { ready: false, reasons: ['the proxy is not serving yet'] };
    const reasons: string[] = [];
    for (const device of server.runtime.devices)
      if (device.plugin.lost) reasons.push(`device ${device.id} (${device.info.name}) is lost`);
    if (server.runtime.devices.length === 0) reasons.push('the proxy has no devices');
    if (this.connections.size >= server.maxConnections)
      reasons.push(`every connection slot is taken (${server.maxConnections}, --max-connections)`);
    return { ready: reasons.length === 0, reasons };
  }

  /** The longest the event loop was held since the last call (or the start), in ms; starts a new measurement. */
  takeEventLoopDelayMaxMs(): number {
    return this.loopDelay.takeMaxMs();
  }

  /** Every figure now (cached for SNAPSHOT_TTL_MS). */
  state(): MetricsState {
    this.loopDelay.work();
    const now = Date.now();
    if (this.cached && now - this.cached.at < SNAPSHOT_TTL_MS) return this.cached.state;
    const state = this.measure(now);
    this.cached = { at: now, state };
    return state;
  }

  private measure(now: number): MetricsState {
    const server = this.server;
    const connections = { logging_in: 0, client: 0, peer_link: 0, refused: 0 };
    for (const connection of this.connections) {
      if (connection.connection.refused) connections.refused++;
      else if (connection.attached) connections.peer_link++;
      else if (connection.session || connection.loggingIn) connections.client++;
      else connections.logging_in++;
    }
    const held = new Map<number, number>();
    const tenantsHeld: MetricsState['tenantsHeld'] = [];
    const hosts = new Set<string>();
    for (const [session, tenant] of this.sessions) {
      for (const buffer of session.buffers.values())
        held.set(buffer.device.id, (held.get(buffer.device.id) ?? 0) + buffer.byteLength);
      hosts.add(session.client.replace(/:\d+$/, ''));
      tenantsHeld.push({
        tenant: tenant.id,
        ...this.who(session.client),
        ...(this.names && session.tenant?.name !== undefined ? { name: session.tenant.name } : {}),
        held: { ...session.usage },
        launches: tenant.launches,
        refusals: { ...tenant.refusals },
        openedAt: tenant.opened,
      });
    }
    const devices = (server?.runtime.devices ?? []).map((device) => {
      const counts = this.device(device.id);
      const lost = device.plugin.lost;
      return {
        id: device.id,
        name: device.info.name,
        up: !lost,
        ...(lost ? { lost: lost.message } : {}),
        launches: { ...counts.launches },
        kernelSeconds: counts.kernelSeconds,
        launchBuckets: [...counts.buckets],
        bytesIn: counts.bytesIn,
        bytesOut: counts.bytesOut,
        memoryHeldBytes: held.get(device.id) ?? 0,
        memoryLimitBytes: device.info.memoryBytes,
        queueDepth: counts.inFlight,
      };
    });
    const stats = server?.stats(0);
    // Until a window with looks in it closes, the figures of the one in progress.
    const loop = this.loopWindow.max > 0 ? this.loopWindow : this.loopDelay.windowNow();
    const memory = process.memoryUsage();
    const nowSecond = Math.floor(now / 1000);
    return {
      time: now,
      uptimeSeconds: (now - this.started) / 1000,
      ready: this.readiness(),
      connections,
      maxConnections: server?.maxConnections ?? 0,
      connectionsAccepted: this.connectionsAccepted,
      sessions: this.sessions.size,
      sessionsOpened: this.sessionsOpened,
      tenants: hosts.size,
      devices,
      tenantsHeld,
      quotas: { ...(server?.quotas ?? DEFAULT_QUOTAS) },
      refusals: { ...this.refusals },
      requestErrors: { ...this.requestErrors },
      recentRefusals: [...this.recent],
      history: this.seconds
        .filter((second) => second.second > nowSecond - HISTORY_SECONDS)
        .map((second) => ({
          second: second.second,
          launches: second.launches,
          meanMs: second.totalMs / second.launches,
          maxMs: second.maxMs,
        })),
      proxy: {
        queues: stats?.queues ?? 0,
        buffers: stats?.buffers ?? 0,
        images: stats?.images ?? 0,
        memoryHeldBytes: stats?.proxyMemoryBytes ?? 0,
      },
      process: {
        rssBytes: memory.rss,
        heapUsedBytes: memory.heapUsed,
        youngGenerationBytes: nurseryBytes(),
        externalBytes: memory.external,
        eventLoopDelayP99Seconds: loop.p99,
        eventLoopDelayMaxSeconds: loop.max,
      },
    };
  }
}
