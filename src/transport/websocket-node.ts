/**
 * WebSocket in Node, through the `ws` package: a client (`ws://` and `wss://` addresses of
 * `Offload.init({ proxies })`) and the proxy's listener (`offload proxy --listen ws://...`). The
 * transport itself, and what travels, is websocket.ts's.
 *
 * The listener checks a browser's `Origin` against its allowed origins before the upgrade: a page
 * not allowed is answered 403 and never exchanges a frame. A request without `Origin` is a
 * program, not a page (browsers always send it on a WebSocket, and a page cannot leave it out):
 * it is let through, and judged by its token as over TCP. The origin check keeps other sites'
 * pages from using a proxy through their visitors' browsers; it is no authentication (any
 * program can write any Origin), which stays the token's.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import { abortError } from '../abort.js';
import { asOffloadError, errors, OffloadError, quoted } from '../errors.js';
import { configurePollWindow, pollForAWhile } from './poll-window.js';
import { formatAddress, type TlsClientOptions, type TlsServerOptions } from './tcp.js';
import type { Transport } from './transport.js';
import {
  closedBy,
  formatWebSocketAddress,
  MAX_MESSAGE_BYTES,
  type MessageSocket,
  parseWebSocketAddress,
  WebSocketTransport,
} from './websocket.js';

/** How long a new connection has to send its upgrade request (the headers), as a login's deadline. */
const UPGRADE_TIMEOUT_MS = 10_000;
/** The largest request head taken (an upgrade request is a few hundred bytes). */
const MAX_HEADER_BYTES = 8 * 1024;
/**
 * Connections that have not asked for their upgrade yet, at most: more push out the oldest of
 * them (never an upgraded one), as the proxy does with connections that have not logged in.
 */
const MAX_PENDING_UPGRADES = 64;
/** How much of a refusal's body a client reads, for its error message. */
const MAX_REFUSAL_BYTES = 1024;

/** A MessageSocket over a `ws` WebSocket; `raw`: its TCP socket, for ref/unref. */
function nodeSocket(ws: WebSocket, raw: net.Socket | undefined): MessageSocket {
  return {
    send: (bytes) => ws.send(bytes, { binary: true }),
    get bufferedAmount() {
      return ws.bufferedAmount;
    },
    close: (code, reason) => ws.close(code, reason),
    terminate: () => ws.terminate(),
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    ...(raw ? { hold: (held: boolean) => void (held ? raw.ref() : raw.unref()) } : {}),
    expectSoon: pollForAWhile,
  };
}

/** What a failure of the `ws` connection means: its own refusals of what the peer sent are PROTOCOL. */
function failure(error: Error & { code?: string }, peer: string): OffloadError {
  if (error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH')
    return errors.protocol(
      `${peer} sent a WebSocket message over ${MAX_MESSAGE_BYTES} bytes, the most either end takes`,
    );
  if (error.code?.startsWith('WS_ERR_'))
    return new OffloadError('PROTOCOL', `${peer} broke the WebSocket protocol: ${error.message}`, { cause: error });
  return asOffloadError(error, `connection to ${peer} failed`, { code: 'DEVICE_LOST' });
}

/** Hands the messages and the end of `ws` to a new transport. */
function transportOver(ws: WebSocket, raw: net.Socket | undefined, peer: string): WebSocketTransport {
  const transport = new WebSocketTransport(nodeSocket(ws, raw), peer);
  ws.on('message', (data: RawData, binary: boolean) => {
    if (!binary) return transport.textMessage();
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
    transport.message(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length));
  });
  ws.on('error', (error) => transport.ended(failure(error, peer)));
  ws.on('close', (code: number, reason: Buffer) => transport.ended(closedBy(peer, code, reason.toString())));
  return transport;
}

/**
 * Connects to a `ws://` or `wss://` address: DEVICE_LOST naming it when it cannot be reached in
 * time, UNAUTHORIZED when the proxy refuses this program's origin or its TLS certificate is not
 * one the client trusts. The token is not in the request: it goes in the first frame.
 */
