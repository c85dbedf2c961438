/**
 * An in-memory transport pair, for tests that drive a client and a proxy session in one process
 * (the frame fuzzer, the remote plugin over a proxy without sockets): each frame is encoded to
 * bytes and decoded again on the other side, so the decoder's checks run exactly as on a socket;
 * `inject` delivers raw bytes as if they came off the wire. No back-pressure: `send` never says
 * to wait.
 */
import type { OffloadError } from '../errors.js';
import { encodeFrame, type Frame, type MetaCodec, type PayloadSink } from './frame.js';
import { FrameReceiver, type Transport, type TransportStats } from './transport.js';

export class LoopbackTransport implements Transport {
  readonly stats: TransportStats = { framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0 };
  onFrame: (frame: Frame) => void = () => {};
  onClose: (reason: OffloadError | undefined) => void = () => {};
  closeReason: OffloadError | undefined;
  other!: LoopbackTransport;
  payloadSink?: PayloadSink;
  metaCodec?: MetaCodec;
  private readonly receiver = new FrameReceiver(this);
  private isClosed = false;

  constructor(readonly peer: string) {}

  static pair(
    a = new LoopbackTransport('loopback-a'),
    b = new LoopbackTransport('loopback-b'),
  ): [LoopbackTransport, LoopbackTransport] {
    a.other = b;
    b.other = a;
    return [a, b];
  }

  get closed(): boolean {
    return this.isClosed;
  }

  send(meta: Record<string, unknown>, payload?: Uint8Array): boolean {
    if (this.isClosed) return true;
    const bytes = encodeFrame(meta, payload, this.metaCodec);
    this.stats.framesSent++;
    this.stats.bytesSent += bytes.length;
    this.other.inject(bytes);
    return true;
  }

  drained(): Promise<void> {
    return Promise.resolve();
  }

  /** Each frame was copied (encoded) when sent. */
  flushed(): Promise<void> {
    return Promise.resolve();
  }

  /** Delivers `bytes` to this end on a later microtask, as a socket would. */
  inject(bytes: Uint8Array): void {
    queueMicrotask(() => this.receiver.receive(bytes));
  }

  close(reason?: OffloadError): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.closeReason = reason;
    this.onClose(reason);
    // Like a socket: what was sent before the close still arrives, then the other end closes.
    queueMicrotask(() => this.other.close(reason));
  }
}
