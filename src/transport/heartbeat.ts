/**
 * Liveness over any transport. A peer that is alive but does not answer (a stopped process, a
 * stuck event loop, a machine gone without a word) would otherwise leave every pending request
 * waiting forever. Each side sends a small `heartbeat` frame whenever it has sent nothing for a
 * second (less for short timeouts), and takes a peer from which no whole frame (heartbeats
 * included) has arrived for its timeout as gone: the transport closes with DEVICE_LOST, which
 * fails everything pending on it. Whole frames, not bytes: a peer that trickles one byte a second
 * into a frame it never finishes is as silent as one that sends nothing (a frame is at most
 * 64 MiB, and bulk data travels in 1 MiB chunks, so a live peer completes frames well within a
 * timeout). Receivers drop heartbeat frames before anything else sees them (FrameReceiver).
 */
import { errors } from '../errors.js';
import { parseMilliseconds } from '../units.js';
import type { Transport } from './transport.js';
import { environment, letGo } from '../platform.js';

export const HEARTBEAT_OP = 'heartbeat';
/** How long a client waits for a silent proxy. */
export const DEFAULT_PEER_TIMEOUT_MS = 10_000;
/**
 * How long a proxy waits for a silent client: longer, since a client's event loop may be busy
 * with its own work for a while (a synchronous loop preparing data), and a proxy's never is.
 */
export const DEFAULT_CLIENT_TIMEOUT_MS = 60_000;

/** OFFLOAD_PEER_TIMEOUT: how long a silent peer is waited for, in milliseconds (else `fallback`). */
export function peerTimeoutFromEnv(env: NodeJS.ProcessEnv = environment(), fallback = DEFAULT_PEER_TIMEOUT_MS): number {
  const text = env.OFFLOAD_PEER_TIMEOUT;
  return text === undefined || text === '' ? fallback : parseMilliseconds(text, 'OFFLOAD_PEER_TIMEOUT');
}

/**
 * How often a side that has sent nothing sends a heartbeat: at most every second, whatever its
 * own timeout, since the other side may wait less long (a client 10 s, a proxy 60 s by default).
 */
export function heartbeatInterval(timeoutMs: number): number {
  return Math.max(10, Math.min(1000, Math.floor(timeoutMs / 4)));
}

/** Starts the heartbeat of `transport`; it stops by itself when the transport closes. */
export function startHeartbeat(transport: Transport, timeoutMs: number): void {
  const { stats } = transport;
  let received = stats.framesReceived;
  let sent = stats.bytesSent;
  let heardAt = Date.now();
  let sentAt = heardAt;
  const tick = heartbeatInterval(timeoutMs);
  const timer = setInterval(() => {
    if (transport.closed) return clearInterval(timer);
    const now = Date.now();
    if (stats.framesReceived !== received) {
      received = stats.framesReceived;
      heardAt = now;
    } else if (now - heardAt >= timeoutMs) {
      clearInterval(timer);
      return transport.close(
        errors.deviceLost(
          `${transport.peer} sent nothing for ${timeoutMs} ms (OFFLOAD_PEER_TIMEOUT): not one whole frame; taken as gone`,
        ),
      );
    }
    if (stats.bytesSent !== sent) {
      sent = stats.bytesSent;
      sentAt = now;
    } else if (now - sentAt >= tick) {
      transport.send({ op: HEARTBEAT_OP });
      sent = stats.bytesSent;
      sentAt = now;
    }
  }, tick);
  // The heartbeat never keeps a process alive by itself: the transport's own handle decides.
  letGo(timer);
}
