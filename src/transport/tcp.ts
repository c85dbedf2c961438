/**
 * The TCP transport: frames over a stream socket, with Nagle off and write back-pressure, in
 * clear or over TLS (node:tls; the same framing inside). An address `tls://host:port` asks for
 * TLS; so does a client's `tls` option for every address.
 */
import net from 'node:net';
import tls from 'node:tls';
import { abortError } from '../abort.js';
import { asOffloadError, errors, OffloadError, quoted } from '../errors.js';
import { coLocation, isLoopbackPeer, isVisibleProcess, thisProcess } from './co-location.js';
import type { ProcessId } from './process-id.js';
import { encodeHead, type Frame, type MetaCodec, type PayloadSink } from './frame.js';
import { configurePollWindow, frameArrived, pollForAWhile } from './poll-window.js';
import { FrameReceiver, type Transport, type TransportStats } from './transport.js';

/** Above this many queued bytes `send` returns false (bulk senders then await `drained()`). */
export const HIGH_WATER_BYTES = 8 * 1024 * 1024;
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** How long a closed socket may still flush what was sent before it is cut. */
const LINGER_MS = 2000;

export interface TcpAddress {
  host: string;
  port: number;
  /** Written `tls://host:port`. */
  tls?: boolean;
}

/** What a client trusts: PEM certificates of the CAs (default: the system's). */
export interface TlsClientOptions {
  ca?: string | string[];
}

/** A TLS listener's certificate chain and private key, PEM. */
export interface TlsServerOptions {
  cert: string;
  key: string;
}

/** Reads `host:port`, `[v6]:port`, or either after `tls://`; INVALID_ARGUMENT naming the text otherwise. */
export function parseAddress(text: string): TcpAddress {
  const match = /^(tls:\/\/)?(?:\[([0-9a-fA-F:.]+)\]|([^:\s[\]/]+)):(\d{1,5})$/.exec(text.trim());
  const port = match ? Number(match[4]) : NaN;
  if (!match || port > 65535)
    throw errors.invalidArgument(
      `${quoted(text)} is not a TCP address (expected host:port or tls://host:port, e.g. 127.0.0.1:7000)`,
    );
  return { host: match[2] ?? match[3]!, port, ...(match[1] ? { tls: true } : {}) };
}

