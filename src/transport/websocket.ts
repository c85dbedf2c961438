/**
 * The proxy's frames over WebSocket (`ws://`, `wss://`): the one socket a page has, and usable
 * from Node too. A WebSocket connection carries exactly the byte stream of a TCP one (frame.ts's
 * frames, back to back), cut into binary messages of at most MAX_MESSAGE_BYTES anywhere: a
 * message need not begin or end a frame, and the receiver joins them as TCP reads are joined.
 * A text message is PROTOCOL.
 *
 * Why a byte stream and not one message per frame: a WebSocket stack buffers a message whole
 * before anything above sees a byte of it, and a frame may be 64 MiB. With one message per frame
 * a peer that has not logged in could make a proxy hold 64 MiB before the frame decoder read its
 * prefix; with messages of at most 64 KiB (what one TCP read takes) it can make it hold what a
 * TCP peer can, and every limit of frame.ts and the proxy applies unchanged. A bulk chunk also
 * lands as its messages arrive.
 *
 * This file knows no platform: the socket is a MessageSocket, made from the page's `WebSocket`
 * here (connectPageWebSocket) or from the `ws` package in Node (websocket-node.ts).
 */
import { abortError } from '../abort.js';
import { errors, type OffloadError, quoted } from '../errors.js';
import { encodeHead, type Frame, type FrameLimits, type MetaCodec, type PayloadSink } from './frame.js';
import { FrameReceiver, type Transport, type TransportStats } from './transport.js';

/** The largest binary message either end sends or takes (larger ones close the connection, status 1009). */
export const MAX_MESSAGE_BYTES = 64 * 1024;
/** Above this many queued bytes `send` returns false (as TCP's HIGH_WATER_BYTES). */
const HIGH_WATER_BYTES = 8 * 1024 * 1024;
/** How long a closing connection may still flush what was sent before it is cut (as TCP's). */
const LINGER_MS = 2000;
/** How often drained() and flushed() look at what is still queued: a WebSocket has no event for it. */
const QUEUE_POLL_MS = 1;
/** What a close reason may hold: 123 bytes of UTF-8 (RFC 6455); kept to ASCII. */
const MAX_CLOSE_REASON = 120;

export interface WebSocketAddress {
  secure: boolean;
  host: string;
  port: number;
  /** The request path, `/` unless the address names one. */
  path: string;
}

/** Whether `text` is a WebSocket address (`ws://` or `wss://`). */
export function isWebSocketAddress(text: string): boolean {
  return /^wss?:\/\//i.test(text.trim());
}

/**
 * Reads `ws://host:port[/path]` or `wss://...` (`[v6]` hosts too; the port defaults to 80 and
 * 443). INVALID_ARGUMENT naming the text otherwise, and for a query or fragment: the token
 * travels in the first frame, never in the URL (where logs and proxies on the way would keep it).
 */
