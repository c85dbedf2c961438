/**
 * `offload proxy`: serves this process's devices (every local plugin; never remote ones, so
 * proxies cannot loop) to clients over a transport. Each client gets a session of its own; the
 * token is checked in constant time before anything else is answered.
 *
 * Ownership: the server owns its runtime (start() makes it) and its listener; `shutdown()`
 * closes the listener and every connection, frees every session and shuts the runtime down.
 */
import { MAX_REMOTE_EVENTS, Tracer } from '../runtime/trace.js';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { errors, type OffloadError } from '../errors.js';
import { Offload, type Runtime } from '../api/runtime.js';
import type { KernelPrint } from '../runtime/options.js';
import type { HostCall } from '../api/host-functions.js';
import { contextCount, pluginDevice, queuesHeld } from '../api/internal.js';
import type { RuntimeOptions } from '../runtime/options.js';
import { DEFAULT_CLIENT_TIMEOUT_MS, peerTimeoutFromEnv } from '../transport/heartbeat.js';
import {
  canonicalAddress,
  isJobAddress,
  listen,
  listensInJob,
  type Listener,
  type TlsClientOptions,
  type TlsServerOptions,
} from '../transport/connect.js';
import type { Transport } from '../transport/transport.js';
import type { ClientSession } from './client-session.js';
import { serveClient } from './handlers.js';
import { LOGIN_DEADLINE_MS, type SessionDirectory } from './handshake.js';
import type { ReplyFrame } from '../protocol/messages.js';
import { toWireError } from '../protocol/wire.js';
import { PeerLinks } from './peer-links.js';
import { ProxyMetrics } from './metrics.js';
import {
  DEFAULT_QUOTAS,
  defaultProxyMemoryBytes,
  ProxyMemory,
  Session,
  Tenant,
  type SessionQuotas,
} from './session.js';

export interface ProxyServerOptions {
  /**
   * `host:port` (or `ws://host:port`, `wss://host:port`) to listen on (port 0: any free port), or `mpi` to serve the application ranks
   * of this MPI job (the server's `finished` resolves once they have all left).
   */
  listen: string;
  /** The shared secret clients log in with: at least 16 bytes. Its clients are one unnamed tenant. */
  token?: string;
  /**
   * Named tokens, each a tenant (at least 16 bytes each, names and tokens distinct): the quotas
   * bound what each tenant's connections hold together. Given with or instead of `token`.
   */
  tenants?: readonly { name: string; token: string }[];
  /** Serve over TLS with this certificate and key (PEM). */
  tls?: TlsServerOptions;
  /**
   * For a `ws://` or `wss://` listener: the pages (origins, `scheme://host[:port]`, or `*`) that
   * may connect; any other page is refused before its first frame. Programs (no Origin) always may.
   */
  allowOrigins?: readonly string[];
  /** The CAs this proxy trusts for links to `tls://` peers (default: the system's). */
  peerTls?: TlsClientOptions;
  /** Options of the proxy's own runtime (its local devices); `proxies` is always empty. */
  runtime?: Omit<RuntimeOptions, 'proxies' | 'token'>;
  /**
   * The longest any client's launch may run, in milliseconds (a client's own limit applies when
   * it is shorter): one client's endless loop cannot hold a shared device forever. Default
   * DEFAULT_LAUNCH_TIMEOUT_MS; 0: no limit.
   */
  launchTimeoutMs?: number;
  /** Connections served at once (default 256); more are closed at once. At most a quarter of them may be still logging in. */
  maxConnections?: number;
  /** How long a new connection has to log in (default 10 s). */
  loginTimeoutMs?: number;
  /** What each tenant (token) may hold, over all its connections (defaults: DEFAULT_QUOTAS). */
  quotas?: Partial<SessionQuotas>;
  /** The proxy's own memory all clients together may make it hold (default: defaultProxyMemoryBytes()). */
  proxyMemoryBytes?: number;
  /** A client silent this long is gone (default OFFLOAD_PEER_TIMEOUT, or 60 s). */
  peerTimeoutMs?: number;
  /**
   * The proxies this one may link to for a client's proxy-to-proxy copies, `host:port` each, or
   * 'any'. Default none (copies then go through the client); ranks of the same MPI job always.
   */
  peers?: readonly string[] | 'any';
  /** What the proxy counts for /metrics and logs (default: a recorder of its own, logging nothing). */
  metrics?: ProxyMetrics;
}