export async function connectWebSocket(
  address: string,
  options: { timeoutMs?: number; tls?: TlsClientOptions; signal?: AbortSignal } = {},
): Promise<Transport> {
  const parsed = parseWebSocketAddress(address);
  const url = formatWebSocketAddress(parsed);
  configurePollWindow();
  const timeoutMs = options.timeoutMs ?? 10_000;
  const hint = ` (is \`offload proxy --listen ${url}\` running?)`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, {
      perMessageDeflate: false,
      maxPayload: MAX_MESSAGE_BYTES,
      handshakeTimeout: timeoutMs,
      followRedirects: false,
      // A zero masking key: both ends then skip masking, which cost a copy and a JavaScript loop
      // over every byte each way (64 MiB writes ran 5-10 times slower than over TCP, `ws` without
      // its native helper). Masking keeps a page's scripted bytes from poisoning caches on the
      // way; a program is not a page, and sends what it likes anyway.
      generateMask: (mask: Uint8Array) => void mask.fill(0),
      ...(parsed.secure ? { ca: options.tls?.ca, servername: net.isIP(parsed.host) ? undefined : parsed.host } : {}),
    });
    let raw: net.Socket | undefined;
    let settled = false;
    const { signal } = options;
    const fail = (error: OffloadError): void => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      ws.terminate();
      reject(error);
    };
    const onAbort = (): void => fail(abortError(signal!, `connecting to ${address}`));
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    ws.on('upgrade', (response: http.IncomingMessage) => {
      raw = response.socket;
    });
    ws.on('unexpected-response', (_request: http.ClientRequest, response: http.IncomingMessage) => {
      const status = response.statusCode ?? 0;
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (text: string) => {
        if (body.length < MAX_REFUSAL_BYTES) body += text;
      });
      response.on('end', () => {
        const said = `${address} refused the WebSocket (HTTP ${status}${body ? `: ${body.slice(0, MAX_REFUSAL_BYTES).trim()}` : ''})`;
        fail(status === 401 || status === 403 ? errors.unauthorized(said) : errors.protocol(said));
      });
      response.on('error', () => fail(errors.protocol(`${address} refused the WebSocket (HTTP ${status})`)));
    });
    ws.on('error', (error: Error & { code?: string }) => {
      const text = `${error.code ?? ''} ${error.message}`;
      if (parsed.secure && /WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG|before secure TLS/i.test(text)) {
        fail(
          errors.protocol(
            `${address} does not answer in TLS (${error.message}): a proxy started without --tls-cert is reached as ws://`,
          ),
        );
      } else if (parsed.secure && /CERT|SELF_SIGNED|HOSTNAME|ALTNAME|SSL|TLS/i.test(text)) {
        fail(
          errors.unauthorized(
            `the TLS connection to ${address} failed: ${error.message} (give the proxy's CA with { tls: { ca } } or OFFLOAD_TLS_CA)`,
          ),
        );
      } else if (/handshake has timed out/i.test(error.message)) {
        fail(errors.deviceLost(`cannot reach ${address}: no connection within ${timeoutMs} ms${hint}`));
      } else {
        const lost = asOffloadError(error, `cannot reach ${address}`, { code: 'DEVICE_LOST' });
        fail(new OffloadError('DEVICE_LOST', `${lost.message}${hint}`, { cause: error }));
      }
    });
    ws.once('open', () => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      ws.removeAllListeners('error');
      ws.removeAllListeners('unexpected-response');
      resolve(transportOver(ws, raw, address));
    });
  });
}

/** The allowed origins, checked: each `scheme://host[:port]` as a browser sends it, or `*` for any. */
export function checkOrigins(origins: readonly string[]): ReadonlySet<string> {
  for (const origin of origins) {
    let canonical: string | undefined;
    try {
      canonical = new URL(origin).origin;
    } catch {
      canonical = undefined;
    }
    if (origin !== '*' && canonical !== origin)
      throw errors.invalidArgument(
        `--allow-origin ${quoted(origin)} is not an origin: give it as a browser sends it, scheme://host[:port] ` +
          `(e.g. https://app.example or http://127.0.0.1:8080, no path or trailing slash), or * for any page`,
      );
  }
  return new Set(origins);
}