export function formatAddress({ host, port, tls: secure }: TcpAddress): string {
  return `${secure ? 'tls://' : ''}${host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`}`;
}

/** Whether `host` is this machine only (127.0.0.0/8, ::1, localhost): nothing outside sees that traffic. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * The most one read takes, into the scratch array or a payload view. libuv reads a socket again
 * at once only while a read fills its whole buffer; a read that returns less sends the loop back
 * to epoll. With a whole chunk's view (1 MiB) as the buffer every read came back short, one read
 * per wake-up; reads of 64 KiB (what Node reads by default) keep a wake-up reading while bytes
 * arrive, and hand the kernel's receive buffer back to the sender sooner: remote 64 MiB writes
 * ran 5-10 % faster, reads about 10 % (paired runs, bench/README.md).
 */
const READ_BYTES = 64 * 1024;

/**
 * Where reads of plain TCP sockets land when no frame payload can take them: one array for the
 * whole thread. A socket's read is handled to the end (its bytes parsed, whatever is kept copied
 * out) before any other socket reads, so they can all share it.
 */
const scratch = new Uint8Array(READ_BYTES);

/** The empty write whose callback says the socket's earlier writes are done (TcpTransport.flushed). */
const NOTHING = new Uint8Array(0);

/**
 * Chooses where each read of a plain TCP socket lands (`onread`): straight into the payload view
 * of a frame whose sink gave one (a streamed write lands in device memory with no copy in
 * JavaScript), else into the shared scratch array. Node's own reads put every chunk in a fresh
 * 64 KiB array, and the receiver then copied payloads into place: a 64 MiB write cost 1,024
 * allocations and a copy more on the receiving side (write rates 0.57 -> see bench/README.md).
 */
class SocketReader {
  private receiver: FrameReceiver | undefined;
  /** Reads that came before the transport existed (none in practice: it is made on `connect`). */
  private early: Uint8Array[] = [];
  private direct: Uint8Array | undefined;

  readonly options: net.OnReadOpts = {
    buffer: (): Uint8Array => {
      const target = this.receiver?.directTarget();
      this.direct = target && target.length > READ_BYTES ? target.subarray(0, READ_BYTES) : target;
      return this.direct ?? scratch;
    },
    // True: go on reading (false would pause the socket).
    callback: (length: number, buffer: Uint8Array): boolean => {
      frameArrived();
      if (buffer === this.direct) this.receiver!.landed(length);
      else if (this.receiver) this.receiver.receive(buffer.subarray(0, length), true);
      else this.early.push(buffer.slice(0, length));
      return true;
    },
  };

  attach(receiver: FrameReceiver): void {
    this.receiver = receiver;
    for (const bytes of this.early.splice(0)) receiver.receive(bytes);
  }
}

class TcpTransport implements Transport {
  readonly stats: TransportStats = { framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0 };
  onFrame: (frame: Frame) => void = () => {};
  onClose: (reason: OffloadError | undefined) => void = () => {};
  payloadSink?: PayloadSink;
  metaCodec?: MetaCodec;
  private readonly receiver = new FrameReceiver(this);
  private isClosed = false;
  /** Whether the peer is on this host (loopback), where it may learn this process. */
  private readonly local: boolean;

  /** `reader`: the socket was made with its `onread` (plain TCP); without one (TLS), reads come as 'data'. */
  constructor(
    private readonly socket: net.Socket,
    readonly peer: string,
    reader?: SocketReader,
  ) {
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 1000);
    this.local = isLoopbackPeer(socket.remoteAddress);
    if (reader) reader.attach(this.receiver);
    else
      socket.on('data', (chunk: Buffer) => {
        frameArrived();
        this.receiver.receive(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length));
      });
    socket.on('error', (error) =>
      this.close(asOffloadError(error, `connection to ${peer} failed`, { code: 'DEVICE_LOST' })),
    );
    socket.on('close', () => this.close(errors.deviceLost(`connection to ${peer} closed`)));
  }

  get closed(): boolean {
    return this.isClosed;
  }

  send(meta: Record<string, unknown>, payload?: Uint8Array): boolean {
    if (this.isClosed) return true;
    const head = encodeHead(meta, payload?.length ?? 0, this.metaCodec);
    if (payload && payload.length > 0) {
      // One writev for both; a frame without payload (most requests, every reply) is one write
      // and skips cork's buffering path.
      this.socket.cork();
      this.socket.write(head);
      this.socket.write(payload);
      this.socket.uncork();
    } else {
      this.socket.write(head);
    }
    this.stats.framesSent++;
    this.stats.bytesSent += head.length + (payload?.length ?? 0);
    return this.socket.writableLength < HIGH_WATER_BYTES;
  }

  pauseReading(): void {
    if (!this.isClosed) this.socket.pause();
  }

  resumeReading(): void {
    if (!this.isClosed) this.socket.resume();
  }

  queuedBytes(): number {
    return this.socket.writableLength;
  }

  frameInProgress(): { received: number; total: number } | undefined {
    return this.receiver.progress();
  }

  expectSoon(): void {
    if (!this.isClosed) pollForAWhile(this);
  }

  localProcess(): ProcessId | undefined {
    return this.local ? thisProcess() : undefined;
  }

  peerProcess(told: ProcessId): void {
    if (this.local && !this.isClosed && isVisibleProcess(told)) coLocation.peerIs(this, told);
  }

  hold(held: boolean): void {
    if (held) this.socket.ref();
    else this.socket.unref();
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

  flushed(): Promise<void> {
    if (this.isClosed || this.socket.writableLength === 0) return Promise.resolve();
    // Writes complete in order: an empty one's callback comes once all before it left (or with
    // the error of a socket that closed meanwhile).
    return new Promise((resolve) => this.socket.write(NOTHING, () => resolve()));
  }

  close(reason?: OffloadError): void {
    if (this.isClosed) return;
    this.isClosed = true;
    coLocation.closed(this);
    // What was sent last (often the reply saying why it closes) still reaches the peer, before
    // the FIN; nothing more is read, and a peer that never reads holds the socket LINGER_MS at most.
    this.socket.pause();
    this.socket.end();
    const linger = setTimeout(() => this.socket.destroy(), LINGER_MS);
    linger.unref();
    this.socket.once('close', () => clearTimeout(linger));
    this.onClose(reason);
  }
}

/** The question a connect error ends with: what is most likely missing at `address`. */
function runningAt(address: string): string {
  const { host, port } = parseAddress(address);
  return ` (is \`offload proxy\` running at ${formatAddress({ host, port })}?)`;
}

/**
 * Connects to `address`; DEVICE_LOST naming it when it cannot be reached in time, UNAUTHORIZED
 * when its TLS certificate is not one the client trusts. Async so a bad address rejects rather
 * than throws.
 */
