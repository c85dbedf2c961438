/**
 * A client that speaks raw frames to a proxy over TCP, for tests that do what the runtime's own
 * client never would: frames too large, fields of any content, requests pipelined without
 * waiting, sockets that stay silent or stream a payload nobody asked for.
 */
import net from 'node:net';
import { PROTOCOL_VERSION } from '../../src/protocol/wire.js';
import { encodeFrame, FrameDecoder, type Frame, type MetaCodec } from '../../src/transport/frame.js';

export class RawClient {
  /** Every frame received, in order (heartbeats included). */
  readonly frames: Frame[] = [];
  /** Bytes of those frames as they came off the wire. */
  bytesReceived = 0;
  isClosed = false;
  readonly closed: Promise<void>;
  private readonly decoder: FrameDecoder;
  private readonly waiters: (() => void)[] = [];

  /** `codec`: the compact form this client speaks both ways (offered in `login`); none: JSON only. */
  private constructor(
    readonly socket: net.Socket,
    private readonly codec?: MetaCodec,
  ) {
    this.decoder = new FrameDecoder(undefined, undefined, () => codec);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      this.bytesReceived += chunk.length;
      this.frames.push(...this.decoder.push(new Uint8Array(chunk)));
      this.wake();
    });
    socket.on('error', () => {});
    this.closed = new Promise((resolve) =>
      socket.once('close', () => {
        this.isClosed = true;
        this.wake();
        resolve();
      }),
    );
  }

  static async open(address: string, codec?: MetaCodec): Promise<RawClient> {
    const at = address.lastIndexOf(':');
    const socket = net.connect({ host: address.slice(0, at), port: Number(address.slice(at + 1)) });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new RawClient(socket, codec);
  }

  private wake(): void {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  send(meta: Record<string, unknown>, payload?: Uint8Array): void {
    if (!this.isClosed) this.socket.write(encodeFrame(meta, payload, this.codec));
  }

  /** Writes raw bytes, waiting while the socket's buffer is full; false once the socket has closed. */
  async write(bytes: Uint8Array): Promise<boolean> {
    if (this.isClosed) return false;
    if (this.socket.write(bytes)) return true;
    await Promise.race([new Promise((resolve) => this.socket.once('drain', resolve)), this.closed]);
    return !this.isClosed;
  }

  /** The reply to request `id`; throws if the connection closes first or none comes in time. */
  async reply(id: number, timeoutMs = 10_000): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const frame = this.frames.find((f) => f.meta.op === 'reply' && f.meta.id === id);
      if (frame) return frame.meta;
      if (this.isClosed)
        throw new Error(
          `closed without a reply to ${id}; received ${JSON.stringify(this.frames.map((f) => f.meta)).slice(0, 2000)}`,
        );
      if (Date.now() > deadline) throw new Error(`no reply to ${id} within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The error of reply `id` ({ code, message }), or undefined for a success. */
  async error(id: number, timeoutMs?: number): Promise<{ code: string; message: string } | undefined> {
    return (await this.reply(id, timeoutMs)).error as { code: string; message: string } | undefined;
  }

  /** Says hello with `token` and waits for the answer. */
  async login(token: string): Promise<Record<string, unknown>> {
    this.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token, ...(this.codec ? { compact: true } : {}) });
    return this.reply(1);
  }

  /** Resolves once the proxy has closed the connection; throws if it has not within `timeoutMs`. */
  async closedWithin(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the proxy kept the connection open past ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      await Promise.race([this.closed, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  close(): void {
    this.socket.destroy();
  }
}
