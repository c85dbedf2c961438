/**
 * `offload proxy`: serves this process's devices (every local plugin; never remote ones, so
 * proxies cannot loop) to clients over a transport. Each client gets a session of its own; the
 * token is checked in constant time before anything else is answered.
 *
 * Ownership: the server owns its runtime (unless one is passed in) and its listener; `close()`
 * closes every connection, frees every session and shuts the runtime down.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { errors } from '../errors.js';
import { Offload, type Runtime } from '../api/runtime.js';
import type { RuntimeOptions } from '../runtime/options.js';
import { MpiHub } from '../transport/mpi.js';
import { listenTcp, type TcpListener } from '../transport/tcp.js';
import type { Transport } from '../transport/transport.js';
import { ProxyConnection, type SessionDirectory } from './connection.js';
import { PeerLinks } from './peer-links.js';
import { Session } from './session.js';

export interface ProxyServerOptions {
  /** `host:port` to listen on (port 0: any free port). */
  listen: string;
  token: string;
  /** Options of the proxy's own runtime (its local devices); `proxies` is always empty. */
  runtime?: Omit<RuntimeOptions, 'proxies' | 'token'>;
  /**
   * The longest any client's launch may run, in milliseconds (a client's own limit applies when
   * it is shorter): one client's endless loop cannot hold a shared device forever.
   */
  launchTimeoutMs?: number;
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** What `ProxyServer.stats()` reports. */
export interface ProxyStats {
  sessions: number;
  connections: number;
  /** Queues clients made (and the proxy's own per-connection queues for chunked transfers), and any queue the runtime holds. */
  queues: number;
  buffers: number;
  images: number;
  /** Contexts of the proxy's runtime (one per session). */
  contexts: number;
  /** Per device, what its plugin counts (contexts, images on the host workers, GPU buffers). */
  devices: Record<string, number>[];
  rssBytes: number;
}

export class ProxyServer implements SessionDirectory {
  private readonly sessions = new Map<string, Session>();
  private readonly transports = new Set<Transport>();
  private readonly connections = new Set<ProxyConnection>();
  private readonly tokenDigest: Buffer;
  private listener: TcpListener | undefined;
  private closing: Promise<void> | undefined;

  private constructor(
    readonly runtime: Runtime,
    token: string,
    readonly launchTimeoutMs: number | undefined,
  ) {
    // Digests have equal lengths, so timingSafeEqual compares them without leaking the length.
    this.tokenDigest = digest(token);
  }

  static async start(options: ProxyServerOptions): Promise<ProxyServer> {
    const runtime = await Offload.init({ ...options.runtime, proxies: [], mpi: false });
    const server = new ProxyServer(runtime, options.token, options.launchTimeoutMs);
    try {
      server.listener = await listenTcp(options.listen, (transport) => server.accept(transport));
    } catch (error) {
      await runtime.shutdown();
      throw error;
    }
    return server;
  }

  private mpiAddress = '';

  /**
   * Serves this rank's devices to the application ranks of an MPI job; `finished` resolves
   * once every application rank has left (the proxy then shuts down and finalizes MPI).
   */
  static async startMpi(options: Omit<ProxyServerOptions, 'listen'>): Promise<{ server: ProxyServer; finished: Promise<void> }> {
    const runtime = await Offload.init({ ...options.runtime, proxies: [], mpi: false });
    const server = new ProxyServer(runtime, options.token, options.launchTimeoutMs);
    const hub = MpiHub.get('proxy');
    server.mpiAddress = `mpi:${hub.rank}`;
    const finished = new Promise<void>((resolve) => hub.serve((transport) => server.accept(transport), resolve));
    return { server, finished };
  }

  /** The address clients connect to. */
  get address(): string {
    return this.listener?.address ?? this.mpiAddress;
  }

  /** How many clients have a session now. */
  get clients(): number {
    return this.sessions.size;
  }

  private accept(transport: Transport): void {
    if (this.closing) return transport.close();
    this.transports.add(transport);
    const connection = new ProxyConnection(transport, this.runtime, this, new PeerLinks(), () => {
      this.transports.delete(transport);
      this.connections.delete(connection);
    });
    this.connections.add(connection);
  }

  /**
   * What the proxy holds now, for operators and leak tests (`kill -USR2` on `offload proxy`
   * prints it): its clients' sessions and what they made, its devices' own counts, its memory.
   */
  stats(): ProxyStats {
    const sessions = [...this.sessions.values()];
    const devices = this.runtime.devices.map((device) => ({ device: device.id, ...device.plugin.census?.() }));
    const count = (of: (session: Session) => number): number => sessions.reduce((sum, session) => sum + of(session), 0);
    return {
      sessions: sessions.length,
      connections: this.connections.size,
      queues: [...this.connections].reduce((sum, connection) => sum + connection.queueCount, this.runtime.queuesHeld),
      buffers: count((session) => session.buffers.size),
      images: count((session) => session.images.size),
      contexts: this.runtime.contextCount,
      devices,
      rssBytes: process.memoryUsage().rss,
    };
  }

  tokenMatches(token: string): boolean {
    return timingSafeEqual(digest(token), this.tokenDigest);
  }

  async open(client: string): Promise<Session> {
    const session = new Session(client, await this.runtime.createContext());
    if (this.closing) {
      await session.release();
      throw errors.deviceLost('the proxy is shutting down');
    }
    this.sessions.set(session.secret, session);
    return session;
  }

  find(secret: string): Session | undefined {
    return this.sessions.get(secret);
  }

  async close(session: Session): Promise<void> {
    this.sessions.delete(session.secret);
    await session.release();
  }

  /** Stops serving: closes every connection, frees every session, shuts the runtime down. */
  shutdown(): Promise<void> {
    this.closing ??= (async () => {
      await this.listener?.close();
      for (const transport of this.transports) transport.close();
      await Promise.all([...this.sessions.values()].map((session) => this.close(session)));
      await this.runtime.shutdown();
    })();
    return this.closing;
  }
}
