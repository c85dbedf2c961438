/**
 * The one place that knows the address forms and which transport each one means:
 *   host:port, [v6]:port     TCP (tcp.ts)
 *   tls://host:port          TCP with TLS (also any TCP address when TLS options are given)
 *   ws://host:port, wss://   WebSocket (websocket.ts; Node's client and listener: websocket-node.ts)
 *   mpi:N                    rank N of this process's MPI job (mpi/); `mpi` to listen as a proxy rank
 * Everything above (the remote plugin, the proxy, the CLI) names addresses and gets Transports
 * (undici's connector pattern): the remote plugin takes a `Connector` (transport.ts), and
 * `connectTo` is the one it gets by default.
 */
import { errors } from '../errors.js';
import type { Transport } from './transport.js';
import {
  connectTcp,
  DEFAULT_CONNECT_TIMEOUT_MS,
  formatAddress,
  isLoopback,
  listenTcp,
  parseAddress,
  type TlsClientOptions,
  type TlsServerOptions,
} from './tcp.js';
import { mpiRankOf } from './mpi/address.js';
import { connectMpi, jobProxies, MPI_DEFAULT_TOKEN, serveJob } from './mpi/job.js';
import { formatWebSocketAddress, isWebSocketAddress, parseWebSocketAddress } from './websocket.js';
import { connectWebSocket, listenWebSocket } from './websocket-node.js';

export { DEFAULT_CONNECT_TIMEOUT_MS, type TlsClientOptions, type TlsServerOptions };

export interface ConnectToOptions {
  /** How long a TCP connection may take (default DEFAULT_CONNECT_TIMEOUT_MS). */
  timeoutMs?: number;
  /**
   * TLS for every TCP address, trusting these CAs (a `tls://` address asks for TLS on its own);
   * for `wss://` addresses, the CAs trusted (a `ws://` address stays in clear: its scheme says so).
   */
  tls?: TlsClientOptions;
  signal?: AbortSignal;
}

/** Opens a transport to `address`, whichever form it has. */
export async function connectTo(address: string, options: ConnectToOptions = {}): Promise<Transport> {
  if (isJobAddress(address)) return connectMpi(address);
  return isWebSocketAddress(address) ? connectWebSocket(address, options) : connectTcp(address, options);
}

/** Whether `address` is a rank of this process's MPI job (`mpi:N`). */
export function isJobAddress(address: string): boolean {
  return mpiRankOf(address) !== undefined;
}

/** Whether two proxies link to each other on their own: ranks of one MPI job always do. */
export function linkedInJob(a: string, b: string): boolean {
  return isJobAddress(a) && isJobAddress(b);
}

/** The address as a proxy's --peers list writes it (INVALID_ARGUMENT for no address at all). */
export function canonicalAddress(address: string): string {
  if (isJobAddress(address)) return address;
  return isWebSocketAddress(address)
    ? formatWebSocketAddress(parseWebSocketAddress(address))
    : formatAddress(parseAddress(address));
}

/** Whether `peer` (canonical, from a --peers list) names the proxy at `address`. */
export function sameAddress(peer: string, address: string): boolean {
  return peer === canonicalAddress(address);
}

/** Whether `address` asks for TLS itself (`tls://`, `wss://`). */
export function asksForTls(address: string): boolean {
  if (isJobAddress(address)) return false;
  return isWebSocketAddress(address) ? parseWebSocketAddress(address).secure : parseAddress(address).tls === true;
}

/** What a proxy listens on (see `listen`). */
export interface Listener {
  /** The address clients connect to (the real port when 0 was asked for; `mpi:N` for a rank). */
  readonly address: string;
  /** Resolves when no client will come any more (an MPI job's application ranks have all left); never for TCP. */
  readonly finished: Promise<void>;
  /** True for the ranks of an MPI job: they share one trust domain (their token may be the job's default). */
  readonly job: boolean;
  /** Stops accepting and closes what was accepted. */
  close(): Promise<void>;
  /** The proxy is done with everything: leaves the MPI job. */
  end(): void;
}

/**
 * Listens on `address` (`host:port`, `ws://host:port`, `wss://host:port`, or `mpi` as a proxy
 * rank of this MPI job); each connection becomes a Transport for `accept`. `allowOrigins`: the
 * pages a WebSocket listener lets in (INVALID_ARGUMENT for any other listener).
 */
export async function listen(
  address: string,
  accept: (transport: Transport) => void,
  tls?: TlsServerOptions,
  allowOrigins?: readonly string[],
): Promise<Listener> {
  if (isWebSocketAddress(address)) {
    const ws = await listenWebSocket(address, accept, { tls, allowOrigins });
    return {
      address: ws.address,
      finished: new Promise<void>(() => {}),
      job: false,
      close: () => ws.close(),
      end: () => {},
    };
  }
  if (allowOrigins !== undefined && allowOrigins.length > 0)
    throw errors.invalidArgument(
      `allowed origins apply to WebSocket listeners only (--listen ws://host:port), not to ${address}`,
    );
  if (listensInJob(address)) {
    const job = serveJob(accept);
    return { address: job.address, finished: job.finished, job: true, close: async () => {}, end: () => job.close() };
  }
  const tcp = await listenTcp(address, accept, tls);
  return {
    address: tcp.address,
    finished: new Promise<void>(() => {}),
    job: false,
    close: () => tcp.close(),
    end: () => {},
  };
}

/** Whether a proxy listening on `address` serves the ranks of its own MPI job, which share one trust domain. */
export function listensInJob(address: string): boolean {
  return address === 'mpi';
}

/** The token a proxy listening on `address` uses when none is given: the job's default for `mpi`, none otherwise. */
export function defaultToken(address: string): string | undefined {
  return listensInJob(address) ? MPI_DEFAULT_TOKEN : undefined;
}

/** Whether nothing outside this machine can reach a proxy listening on `address` (a loopback TCP address). */
export function isLocalOnly(address: string): boolean {
  return isLoopback(isWebSocketAddress(address) ? parseWebSocketAddress(address).host : parseAddress(address).host);
}

/**
 * Proxies found rather than named: under mpirun, the job's proxy ranks, with the job's default
 * token for when none is given. None outside a job.
 */
export async function discoverProxies(): Promise<{ addresses: string[]; token: string }> {
  return { addresses: await jobProxies(), token: MPI_DEFAULT_TOKEN };
}
