/**
 * The remote plugin: the devices of every proxy named in `proxies` (or OFFLOAD_PROXIES), in the
 * order given, each proxy's devices in its own order. A proxy that cannot be reached or refuses
 * the token fails Offload.init with that error: a program that names a proxy depends on it,
 * unless it says the proxy is optional (`optionalProxies`, or `host:port?` in OFFLOAD_PROXIES):
 * then a proxy that does not answer is left out, said once on stderr and in `diagnostics`.
 */
import { errors, messageOf, OffloadError } from '../../errors.js';
import type { ImageInfo } from '../../image/manifest.js';
import type { Plugin, PluginDevice, RemoteTrace } from '../interface.js';
import { registerPlugin } from '../../runtime/plugin-registry.js';
import { tracing } from '../../runtime/trace.js';
import { discoverProxies, type TlsClientOptions } from '../../transport/connect.js';
import { tlsFromEnv } from '../../transport/tls-files.js';
import type { Connector } from '../../transport/transport.js';
import { RemoteConnection } from './connection.js';
import { ConnectionState, RemoteDevice } from './device.js';
import { environment, writeStderr } from '../../platform.js';

export interface RemoteOptions {
  /** Proxy addresses, `host:port`. */
  proxies: string[];
  /** The proxies that may be left out when they do not answer (a subset of `proxies`). */
  optional?: ReadonlySet<string>;
  /** Where the line about a proxy left out goes (default: stderr). */
  warn?: (line: string) => void;
  token: string;
  /** How long each proxy has to accept the connection and answer its hello. */
  connectTimeoutMs?: number;
  /** Gives up connecting (Offload.init's signal). */
  signal?: AbortSignal;
  /** The program traces: each proxy keeps its spans of this program's work, for `traces()`. */
  trace?: boolean;
  /** A proxy silent this long is DEVICE_LOST (default OFFLOAD_PEER_TIMEOUT, or 10 s). */
  peerTimeoutMs?: number;
  /** How long a proxy has to answer a request it can start (default OFFLOAD_REQUEST_TIMEOUT, or 10 minutes). */
  requestTimeoutMs?: number;
  /** TLS for every TCP proxy, trusting these CAs. */
  tls?: TlsClientOptions;
  /** Opens the transport to a proxy (default: by its address's form, transport/connect.ts). */
  connect?: Connector;
}

export class RemotePlugin implements Plugin {
  readonly name = 'remote';
  private readonly connections: RemoteConnection[] = [];
  private readonly devices: RemoteDevice[] = [];

  readonly diagnostics: string[] = [];

  constructor(private readonly options: RemoteOptions) {}

  /**
   * Whether init goes on without `address` after `error`: an optional proxy that could not be
   * reached or did not answer (DEVICE_LOST, TIMEOUT, or PROTOCOL: something else answers there).
   * A refused token or a malformed address is the program's mistake, and fails init still.
   */
  private mayLeaveOut(address: string, error: unknown): boolean {
    if (!this.options.optional?.has(address)) return false;
    const code = error instanceof OffloadError ? error.code : undefined;
    return code === 'DEVICE_LOST' || code === 'TIMEOUT' || code === 'PROTOCOL';
  }

  async init(): Promise<number> {
    const opened = await Promise.allSettled(
      this.options.proxies.map((address) =>
        RemoteConnection.open(address, {
          token: this.options.token,
          timeoutMs: this.options.connectTimeoutMs,
          signal: this.options.signal,
          trace: this.options.trace,
          peerTimeoutMs: this.options.peerTimeoutMs,
          requestTimeoutMs: this.options.requestTimeoutMs,
          tls: this.options.tls,
          connect: this.options.connect,
        }),
      ),
    );
    const failure = opened.find(
      (result, index): result is PromiseRejectedResult =>
        result.status === 'rejected' && !this.mayLeaveOut(this.options.proxies[index]!, result.reason),
    );
    for (const result of opened) if (result.status === 'fulfilled') this.connections.push(result.value);
    if (failure) {
      await this.deinit();
      throw failure.reason;
    }
    opened.forEach((result, index) => {
      if (result.status === 'fulfilled') return;
      const line = `optional proxy ${this.options.proxies[index]!} left out: ${messageOf(result.reason)}`;
      this.diagnostics.push(line);
      (this.options.warn ?? warnOnStderr)(line);
    });
    for (const connection of this.connections) {
      const state = new ConnectionState(connection);
      connection.devices.forEach((info, index) => this.devices.push(new RemoteDevice(state, index, info)));
    }
    return this.devices.length;
  }