export function parseWebSocketAddress(text: string): WebSocketAddress {
  const match = /^(wss?):\/\/(?:\[([0-9a-fA-F:.]+)\]|([^:\s[\]/?#@]+))(?::(\d{1,5}))?(\/[^\s?#]*)?$/i.exec(text.trim());
  const secure = match?.[1]!.toLowerCase() === 'wss';
  const port = match ? (match[4] === undefined ? (secure ? 443 : 80) : Number(match[4])) : NaN;
  if (!match || port > 65535) {
    throw errors.invalidArgument(
      `${quoted(text)} is not a WebSocket address (expected ws://host:port or wss://host:port, e.g. ws://127.0.0.1:7100, ` +
        'with no query: the token goes in Offload.init({ token }), never in the address)',
    );
  }
  return { secure, host: match[2] ?? match[3]!, port, path: match[5] ?? '/' };
}

export function formatWebSocketAddress({ secure, host, port, path }: WebSocketAddress): string {
  return `${secure ? 'wss' : 'ws'}://${host.includes(':') ? `[${host}]` : host}:${port}${path === '/' ? '' : path}`;
}

/**
 * What a transport needs of a WebSocket, whichever implementation it is: the page's
 * `WebSocket` or the `ws` package's. The adapter that makes one hands the transport the
 * socket's messages (`message`, `textMessage`) and its end (`ended`).
 */
export interface MessageSocket {
  /** Sends one binary message (at most MAX_MESSAGE_BYTES); the bytes may be read until they leave. */
  send(bytes: Uint8Array): void;
  /** Bytes given to `send` and not yet handed to the network. */
  readonly bufferedAmount: number;
  /** Starts the closing handshake (what was sent before still goes out). */
  close(code: number, reason: string): void;
  /** Cuts the connection at once. */
  terminate(): void;
  /** Optional (Node): stop and resume reading from the network. */
  pause?(): void;
  resume?(): void;
  /** Optional (Node): whether the socket keeps the process alive. */
  hold?(held: boolean): void;
  /** Optional (Node): the peer's next message is expected soon (the event loop's poll window). */
  expectSoon?(): void;
}

/** `setTimeout` whose timer never holds a process by itself where timers can be let go (Node). */
function unheldTimeout(callback: () => void, ms: number): ReturnType<typeof setTimeout> {
  const timer = setTimeout(callback, ms);
  (timer as { unref?: () => void }).unref?.();
  return timer;
}

/** A close reason as RFC 6455 allows it: short, and ASCII so that its bytes are its length. */
function closeReason(reason: OffloadError | undefined): string {
  if (!reason) return '';
  const text = `${reason.code}: ${reason.message}`.replace(/[^\x20-\x7e]/g, '?');
  return text.length > MAX_CLOSE_REASON ? `${text.slice(0, MAX_CLOSE_REASON - 3)}...` : text;
}

export class WebSocketTransport implements Transport {
  readonly stats: TransportStats = { framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0 };
  onFrame: (frame: Frame) => void = () => {};
  onClose: (reason: OffloadError | undefined) => void = () => {};
  onTooLarge?: (error: OffloadError) => void;
  payloadSink?: PayloadSink;
  metaCodec?: MetaCodec;
  limits?: FrameLimits;
  private readonly receiver = new FrameReceiver(this);
  private isClosed = false;

  constructor(
    private readonly socket: MessageSocket,
    readonly peer: string,
  ) {}

  get closed(): boolean {
    return this.isClosed;
  }

  /** The adapter hands each binary message here, in order. */
  message(bytes: Uint8Array): void {
    this.receiver.receive(bytes);
  }

  /** The adapter got a text message: the peer does not speak frames. */
  textMessage(): void {
    this.close(errors.protocol(`${this.peer} sent a text message; offload frames travel in binary messages only`));
  }

  /** The socket ended (the peer closed it, or it failed): `reason` says how. */
  ended(reason: OffloadError): void {
    this.finish(reason);
  }

  send(meta: Record<string, unknown>, payload?: Uint8Array): boolean {
    if (this.isClosed) return true;
    const head = encodeHead(meta, payload?.length ?? 0, this.metaCodec);
    const payloadBytes = payload?.length ?? 0;
    if (head.length + payloadBytes <= MAX_MESSAGE_BYTES) {
      // Most frames (every request without data, every reply): one message.
      if (payloadBytes === 0) this.socket.send(head);
      else {
        const message = new Uint8Array(head.length + payloadBytes);
        message.set(head);
        message.set(payload!, head.length);
        this.socket.send(message);
      }
    } else {
      // The payload is sent uncopied, in pieces (the caller keeps it unchanged until flushed()).
      this.sendPieces(head);
      if (payload) this.sendPieces(payload);
    }
    this.stats.framesSent++;
    this.stats.bytesSent += head.length + payloadBytes;
    return this.socket.bufferedAmount < HIGH_WATER_BYTES;
  }

  private sendPieces(bytes: Uint8Array): void {
    for (let at = 0; at < bytes.length; at += MAX_MESSAGE_BYTES)
      this.socket.send(bytes.subarray(at, Math.min(bytes.length, at + MAX_MESSAGE_BYTES)));
  }

  pauseReading(): void {
    if (!this.isClosed) this.socket.pause?.();
  }

  resumeReading(): void {
    if (!this.isClosed) this.socket.resume?.();
  }

  queuedBytes(): number {
    return this.socket.bufferedAmount;
  }

  frameInProgress(): { received: number; total: number } | undefined {
    return this.receiver.progress();
  }

  expectSoon(): void {
    if (!this.isClosed) this.socket.expectSoon?.();
  }

  hold(held: boolean): void {
    this.socket.hold?.(held);
  }

  drained(): Promise<void> {
    return this.queueBelow(HIGH_WATER_BYTES);
  }

  flushed(): Promise<void> {
    return this.queueBelow(1);
  }

  /** Resolves once fewer than `bytes` wait to go, or the transport closes. */
  private queueBelow(bytes: number): Promise<void> {
    if (this.isClosed || this.socket.bufferedAmount < bytes) return Promise.resolve();
    return new Promise((resolve) => {
      const look = (): void => {
        if (this.isClosed || this.socket.bufferedAmount < bytes) resolve();
        else setTimeout(look, QUEUE_POLL_MS);
      };
      setTimeout(look, QUEUE_POLL_MS);
    });
  }

  close(reason?: OffloadError): void {
    if (this.isClosed) return;
    // What was sent last (often the reply saying why it closes) still reaches the peer, before
    // the closing handshake; what arrives meanwhile is dropped (the socket is still read, or the
    // peer's answer to the handshake would never be seen), and a peer that does not answer holds
    // the socket LINGER_MS at most.
    this.socket.resume?.();
    this.socket.close(1000, closeReason(reason));
    unheldTimeout(() => this.socket.terminate(), LINGER_MS);
    this.finish(reason);
  }

  private finish(reason: OffloadError | undefined): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.onClose(reason);
  }
}

/** What a connection's close says, for the error of the transport that ended with it. */
export function closedBy(peer: string, code: number, reason: string): OffloadError {
  const why = reason === '' ? `status ${code}` : `status ${code}: ${reason.slice(0, 200)}`;
  return errors.deviceLost(`connection to ${peer} closed (${why})`);
}

/** The page's WebSocket class, where there is one (browsers, workers, Deno, Node 22+). */
interface PageWebSocket {
  binaryType: string;
  readonly bufferedAmount: number;
  readonly readyState: number;
  onopen: ((event: unknown) => void) | null;
  onerror: ((event: unknown) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
}

/**
 * Connects to `address` with the platform's own `WebSocket` (a page's): DEVICE_LOST naming the
 * address, and what most likely went wrong, when it cannot be reached in time. A page learns
 * nothing of why a connection was refused (a wrong origin reads as a failed connection), so the
 * message names both causes.
 */
export async function connectPageWebSocket(
  address: string,
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<Transport> {
  const url = formatWebSocketAddress(parseWebSocketAddress(address));
  const WebSocketClass = (globalThis as { WebSocket?: new (url: string) => PageWebSocket }).WebSocket;
  if (!WebSocketClass) throw errors.unsupported(`this platform has no WebSocket to reach ${address}`);
  const timeoutMs = options.timeoutMs ?? 10_000;
  const origin = (globalThis as { location?: { origin?: string } }).location?.origin;
  const hint =
    ` (is \`offload proxy --listen ${url}\` running` +
    (origin ? `, and does its --allow-origin name this page's origin ${origin}?)` : '?)');
  return new Promise((resolve, reject) => {
    const socket = new WebSocketClass(url);
    socket.binaryType = 'arraybuffer';
    let transport: WebSocketTransport | undefined;
    const { signal } = options;
    const fail = (error: OffloadError): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      socket.close();
      reject(error);
    };
    const timer = setTimeout(
      () => fail(errors.deviceLost(`cannot reach ${address}: no connection within ${timeoutMs} ms${hint}`)),
      timeoutMs,
    );
    const onAbort = (): void => fail(abortError(signal!, `connecting to ${address}`));
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    socket.onerror = () => {
      if (!transport) fail(errors.deviceLost(`cannot reach ${address}${hint}`));
    };
    socket.onclose = (event) => {
      if (!transport) fail(errors.deviceLost(`cannot reach ${address}${hint}`));
      else transport.ended(closedBy(address, event.code, event.reason));
    };
    socket.onmessage = (event) => {
      if (!transport) return;
      if (typeof event.data === 'string') transport.textMessage();
      else transport.message(new Uint8Array(event.data as ArrayBuffer));
    };
    socket.onopen = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      transport = new WebSocketTransport(
        {
          // A page's WebSocket refuses views of shared memory: those are copied.
          send: (bytes) =>
            socket.send(
              typeof SharedArrayBuffer !== 'undefined' && bytes.buffer instanceof SharedArrayBuffer
                ? bytes.slice()
                : bytes,
            ),
          get bufferedAmount() {
            return socket.bufferedAmount;
          },
          close: (code, reason) => socket.close(code, reason),
          terminate: () => socket.close(),
        },
        address,
      );
      resolve(transport);
    };
  });
}
