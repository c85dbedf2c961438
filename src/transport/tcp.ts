/** The TCP transport: frames over a stream socket, with Nagle off and write back-pressure. */
import net from 'node:net';
import { errors, type OffloadError } from '../errors.js';
import { encodeHead, type Frame, type PayloadSink } from './frame.js';
import { FrameReceiver, type Transport, type TransportStats } from './transport.js';

/** Above this many queued bytes `send` returns false (bulk senders then await `drained()`). */
export const HIGH_WATER_BYTES = 8 * 1024 * 1024;
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

export interface TcpAddress {
  host: string;
  port: number;
}

/** Reads `host:port` or `[v6]:port`; INVALID_ARGUMENT naming the text otherwise. */
export function parseAddress(text: string): TcpAddress {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s[\]]+)):(\d{1,5})$/.exec(text.trim());
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) throw errors.invalidArgument(`'${text}' is not a TCP address (expected host:port, e.g. 127.0.0.1:7000)`);
  return { host: match[1] ?? match[2]!, port };
}

export function formatAddress({ host, port }: TcpAddress): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

class TcpTransport implements Transport {
  readonly stats: TransportStats = { framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0 };
  onFrame: (frame: Frame) => void = () => {};
  onClose: (reason: OffloadError | undefined) => void = () => {};
  payloadSink?: PayloadSink;
  private readonly receiver = new FrameReceiver(this);
  private isClosed = false;

  constructor(
    private readonly socket: net.Socket,
    readonly peer: string,
  ) {
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 1000);
    socket.on('data', (chunk: Buffer) => this.receiver.receive(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)));
    socket.on('error', (error) => this.close(errors.deviceLost(`connection to ${peer} failed: ${error.message}`)));
    socket.on('close', () => this.close(errors.deviceLost(`connection to ${peer} closed`)));
  }

  get closed(): boolean {
    return this.isClosed;
  }

  send(meta: Record<string, unknown>, payload?: Uint8Array): boolean {
    if (this.isClosed) return true;
    const head = encodeHead(meta, payload?.length ?? 0);
    this.socket.cork();
    this.socket.write(head);
    if (payload && payload.length > 0) this.socket.write(payload);
    this.socket.uncork();
    this.stats.framesSent++;
    this.stats.bytesSent += head.length + (payload?.length ?? 0);
    return this.socket.writableLength < HIGH_WATER_BYTES;
  }

  drained(): Promise<void> {
    if (this.isClosed || this.socket.writableLength < HIGH_WATER_BYTES) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.socket.off('drain', done);
        this.socket.off('close', done);
        resolve();
      };
      this.socket.on('drain', done);
      this.socket.on('close', done);
    });
  }

  close(reason?: OffloadError): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.socket.destroy();
    this.onClose(reason);
  }
}

/** Connects to `address`; DEVICE_LOST naming it when it cannot be reached in time. Async so a bad address rejects rather than throws. */
export async function connectTcp(address: string, options: { timeoutMs?: number } = {}): Promise<Transport> {
  const { host, port } = parseAddress(address);
  const timeoutMs = options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(errors.deviceLost(`cannot reach ${address}: no connection within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(errors.deviceLost(`cannot reach ${address}: ${error.message}`));
    });
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(new TcpTransport(socket, address));
    });
  });
}

export interface TcpListener {
  /** The bound address (with the real port when 0 was asked for). */
  readonly address: string;
  close(): Promise<void>;
}

/** Listens on `address`; each accepted connection becomes a Transport handed to `onConnection`. */
export async function listenTcp(address: string, onConnection: (transport: Transport) => void): Promise<TcpListener> {
  const { host, port } = parseAddress(address);
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    onConnection(new TcpTransport(socket, formatAddress({ host: socket.remoteAddress ?? '?', port: socket.remotePort ?? 0 })));
  });
  return new Promise((resolve, reject) => {
    server.once('error', (error) => reject(errors.invalidArgument(`cannot listen on ${address}: ${error.message}`)));
    server.listen(port, host, () => {
      // Once listening, an accept error (EMFILE, ...) costs that one connection, not the process.
      server.on('error', () => {});
      const bound = server.address() as net.AddressInfo;
      resolve({
        address: formatAddress({ host, port: bound.port }),
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}
