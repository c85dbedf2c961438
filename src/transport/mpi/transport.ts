/**
 * One MPI channel as a Transport: the same frames as TCP (a head message, then the payload as
 * its own message, sent from the caller's array without a copy), to one peer rank, tagged with
 * the channel's number. The hub (hub.ts) sends and receives for every channel of the rank.
 */
import type { OffloadError } from '../../errors.js';
import { encodeHead, type Frame, type MetaCodec, type PayloadSink } from '../frame.js';
import { FrameReceiver, type Transport, type TransportStats } from '../transport.js';
import { mpiAddress } from './address.js';

/** Above this many bytes in flight on a channel, `send` asks the caller to wait for `drained()`. */
const HIGH_WATER_BYTES = 8 * 1024 * 1024;

/** What a channel asks of its hub. */
export interface MpiChannelHub {
  post(transport: MpiTransport, bytes: Uint8Array): void;
  forget(transport: MpiTransport, tellPeer: boolean): void;
  expectSoon(): void;
  /** A channel took hold of the process, or let go (`MpiTransport.held`). */
  holdChanged(): void;
}

export class MpiTransport implements Transport {
  readonly stats: TransportStats = { framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0 };
  onFrame: (frame: Frame) => void = () => {};
  onClose: (reason: OffloadError | undefined) => void = () => {};
  payloadSink?: PayloadSink;
  metaCodec?: MetaCodec;
  inFlight = 0;
  /** Whether this channel keeps the process alive (Transport.hold; the hub counts the channels that do). */
  held = true;
  private readonly receiver = new FrameReceiver(this);
  private isClosed = false;
  private drainWaiters: (() => void)[] = [];
  private flushWaiters: (() => void)[] = [];

  constructor(
    private readonly hub: MpiChannelHub,
    readonly rank: number,
    readonly channel: number,
  ) {}

  get peer(): string {
    return mpiAddress(this.rank);
  }

  get closed(): boolean {
    return this.isClosed;
  }

  send(meta: Record<string, unknown>, payload?: Uint8Array): boolean {
    if (this.isClosed) return true;
    // Head and payload go as two messages (in order: same source and tag), the payload straight
    // from the caller's array; the receiver's frame decoder reads them as one stream.
    const head = encodeHead(meta, payload?.length ?? 0, this.metaCodec);
    this.hub.post(this, head);
    if (payload && payload.length > 0) this.hub.post(this, payload);
    this.stats.framesSent++;
    this.stats.bytesSent += head.length + (payload?.length ?? 0);
    return this.inFlight < HIGH_WATER_BYTES;
  }

  /** The peer's next frame is expected soon: the hub's next turn polls MPI for it a while (hub.ts). */
  expectSoon(): void {
    if (!this.isClosed) this.hub.expectSoon();
  }

  hold(held: boolean): void {
    if (this.held === held) return;
    this.held = held;
    if (!this.isClosed) this.hub.holdChanged();
  }

  drained(): Promise<void> {
    if (this.isClosed || this.inFlight < HIGH_WATER_BYTES) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  flushed(): Promise<void> {
    if (this.isClosed || this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.flushWaiters.push(resolve));
  }

  /** @internal The hub reports completed sends. */
  completed(bytes: number): void {
    this.inFlight -= bytes;
    if (this.inFlight < HIGH_WATER_BYTES) for (const wake of this.drainWaiters.splice(0)) wake();
    if (this.inFlight === 0) for (const wake of this.flushWaiters.splice(0)) wake();
  }

  /** @internal The hub delivers one message of this channel. */
  receive(data: Uint8Array): void {
    this.receiver.receive(data);
  }

  /**
   * @internal Where a message of `bytes` should be received to: the payload view the frame's
   * sink gave (device memory, for a write), when the message is exactly that payload (a frame's
   * payload is its own message); else undefined.
   */
  directTarget(bytes: number): Uint8Array | undefined {
    const target = this.receiver.directTarget();
    return target?.length === bytes ? target : undefined;
  }

  /** @internal The message was received into `directTarget`'s view. */
  landed(bytes: number): void {
    this.receiver.landed(bytes);
  }

  close(reason?: OffloadError): void {
    this.closeQuietly(reason, true);
  }

  /** @internal `tellPeer` false when the peer closed it (or is gone). */
  closeQuietly(reason: OffloadError | undefined, tellPeer: boolean): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.hub.forget(this, tellPeer);
    for (const wake of [...this.drainWaiters.splice(0), ...this.flushWaiters.splice(0)]) wake();
    this.onClose(reason);
  }
}
