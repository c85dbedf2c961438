/**
 * The transport contract: an ordered, reliable channel of frames between two endpoints. The
 * protocol layers (src/plugins/remote, src/proxy) see only this, never sockets, so TCP and later
 * MPI are interchangeable.
 */
import type { OffloadError } from '../errors.js';
import { FrameDecoder, type Frame, type PayloadSink } from './frame.js';

export interface TransportStats {
  framesSent: number;
  framesReceived: number;
  bytesSent: number;
  bytesReceived: number;
}

export interface Transport {
  /** Where the other end is, for messages (e.g. `127.0.0.1:7000`). */
  readonly peer: string;
  readonly closed: boolean;
  readonly stats: TransportStats;
  /**
   * Queues a frame; never blocks and never drops. The payload is sent as is (not copied): the
   * caller keeps it unchanged until the frame is on the wire. Returns false when more than the
   * high-water mark is queued: the caller should await `drained()` before sending more bulk data.
   * Sending on a closed transport does nothing.
   */
  send(meta: Record<string, unknown>, payload?: Uint8Array): boolean;
  /** Resolves when the queued bytes fall below the high-water mark, or the transport closes. */
  drained(): Promise<void>;
  /** Optional: where incoming payloads should land (see PayloadSink); set before frames arrive. */
  payloadSink?: PayloadSink;
  /** Called for each received frame, in order. */
  onFrame: (frame: Frame) => void;
  /** Called once when the transport closes, for whatever reason (`reason` unset: closed by `close()` without one). */
  onClose: (reason: OffloadError | undefined) => void;
  /** Closes at once; queued frames may be lost. Idempotent. */
  close(reason?: OffloadError): void;
}

/**
 * The receiving half every transport shares: bytes in (any split), frames out to
 * `transport.onFrame` in order, payloads landing where `transport.payloadSink` says; the first
 * malformed byte closes the transport with PROTOCOL.
 */
export class FrameReceiver {
  private readonly decoder: FrameDecoder;

  constructor(private readonly transport: Transport) {
    this.decoder = new FrameDecoder((meta, length) => transport.payloadSink?.(meta, length));
  }

  receive(bytes: Uint8Array): void {
    const transport = this.transport;
    if (transport.closed) return;
    transport.stats.bytesReceived += bytes.length;
    let frames: Frame[];
    try {
      frames = this.decoder.push(bytes);
    } catch (error) {
      transport.close(error as OffloadError);
      return;
    }
    for (const frame of frames) {
      if (transport.closed) return;
      transport.stats.framesReceived++;
      transport.onFrame(frame);
    }
  }
}