export interface WebSocketListener {
  /** The bound address, `ws://` or `wss://` (with the real port when 0 was asked for). */
  readonly address: string;
  close(): Promise<void>;
}

export interface WebSocketListenOptions {
  /** Serve `wss://` with this certificate and key (a `wss://` address requires them). */
  tls?: TlsServerOptions;
  /** The pages (origins) that may connect; `*` for any. Default none: programs only. */
  allowOrigins?: readonly string[];
}

/** Answers an HTTP request on `socket` with `status` and a line of text, then closes it. */
function refuse(socket: net.Socket, status: number, text: string): void {
  const body = `${text}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\nConnection: close\r\n` +
      `Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), 2000).unref();
}

/**
 * Listens on a `ws://` or `wss://` address; each upgraded connection becomes a Transport handed
 * to `onConnection`. Plain HTTP requests get 426 and a line saying what this is.
 */
export async function listenWebSocket(
  address: string,
  onConnection: (transport: Transport) => void,
  options: WebSocketListenOptions = {},
): Promise<WebSocketListener> {
  const parsed = parseWebSocketAddress(address);
  const { tls } = options;
  if (parsed.secure && !tls)
    throw errors.invalidArgument(
      `listening on ${address} needs a certificate: give --tls-cert and --tls-key (or listen on ws://)`,
    );
  const origins = checkOrigins(options.allowOrigins ?? []);
  configurePollWindow();
  const settings = {
    maxHeaderSize: MAX_HEADER_BYTES,
    headersTimeout: UPGRADE_TIMEOUT_MS,
    requestTimeout: UPGRADE_TIMEOUT_MS,
    connectionsCheckingInterval: 1000,
  };
  const server = tls
    ? https.createServer({ ...settings, cert: tls.cert, key: tls.key, handshakeTimeout: UPGRADE_TIMEOUT_MS })
    : http.createServer(settings);
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_MESSAGE_BYTES,
    perMessageDeflate: false,
    clientTracking: false,
  });
  const sockets = new Set<net.Socket>();
  const pending = new Set<net.Socket>();
  server.on(tls ? 'secureConnection' : 'connection', (socket: net.Socket) => {
    if (pending.size >= MAX_PENDING_UPGRADES) pending.values().next().value!.destroy();
    sockets.add(socket);
    pending.add(socket);
    socket.once('close', () => {
      sockets.delete(socket);
      pending.delete(socket);
    });
  });
  // A handshake or request that fails (a TLS client with a wrong certificate, a malformed head)
  // costs that socket only.
  server.on('tlsClientError', (_error, socket: net.Socket) => socket.destroy());
  server.on('clientError', (_error, socket: net.Socket) => socket.destroy());
  server.on('request', (_request: http.IncomingMessage, response: http.ServerResponse) => {
    response.writeHead(426, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
    response.end(
      'This is an offload proxy: connect with a WebSocket client, Offload.init({ proxies: [this address], token })\n',
    );
  });
  server.on('upgrade', (request: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    pending.delete(socket);
    const origin = request.headers.origin;
    if (origin !== undefined && !origins.has('*') && !origins.has(origin)) {
      return refuse(
        socket,
        403,
        `the origin ${quoted(origin, 100)} may not use this proxy: start it with --allow-origin ${quoted(origin, 100)} to let that page in`,
      );
    }
    const peer = formatAddress({ host: socket.remoteAddress ?? '?', port: socket.remotePort ?? 0 });
    wss.handleUpgrade(request, socket, head, (ws) => {
      ws.on('error', () => {}); // until the transport listens (at once, below)
      onConnection(transportOver(ws, undefined, peer));
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', (error) => reject(errors.invalidArgument(`cannot listen on ${address}: ${error.message}`)));
    server.listen(parsed.port, parsed.host, () => {
      // Once listening, an accept error (EMFILE, ...) costs that one connection, not the process.
      server.on('error', () => {});
      const bound = server.address() as net.AddressInfo;
      resolve({
        address: formatWebSocketAddress({ ...parsed, secure: tls !== undefined, port: bound.port }),
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}
