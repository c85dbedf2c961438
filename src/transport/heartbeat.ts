/**
 * Liveness over any transport. A peer that is alive but does not answer (a stopped process, a
 * stuck event loop, a machine gone without a word) would otherwise leave every pending request
 * waiting forever. Each side sends a small `heartbeat` frame whenever it has sent nothing for a
 * quarter of the timeout, and takes a peer from which nothing at all (heartbeats included) has
 * arrived for the timeout as gone: the transport closes with DEVICE_LOST, which fails everything
 * pending on it. Receivers drop heartbeat frames before anything else sees them (FrameReceiver).
 */
import { errors } from '../errors.js';
import { parseMilliseconds } from '../units.js';
import type { Transport } from './transport.js';

export const HEARTBEAT_OP = 'heartbeat';
export const DEFAULT_PEER_TIMEOUT_MS = 10_000;

/** OFFLOAD_PEER_TIMEOUT: how long a silent peer is waited for, in milliseconds. */
export function peerTimeoutFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.OFFLOAD_PEER_TIMEOUT;
  return text === undefined || text === '' ? DEFAULT_PEER_TIMEOUT_MS : parseMilliseconds(text, 'OFFLOAD_PEER_TIMEOUT');
}

/** Starts the heartbeat of `transport`; it stops by itself when the transport closes. */
export function startHeartbeat(transport: Transport, timeoutMs: number): void {
  const { stats } = transport;
  let received = stats.bytesReceived;
  let sent = stats.bytesSent;
  let heardAt = Date.now();
  let sentAt = heardAt;
  const tick = Math.max(10, Math.floor(timeoutMs / 4));
  const timer = setInterval(() => {
    if (transport.closed) return clearInterval(timer);
    const now = Date.now();
    if (stats.bytesReceived !== received) {
      received = stats.bytesReceived;
      heardAt = now;
    } else if (now - heardAt >= timeoutMs) {
      clearInterval(timer);
      return transport.close(errors.deviceLost(`${transport.peer} sent nothing for ${timeoutMs} ms (OFFLOAD_PEER_TIMEOUT); taken as gone`));
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
  timer.unref();
}
