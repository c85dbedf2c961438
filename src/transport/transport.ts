/**
 * The transport contract: an ordered, reliable channel of frames between two endpoints. The
 * protocol layers (src/plugins/remote, src/proxy) see only this, never sockets, so TCP, MPI and
 * the in-memory loopback (loopback.ts) are interchangeable.
 */
import type { OffloadError } from '../errors.js';
import {
  FRAME_LIMITS,
  FrameDecoder,
  isFrameTooLarge,
  type Frame,
  type FrameLimits,
  type MetaCodec,
  type PayloadSink,
} from './frame.js';
import { HEARTBEAT_OP } from './heartbeat.js';
import type { ProcessId } from './process-id.js';

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
  /**
   * Resolves when every payload sent so far has left the caller's arrays (handed to the OS, or
   * its MPI send completed), or the transport closes: a caller that sent views of memory it is
   * about to change (a proxy streaming device memory) waits for it first.
   */
  flushed(): Promise<void>;
  /**
   * Optional: the peer's next frame is expected soon (the reply this end awaits, the next request
   * of a client just answered); a transport that can wait for it more eagerly than by sleeping
   * does so for a while (TCP: the poll window, OFFLOAD_POLL_US).
   */
  expectSoon?(): void;
  /**
   * Optional: this process, for a peer on this host (TCP over loopback) to find it; undefined
   * where the peer is elsewhere (a remote host learns nothing) or nothing is known. Told in the
   * hello, so that two peers sharing their only core do not spin for each other (co-location.ts).
   */
  localProcess?(): ProcessId | undefined;
  /** Optional: the peer said it is process `told` (from the wire: checked before it counts). */
  peerProcess?(told: ProcessId): void;
  /**
   * Optional: stops reading from the peer until `resumeReading` (its frames wait in the OS's
   * buffers, and then in the peer's): a proxy whose replies are not being read stops taking
   * requests until they are. Frames already read are still handed out.
   */
  pauseReading?(): void;
  resumeReading?(): void;
  /** Optional: bytes sent and not yet handed to the OS (a peer that does not read lets them pile up). */
  queuedBytes?(): number;
  /**
   * Optional: how far the frame being received has come (its bytes so far, of `total`), or
   * undefined between frames: a receiver can close a peer that trickles a frame.
   */
  frameInProgress?(): { received: number; total: number } | undefined;
  /**
   * Optional: whether this transport keeps the process alive (as opened, it does). The owner
   * lets go while nothing is pending on it (a client between requests) and takes hold again
   * when work is in flight, as Node's `socket.unref()`/`ref()`: a program whose work is done
   * exits even with the connection open. A transport without it always holds.
   */
  hold?(held: boolean): void;
  /** Optional: where incoming payloads should land (see PayloadSink); set before frames arrive. */
  payloadSink?: PayloadSink;
  /** Optional: the largest frame taken from the peer now (default FRAME_LIMITS); checked per frame. */
  limits?: FrameLimits;
  /** Optional: the compact form of some metas, both ways; set by both ends before frames flow. */
  metaCodec?: MetaCodec;
  /** Called for each received frame, in order. */
  onFrame: (frame: Frame) => void;
  /** Optional: called with the PROTOCOL error of a frame over `limits`, just before the transport closes (a last send still goes out). */
  onTooLarge?: (error: OffloadError) => void;
  /** Called once when the transport closes, for whatever reason (`reason` unset: closed by `close()` without one). */
  onClose: (reason: OffloadError | undefined) => void;
  /** Closes; what was sent before may still go out, nothing more is received. Idempotent. */
  close(reason?: OffloadError): void;
}

/**
 * Opens a transport to an address (undici's connector pattern): the remote plugin is given one,
 * so it never knows which transport it speaks over. transport/connect.ts has the default. The
 * transport it resolves with belongs to the caller, who closes it (a RemoteConnection closes its
 * own in `close()`); a connector that fails rejects, with DEVICE_LOST for an address it cannot reach.
 */
export type Connector = (address: string) => Promise<Transport>;

/**
 * The receiving half every transport shares: bytes in (any split), frames out to
 * `transport.onFrame` in order, payloads landing where `transport.payloadSink` says; the first
 * malformed byte closes the transport with PROTOCOL.
 */
export class FrameReceiver {
  private readonly decoder: FrameDecoder;

  constructor(private readonly transport: Transport) {
    this.decoder = new FrameDecoder(
      (meta, length) => transport.payloadSink?.(meta, length),
      () => transport.limits ?? FRAME_LIMITS,
      () => transport.metaCodec,
    );
  }

  /**
   * Frames are handed out one at a time, each before the next is parsed: a frame's handler may
   * change the limits for the next. `borrowed`: the caller reuses the memory of `bytes` once
   * this returns, so nothing handed out or kept refers to it (payloads are copied out).
   */
  receive(bytes: Uint8Array, borrowed = false): void {
    const transport = this.transport;
    if (transport.closed) return;
    transport.stats.bytesReceived += bytes.length;
    this.decoder.add(bytes);
    this.handOut(borrowed ? bytes.buffer : undefined);
    if (borrowed) this.decoder.ownBuffered();
  }

  /** See FrameDecoder.progress. */
  progress(): { received: number; total: number } | undefined {
    return this.decoder.progress();
  }

  /** See FrameDecoder.directTarget: where the next read may land with no copy. */
  directTarget(): Uint8Array | undefined {
    return this.transport.closed ? undefined : this.decoder.directTarget();
  }

  /** `length` bytes were read into the view `directTarget` gave. */
  landed(length: number): void {
    if (this.transport.closed) return;
    this.transport.stats.bytesReceived += length;
    this.decoder.landed(length);
    this.handOut(undefined);
  }

  private handOut(borrowed: ArrayBufferLike | undefined): void {
    const transport = this.transport;
    for (;;) {
      let frame: Frame | undefined;
      try {
        frame = this.decoder.next();
      } catch (error) {
        // Over the limits, the stream is still in step and the owner may answer before the
        // close; after garbage it is not, and the transport only closes.
        if (isFrameTooLarge(error)) transport.onTooLarge?.(error as OffloadError);
        transport.close(error as OffloadError);
        return;
      }
      if (!frame || transport.closed) return;
      if (frame.payload.buffer === borrowed && frame.payload.byteLength > 0)
        frame = { meta: frame.meta, payload: frame.payload.slice() };
      transport.stats.framesReceived++;
      // Heartbeats only say the peer lives (their bytes are counted above): nobody else sees them.
      if (frame.meta.op !== HEARTBEAT_OP) transport.onFrame(frame);
    }
  }
}
