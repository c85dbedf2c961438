/**
 * The address forms a page can reach, in place of connect.ts (package.json's "browser" field):
 * a page has no TCP, TLS or MPI, only WebSocket, `ws://host:port` and `wss://host:port`, through
 * the page's own `WebSocket` (websocket.ts). The exports are connect.ts's that the remote plugin
 * uses, with the same meaning.
 */
import { errors, quoted } from '../errors.js';
import type { Transport } from './transport.js';
import {
  connectPageWebSocket,
  formatWebSocketAddress,
  isWebSocketAddress,
  parseWebSocketAddress,
} from './websocket.js';

export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** A page's TLS is the browser's: it trusts what the browser trusts. */
export type TlsClientOptions = { ca?: string | string[] };

export interface ConnectToOptions {
  timeoutMs?: number;
  tls?: TlsClientOptions;
  signal?: AbortSignal;
}

/** Opens a WebSocket to `address`; INVALID_ARGUMENT for any other form, saying why. */
export async function connectTo(address: string, options: ConnectToOptions = {}): Promise<Transport> {
  if (!isWebSocketAddress(address))
    throw errors.invalidArgument(
      `${quoted(address)}: a page reaches proxies over WebSocket only (ws://host:port or wss://host:port, served by offload proxy --listen ws://...)`,
    );
  return connectPageWebSocket(address, options);
}

/** A page is never a rank of an MPI job. */
export function linkedInJob(): boolean {
  return false;
}

/** Whether `peer` (canonical, from a proxy's --peers list) names the proxy at `address`. */
export function sameAddress(peer: string, address: string): boolean {
  return isWebSocketAddress(address) && peer === formatWebSocketAddress(parseWebSocketAddress(address));
}

/** A page finds no proxies of its own: it names them. */
export function discoverProxies(): Promise<{ addresses: string[]; token: string }> {
  return Promise.resolve({ addresses: [], token: '' });
}
