/**
 * A raw byte stream to a proxy, over TCP or WebSocket alike, for tests that send what the
 * runtime's own client never would (garbage, trickles, frames over the limits) and compare how a
 * proxy answers over each. Over WebSocket the bytes are cut into binary messages of at most
 * MAX_MESSAGE_BYTES, as the transport cuts them; `message` sends one message as it is.
 */
import net from 'node:net';
import { WebSocket } from 'ws';
import { MAX_MESSAGE_BYTES, parseWebSocketAddress } from '../../src/transport/websocket.js';

export interface ByteStream {
  /** Writes bytes; false once the stream has closed. */
  write(bytes: Uint8Array | string): boolean;
  /** Called with each chunk of bytes received. */
  onData: (bytes: Uint8Array) => void;
  /** Resolves when the stream has closed, however. */
  readonly closed: Promise<void>;
  readonly isClosed: boolean;
  /** Stops and resumes reading. */
  pause(): void;
  resume(): void;
  /** Bytes written and not yet handed to the OS. */
  buffered(): number;
  /** For WebSocket streams: the close status and reason the proxy gave. */
  closeStatus?: { code: number; reason: string };
  destroy(): void;
}

/** Opens a stream to `address`: `ws://`/`wss://` over WebSocket (with `origin` when given), else TCP. */
export async function openByteStream(
  address: string,
  options: { origin?: string; ca?: string } = {},
): Promise<ByteStream & { message?: (bytes: Uint8Array | string) => void }> {
  return /^wss?:\/\//.test(address) ? openWebSocketStream(address, options) : openTcpStream(address);
}

async function openTcpStream(address: string): Promise<ByteStream> {
  const at = address.lastIndexOf(':');
  const socket = net.connect({ host: address.slice(0, at), port: Number(address.slice(at + 1)) });
  socket.setNoDelay(true);
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  let isClosed = false;
  const stream: ByteStream = {
    write: (bytes) => {
      if (isClosed) return false;
      socket.write(bytes);
      return true;
    },
    onData: () => {},
    closed: new Promise((resolve) =>
      socket.once('close', () => {
        isClosed = true;
        resolve();
      }),
    ),
    get isClosed() {
      return isClosed;
    },
    pause: () => socket.pause(),
    resume: () => socket.resume(),
    buffered: () => socket.writableLength,
    destroy: () => socket.destroy(),
  };
  socket.on('data', (chunk: Buffer) => stream.onData(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)));
  return stream;
}

async function openWebSocketStream(
  address: string,
  options: { origin?: string; ca?: string },
): Promise<ByteStream & { message: (bytes: Uint8Array | string) => void }> {
  const { secure } = parseWebSocketAddress(address);
  const ws = new WebSocket(address, {
    perMessageDeflate: false,
    ...(options.origin ? { origin: options.origin } : {}),
    ...(secure ? { ca: options.ca } : {}),
  });
  ws.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
    ws.once('unexpected-response', (_request, response) =>
      reject(Object.assign(new Error(`HTTP ${response.statusCode}`), { status: response.statusCode, response })),
    );
  });
  let isClosed = false;
  const stream: ByteStream & { message: (bytes: Uint8Array | string) => void } = {
    write: (bytes) => {
      if (isClosed) return false;
      const data = typeof bytes === 'string' ? new TextEncoder().encode(bytes) : bytes;
      for (let at = 0; at < data.length; at += MAX_MESSAGE_BYTES)
        ws.send(data.subarray(at, Math.min(data.length, at + MAX_MESSAGE_BYTES)));
      return true;
    },
    message: (bytes) => {
      if (!isClosed) ws.send(bytes, { binary: typeof bytes !== 'string' });
    },
    onData: () => {},
    closed: new Promise((resolve) =>
      ws.once('close', (code: number, reason: Buffer) => {
        isClosed = true;
        stream.closeStatus = { code, reason: reason.toString() };
        resolve();
      }),
    ),
    get isClosed() {
      return isClosed;
    },
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    buffered: () => ws.bufferedAmount,
    destroy: () => ws.terminate(),
  };
  ws.on('message', (data: Buffer) => stream.onData(new Uint8Array(data.buffer, data.byteOffset, data.length)));
  return stream;
}