const DEFAULT_MAX_CONNECTIONS = 256;

/** The tokens a proxy accepts: its unnamed `token` and its named `tenants`, distinct; at least one. */
function tenantTokens(
  token: string | undefined,
  tenants: readonly { name: string; token: string }[] = [],
): { name?: string; token: string }[] {
  const tokens: { name?: string; token: string }[] = [...(token === undefined ? [] : [{ token }]), ...tenants];
  if (tokens.length === 0) throw errors.invalidArgument('a proxy needs a token or tenants to let clients log in');
  const names = new Set<string>();
  const seen = new Set<string>();
  for (const { name, token } of tokens) {
    if (name !== undefined && names.has(name)) throw errors.invalidArgument(`tenant ${name} is named twice`);
    if (name !== undefined) names.add(name);
    const key = digest(token).toString('base64');
    // Never the token itself in the message: only whose it is.
    if (seen.has(key))
      throw errors.invalidArgument(
        `tenant ${name ?? '(the --token-file token)'} has a token another tenant has too; each needs its own`,
      );
    seen.add(key);
  }
  return tokens;
}
/** A proxy's launch time limit unless told otherwise: two minutes (also what bounds a sliced rectangle copy). */
export const DEFAULT_LAUNCH_TIMEOUT_MS = 120_000;
/** The shortest token a proxy accepts: shorter ones can be guessed. */
export const MIN_TOKEN_BYTES = 16;

/** INVALID_ARGUMENT, saying how to make a good one, for a token too short to keep a proxy to itself. */
export function checkToken(token: string): void {
  if (Buffer.byteLength(token) < MIN_TOKEN_BYTES) {
    throw errors.invalidArgument(
      `the proxy's token is ${Buffer.byteLength(token)} bytes; it must be at least ${MIN_TOKEN_BYTES} ` +
        '(make one with: head -c 32 /dev/urandom | base64 > secret && chmod 600 secret)',
    );
  }
}
/**
 * Failing logins are slowed down, never locked out: a wrong token (or grant) from an address
 * is answered FAILURE_DELAY_STEP_MS later for each failure from there within FAILURE_WINDOW_MS,
 * at most MAX_FAILURE_DELAY_MS. A flood of wrong logins from an address its legitimate clients
 * share so costs the flood time, and never refuses a right token; guessing a token of 128 bits
 * or more stays infeasible at any rate.
 */
const FAILURE_DELAY_STEP_MS = 100;
const MAX_FAILURE_DELAY_MS = 3000;
const FAILURE_WINDOW_MS = 60_000;
/** Addresses whose failures are remembered at once (the oldest are forgotten first). */
const MAX_REMEMBERED_ADDRESSES = 10_000;

/**
 * Files the proxy keeps for itself besides its connections (standard streams, the listener,
 * worker threads' pipes, files it reads): a connection takes one, and a peer link it opens
 * another, so --max-connections is fitted to (file limit - FILES_KEPT) / 2.
 */
const FILES_KEPT = 64;