export async function connectTcp(
  address: string,
  options: { timeoutMs?: number; tls?: TlsClientOptions; signal?: AbortSignal } = {},
): Promise<Transport> {
  const { host, port, tls: wanted } = parseAddress(address);
  configurePollWindow();
  const timeoutMs = options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const secure = wanted === true || options.tls !== undefined;
  const reader = secure ? undefined : new SocketReader();
  return new Promise((resolve, reject) => {
    const socket = secure
      ? // SNI takes names, not addresses; the certificate is checked against either all the same.
        tls.connect({ host, port, ca: options.tls?.ca, servername: net.isIP(host) ? undefined : host })
      : net.connect({ host, port, onread: reader!.options });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(errors.deviceLost(`cannot reach ${address}: no connection within ${timeoutMs} ms${runningAt(address)}`));
    }, timeoutMs);
    const { signal } = options;
    const onAbort = () => {
      clearTimeout(timer);
      socket.destroy();
      reject(abortError(signal!, `connecting to ${address}`));
    };
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    socket.once('close', () => signal?.removeEventListener('abort', onAbort));
    socket.once('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (
        secure &&
        /before secure TLS connection|WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG/i.test(
          `${error.code} ${error.message}`,
        )
      ) {
        // The handshake met clear text, or a peer that hung up on it: a proxy without TLS.
        reject(
          errors.protocol(
            `${address} does not answer in TLS (${error.message}): a proxy started without --tls-cert is reached as host:port, without tls:// or OFFLOAD_TLS_CA`,
          ),
        );
      } else if (secure && /CERT|SELF_SIGNED|HOSTNAME|ALTNAME|SSL|TLS/i.test(`${error.code} ${error.message}`)) {
        reject(
          errors.unauthorized(
            `the TLS connection to ${address} failed: ${error.message} (give the proxy's CA with { tls: { ca } } or OFFLOAD_TLS_CA)`,
          ),
        );
      } else {
        const refused = error.code === 'ECONNREFUSED' || error.code === 'EHOSTUNREACH' || error.code === 'ENOTFOUND';
        const lost = asOffloadError(error, `cannot reach ${address}`, { code: 'DEVICE_LOST' });
        reject(
          refused ? new OffloadError('DEVICE_LOST', `${lost.message}${runningAt(address)}`, { cause: error }) : lost,
        );
      }
    });
    socket.once(secure ? 'secureConnect' : 'connect', () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      socket.removeAllListeners('error');
      resolve(new TcpTransport(socket, address, reader));
    });
  });
}

/**
 * An accepted socket that reads through `reader`. Node's server takes no `onread`, so the
 * accepted socket (made paused: nothing read yet) hands its handle to a socket made with one,
 * and is destroyed when that one closes (the server counts its connections by the first).
 * Node's `_handle` is not public: where it is missing, the accepted socket is kept as it is.
 */
function withReader(accepted: net.Socket, reader: SocketReader): net.Socket {
  const holder = accepted as unknown as { _handle?: object | null };
  if (!holder._handle) return accepted;
  const handle = holder._handle;
  holder._handle = null;
  const socket = new net.Socket({
    handle,
    readable: true,
    writable: true,
    onread: reader.options,
  } as net.SocketConstructorOpts);
  socket.once('close', () => accepted.destroy());
  return socket;
}

export interface TcpListener {
  /** The bound address (with the real port when 0 was asked for). */
  readonly address: string;
  close(): Promise<void>;
}

/** Listens on `address` (over TLS when given a certificate); each accepted connection becomes a Transport handed to `onConnection`. */
export async function listenTcp(
  address: string,
  onConnection: (transport: Transport) => void,
  secure?: TlsServerOptions,
): Promise<TcpListener> {
  const { host, port } = parseAddress(address);
  configurePollWindow();
  const sockets = new Set<net.Socket>();
  const accept = (socket: net.Socket, reader?: SocketReader): void => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    onConnection(
      new TcpTransport(
        socket,
        formatAddress({ host: socket.remoteAddress ?? '?', port: socket.remotePort ?? 0 }),
        reader,
      ),
    );
  };
  let server: net.Server;
  if (secure) {
    // A handshake that fails (a plain client, a wrong certificate) costs that socket only.
    server = tls.createServer({ cert: secure.cert, key: secure.key, handshakeTimeout: 10_000 }, (socket) =>
      accept(socket),
    );
    server.on('tlsClientError', (_error, socket) => socket.destroy());
  } else {
    server = net.createServer({ pauseOnConnect: true }, (accepted) => {
      const reader = new SocketReader();
      const socket = withReader(accepted, reader);
      accept(socket, socket === accepted ? undefined : reader);
      if (socket === accepted) accepted.resume();
    });
  }
  return new Promise((resolve, reject) => {
    server.once('error', (error) => reject(errors.invalidArgument(`cannot listen on ${address}: ${error.message}`)));
    server.listen(port, host, () => {
      // Once listening, an accept error (EMFILE, ...) costs that one connection, not the process.
      server.on('error', () => {});
      const bound = server.address() as net.AddressInfo;
      resolve({
        address: formatAddress({ host, port: bound.port, ...(secure ? { tls: true } : {}) }),
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}