  device(index: number): PluginDevice {
    const device = this.devices[index];
    if (!device) throw errors.notFound(`the remote plugin has no device ${index}`);
    return device;
  }

  /** A context: a connection (a session of its own) to each proxy, which keeps the sessions apart. */
  async createContext(): Promise<Plugin> {
    // Over the proxies init connected to: the context's device ids are the runtime's.
    const proxies = this.connections.map((connection) => connection.address);
    return new RemotePlugin({ ...this.options, proxies, optional: undefined, signal: undefined });
  }

  isCompatible(image: ImageInfo): boolean {
    return this.devices.some((device) => device.info.imageFormats.includes(image.format));
  }

  /** Each proxy's spans of this program's work, with its clock's alignment (proxies that kept none are left out). */
  async traces(): Promise<RemoteTrace[]> {
    const traces: RemoteTrace[] = [];
    for (const connection of this.connections) {
      if (!this.options.trace || !connection.clock || connection.lost) continue;
      const { events, dropped } = await connection.traceEvents();
      traces.push({ events, dropped, clock: connection.clock });
    }
    return traces;
  }

  async deinit(): Promise<void> {
    for (const connection of this.connections) connection.close();
    this.connections.length = 0;
  }
}

/** Proxy addresses from options or OFFLOAD_PROXIES (comma- or space-separated), without the `?` of optional ones. */
export function proxyList(option: readonly string[] | undefined, env: NodeJS.ProcessEnv = environment()): string[] {
  return proxyEntries(option, false, env).map((entry) => entry.address);
}

/**
 * The proxies to connect to and whether each is optional: all of them with `optionalProxies`,
 * else those written `host:port?` (in OFFLOAD_PROXIES or the option).
 */
export function proxyEntries(
  option: readonly string[] | undefined,
  allOptional: boolean | undefined,
  env: NodeJS.ProcessEnv = environment(),
): { address: string; optional: boolean }[] {
  const list = option ?? (env.OFFLOAD_PROXIES ?? '').split(/[\s,]+/).filter((address) => address !== '');
  return list.map((text) => {
    const marked = text.endsWith('?');
    return { address: marked ? text.slice(0, -1) : text, optional: marked || allOptional === true };
  });
}

function warnOnStderr(line: string): void {
  writeStderr(`offload-ts: ${line}\n`);
}

// Remote devices come after every local one.
registerPlugin(
  'remote',
  async (options) => {
    const entries = proxyEntries(options.proxies, options.optionalProxies);
    const proxies = entries.map((entry) => entry.address);
    const optional = new Set(entries.filter((entry) => entry.optional).map((entry) => entry.address));
    let token = options.token ?? environment().OFFLOAD_TOKEN;
    if (proxies.length > 0 && (token === undefined || token === '')) {
      throw errors.invalidArgument(
        `proxies ${proxies.join(', ')} are named but no token is given (options.token or OFFLOAD_TOKEN)`,
      );
    }
    // Under mpirun, the job's proxy ranks follow the named proxies (a job shares one trust domain).
    if (options.mpi !== false) {
      const found = await discoverProxies();
      if (found.addresses.length > 0) {
        proxies.push(...found.addresses);
        token ||= found.token;
      }
    }
    if (proxies.length === 0) return undefined;
    return new RemotePlugin({
      proxies,
      optional,
      token: token!,
      peerTimeoutMs: options.peerTimeoutMs,
      requestTimeoutMs: options.requestTimeoutMs,
      connectTimeoutMs: options.connectTimeoutMs,
      signal: options.signal,
      trace: tracing(options.trace),
      tls: options.tls ?? (await tlsFromEnv()),
    });
  },
  50,
);