/** The soft limit of open files of this process (Linux: /proc/self/limits), or undefined where it cannot be read. */
export function openFileLimit(): number | undefined {
  try {
    const line = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    return line && line[1] !== 'unlimited' ? Number(line[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The connections a proxy serves at most: `asked` (default 256), fitted to the file limit. */
export function fitConnections(asked: number | undefined, fileLimit = openFileLimit()): number {
  const wanted = asked ?? DEFAULT_MAX_CONNECTIONS;
  if (fileLimit === undefined) return wanted;
  return Math.max(1, Math.min(wanted, Math.floor((fileLimit - FILES_KEPT) / 2)));
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** What `ProxyServer.stats()` reports. */
export interface ProxyStats {
  sessions: number;
  connections: number;
  /** Connections served at most (--max-connections fitted to the file limit). */
  maxConnections: number;
  /** Queues clients made (and the proxy's own per-connection queues for chunked transfers), and any queue the runtime holds. */
  queues: number;
  buffers: number;
  images: number;
  /** Contexts of the proxy's runtime (one per session). */
  contexts: number;
  /** The proxy's own memory its clients hold (estimated; see ProxyMemory), in bytes. */
  proxyMemoryBytes: number;
  /** Per device, what its plugin counts (contexts, images on the host workers, GPU buffers). */
  devices: Record<string, number>[];
  rssBytes: number;
  /** The JS heap in use, and memory outside it (ArrayBuffers, wasm memories) that V8 tracks. */
  heapUsedBytes: number;
  externalBytes: number;
  /** The longest the proxy's event loop was held since the last stats (or its start), in ms (a 10 ms resolution). */
  eventLoopDelayMaxMs: number;
}

export class ProxyServer implements SessionDirectory {
  private readonly sessions = new Set<Session>();
  /** Every live write grant (by its digest: looking one up says nothing of the grants), and whose buffer it opens. */
  private readonly grants = new Map<string, { session: Session; buffer: number }>();
  private readonly peers: ReadonlySet<string> | 'any';
  private readonly transports = new Set<Transport>();
  private readonly connections = new Set<ClientSession>();
  /** Failed logins per address (host, without the port): how many since when. */
  private readonly failures = new Map<string, { count: number; since: number }>();
  /** Connections served at once: --max-connections fitted to the process's file limit. */
  readonly maxConnections: number;
  /** Each token's digest and its tenant. */
  private readonly tenants: readonly { digest: Buffer; tenant: Tenant }[];
  private listener: Listener | undefined;
  private closing: Promise<void> | undefined;

  private constructor(
    readonly runtime: Runtime,
    tokens: readonly { name?: string; token: string }[],
    options: Pick<
      ProxyServerOptions,
      | 'launchTimeoutMs'
      | 'maxConnections'
      | 'loginTimeoutMs'
      | 'quotas'
      | 'proxyMemoryBytes'
      | 'peerTimeoutMs'
      | 'peers'
      | 'peerTls'
      | 'metrics'
    >,
  ) {
    this.metrics = options.metrics ?? new ProxyMetrics();
    this.metrics.start(this);
    this.peerTls = options.peerTls;
    this.peers = options.peers === 'any' ? 'any' : new Set((options.peers ?? []).map(canonicalAddress));
    this.peerTimeoutMs = options.peerTimeoutMs ?? peerTimeoutFromEnv(process.env, DEFAULT_CLIENT_TIMEOUT_MS);
    this.quotas = { ...DEFAULT_QUOTAS, ...options.quotas };
    this.memory = new ProxyMemory(options.proxyMemoryBytes ?? defaultProxyMemoryBytes());
    const limit = options.launchTimeoutMs ?? DEFAULT_LAUNCH_TIMEOUT_MS;
    this.launchTimeoutMs = limit > 0 ? limit : undefined;
    this.loginTimeoutMs = options.loginTimeoutMs ?? LOGIN_DEADLINE_MS;
    this.maxConnections = fitConnections(options.maxConnections);
    // Digests have equal lengths, so timingSafeEqual compares them without leaking the length.
    this.tenants = tokens.map(({ name, token }) => ({ digest: digest(token), tenant: new Tenant(name) }));
  }

  static async start(options: ProxyServerOptions): Promise<ProxyServer> {
    // The ranks of one MPI job share one trust domain: their token may be the job's default.
    const tokens = tenantTokens(options.token, options.tenants);
    if (!listensInJob(options.listen)) for (const { token } of tokens) checkToken(token);
    const runtime = await Offload.init({ ...options.runtime, proxies: [], mpi: false });
    const server = new ProxyServer(runtime, tokens, options);
    try {
      server.listener = await listen(
        options.listen,
        (transport) => server.accept(transport),
        options.tls,
        options.allowOrigins,
      );
    } catch (error) {
      await runtime.shutdown();
      throw error;
    }
    return server;
  }

  /** The address clients connect to. */
  get address(): string {
    return this.listener?.address ?? '';
  }

  /** Resolves when no client will come any more: an MPI job's application ranks have all left (never for TCP). */
  get finished(): Promise<void> {
    return this.listener?.finished ?? Promise.resolve();
  }

  /** How many clients have a session now. */
  get clients(): number {
    return this.sessions.size;
  }

  readonly launchTimeoutMs: number | undefined;
  readonly loginTimeoutMs: number;
  readonly quotas: SessionQuotas;
  private readonly memory: ProxyMemory;
  readonly peerTimeoutMs: number;
  readonly metrics: ProxyMetrics;
  private readonly peerTls: TlsClientOptions | undefined;

  /**
   * Serves one more client over `transport`, a connection made elsewhere (the other end of an
   * in-memory LoopbackTransport pair, in tests): exactly as a connection its listener accepted.
   */
  serve(transport: Transport): void {
    this.accept(transport);
  }

  private accept(transport: Transport): void {
    if (this.closing) return transport.close();
    // Caps, so that neither many clients nor many silent sockets take every file descriptor. A
    // flood of sockets that never log in pushes out the oldest of them, never a client that has
    // logged in nor the next one: at most a quarter of the slots are for connections logging in.
    // Refused logins waiting out their delay go first: they are closed anyway.
    const loggingIn = [...this.connections]
      .filter((connection) => !connection.loggedIn)
      .sort((a, b) => Number(b.connection.refused) - Number(a.connection.refused));
    if (
      loggingIn.length > 0 &&
      (this.connections.size >= this.maxConnections || loggingIn.length >= Math.max(1, this.maxConnections / 4))
    )
      loggingIn[0]!.connection.close(errors.protocol('too many connections are logging in; the oldest is closed'));
    else if (this.connections.size >= this.maxConnections) {
      const full = errors.protocol(
        `the proxy serves ${this.maxConnections} connections at most (offload proxy --max-connections); try again later`,
      );
      const refusal: ReplyFrame = { op: 'reply', id: 0, error: toWireError(full) };
      transport.send(refusal);
      this.metrics.refused(transport.peer, full);
      return transport.close(full);
    }
    this.transports.add(transport);
    const connection = serveClient(transport, this.runtime, this, new PeerLinks(this.peerTls), () => {
      this.transports.delete(transport);
      this.connections.delete(connection);
      this.metrics.connectionClosed(connection);
    });
    this.connections.add(connection);
    this.metrics.connectionOpened(connection);
  }

  /** The longest the event loop was held since the last call (or the start), in ms; starts a new measurement. */
  takeEventLoopDelay(): number {
    return this.metrics.takeEventLoopDelayMaxMs();
  }

  /**
   * What the proxy holds now, for operators and leak tests (`kill -USR2` on `offload proxy`
   * prints it): its clients' sessions and what they made, its devices' own counts, its memory.
   */
  stats(eventLoopDelayMaxMs = this.takeEventLoopDelay()): ProxyStats {
    const sessions = [...this.sessions.values()];
    const devices = this.runtime.devices.map((device) => ({ device: device.id, ...pluginDevice(device).census?.() }));
    const count = (of: (session: Session) => number): number => sessions.reduce((sum, session) => sum + of(session), 0);
    const stats: ProxyStats = {
      sessions: sessions.length,
      connections: this.connections.size,
      maxConnections: this.maxConnections,
      queues: [...this.connections].reduce((sum, connection) => sum + connection.queueCount, queuesHeld(this.runtime)),
      buffers: count((session) => session.buffers.size),
      images: count((session) => session.images.size),
      contexts: contextCount(this.runtime),
      proxyMemoryBytes: this.memory.held,
      devices,
      ...(({ rss, heapUsed, external }) => ({ rssBytes: rss, heapUsedBytes: heapUsed, externalBytes: external }))(
        process.memoryUsage(),
      ),
      eventLoopDelayMaxMs,
    };
    return stats;
  }

  login(
    peer: string,
    credentials: { token?: string; grant?: string },
  ): OffloadError | { grant?: { session: Session; buffer: number }; tenant?: Tenant } {
    if (credentials.grant !== undefined) {
      const grant = this.grants.get(digest(credentials.grant).toString('base64'));
      if (grant) return { grant };
    } else if (credentials.token !== undefined) {
      // Compared with every token, all the way: how long it takes says nothing of which matched.
      const offered = digest(credentials.token);
      let tenant: Tenant | undefined;
      for (const known of this.tenants) if (timingSafeEqual(offered, known.digest)) tenant ??= known.tenant;
      if (tenant) return { tenant };
    }
    const address = peer.replace(/:\d+$/, '');
    const now = Date.now();
    let failed = this.failures.get(address);
    if (failed && now - failed.since > FAILURE_WINDOW_MS) {
      this.failures.delete(address);
      failed = undefined;
    }
    if (!failed) {
      if (this.failures.size >= MAX_REMEMBERED_ADDRESSES) this.failures.delete(this.failures.keys().next().value!);
      this.failures.set(address, (failed = { count: 0, since: now }));
    }
    failed.count++;
    return errors.unauthorized(
      credentials.grant !== undefined ? 'no such grant (the buffer was freed, or its client left)' : 'wrong token',
    );
  }

  failedLoginDelayMs(peer: string): number {
    const failed = this.failures.get(peer.replace(/:\d+$/, ''));
    return failed ? Math.min(MAX_FAILURE_DELAY_MS, FAILURE_DELAY_STEP_MS * failed.count) : 0;
  }

  grant(session: Session, buffer: number): string {
    const grant = randomBytes(24).toString('base64url');
    this.grants.set(digest(grant).toString('base64'), { session, buffer });
    session.grants.set(buffer, grant);
    return grant;
  }

  revoke(session: Session, buffer: number): void {
    const grant = session.grants.get(buffer);
    if (grant === undefined) return;
    session.grants.delete(buffer);
    this.grants.delete(digest(grant).toString('base64'));
  }

  get peerList(): readonly string[] | 'any' {
    return this.peers === 'any' ? 'any' : [...this.peers];
  }

  mayLink(address: string): boolean {
    if (isJobAddress(address)) return this.listener?.job === true;
    if (this.peers === 'any') return true;
    try {
      return this.peers.has(canonicalAddress(address));
    } catch {
      return false; // not an address: no peer may be it
    }
  }

  /** A session for `client`; `traced`: its work's spans are kept for it (its hello asked). */
  async open(
    client: string,
    print: (line: KernelPrint) => void,
    hostCall: (call: HostCall) => Promise<number>,
    traced = false,
    tenant?: Tenant,
  ): Promise<Session> {
    // At most what a client takes of a proxy's trace: a traced session's memory stays bounded.
    const tracer = traced ? new Tracer(undefined, MAX_REMOTE_EVENTS) : undefined;
    const session = new Session(
      client,
      await this.runtime.createContext({ print, hostCall, tracer }),
      this.quotas,
      this.memory,
      tenant,
    );
    session.tracer = tracer;
    if (this.closing) {
      await session.release();
      throw errors.deviceLost('the proxy is shutting down');
    }
    this.sessions.add(session);
    this.metrics.sessionOpened(session);
    return session;
  }

  async close(session: Session): Promise<void> {
    this.sessions.delete(session);
    this.metrics.sessionClosed(session);
    for (const buffer of [...session.grants.keys()]) this.revoke(session, buffer);
    await session.release();
  }

  /** Stops serving: closes every connection, frees every session, shuts the runtime down. */
  shutdown(): Promise<void> {
    this.closing ??= (async () => {
      await this.listener?.close();
      for (const transport of this.transports) transport.close();
      await Promise.all([...this.sessions.values()].map((session) => this.close(session)));
      await this.runtime.shutdown();
      this.listener?.end();
      this.metrics.stop();
    })();
    return this.closing;
  }
}
