/**
 * `offload proxy --metrics <host:port>`: the proxy's figures over HTTP, read-only.
 *   GET /metrics   the Prometheus text format (prometheus.ts)
 *   GET /healthz   200 while the process serves (a liveness probe)
 *   GET /readyz    200 when every device is up and a connection slot is free, else 503 saying why
 *   GET /          the live dashboard (dashboard/page.ts), which reads /state and /events
 *   GET /state     every figure as JSON; GET /events: the same, pushed each second (server-sent events)
 * It listens on loopback unless the operator says otherwise (`insecure`, or TLS): what it serves
 * needs no token, so it never holds one, a grant or a buffer's bytes, and names clients only with
 * `names` (metrics.ts). Requests are bounded: a few header bytes, short timeouts, a cap on
 * connections, and one snapshot per interval however many readers ask (metrics.ts).
 *
 * Ownership: `MetricsEndpoint.start` makes the HTTP server; `close()` closes it and every
 * connection (event streams included). The ProxyMetrics it reads is the server's.
 */
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { errors } from '../errors.js';
import { formatAddress, isLoopback, parseAddress, type TlsServerOptions } from '../transport/tcp.js';
import { DASHBOARD_SCRIPT, dashboardPage } from './dashboard/page.js';
import type { MetricsState, ProxyMetrics } from './metrics.js';
import { formatPrometheus, PROMETHEUS_CONTENT_TYPE } from './prometheus.js';

export interface MetricsEndpointOptions {
  /** `host:port` (port 0: any free port). */
  listen: string;
  /** Serve over HTTPS with this certificate and key (PEM). */
  tls?: TlsServerOptions;
  /** Listen on a non-loopback address without TLS (`--metrics-insecure`); refused otherwise. */
  insecure?: boolean;
  /** How often /events pushes the figures, in ms (default 1000). */
  pushIntervalMs?: number;
}

/** HTTP connections served at once: more are closed at once (a scraper and a few browsers need a handful). */
const MAX_HTTP_CONNECTIONS = 64;
/** The longest a request may take to arrive (a slow sender holds nothing longer). */
const REQUEST_TIMEOUT_MS = 5000;
const DEFAULT_PUSH_INTERVAL_MS = 1000;

const SECURITY_HEADERS = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  // The page loads its script from here and nothing from anywhere else.
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
};

export class MetricsEndpoint {
  private readonly sockets = new Set<Socket>();
  private readonly streams = new Set<ServerResponse>();
  private pushTimer: NodeJS.Timeout | undefined;
  private rendered: { state: MetricsState; text: string } | undefined;

  private constructor(
    private readonly http: Server,
    private readonly metrics: ProxyMetrics,
    readonly secure: boolean,
    private readonly pushIntervalMs: number,
  ) {}

  /** Listens on `options.listen`; INVALID_ARGUMENT for a non-loopback address without TLS or `insecure`. */
  static async start(metrics: ProxyMetrics, options: MetricsEndpointOptions): Promise<MetricsEndpoint> {
    const { host, port } = parseAddress(options.listen);
    if (!isLoopback(host) && !options.tls && !options.insecure) {
      throw errors.invalidArgument(
        `serving metrics on ${options.listen} would show the proxy's figures to anyone who can reach it, in clear; ` +
          'listen on 127.0.0.1, give --tls-cert and --tls-key, or --metrics-insecure to accept that',
      );
    }
    const http = options.tls ? createHttpsServer({ cert: options.tls.cert, key: options.tls.key }) : createHttpServer();
    const endpoint = new MetricsEndpoint(
      http,
      metrics,
      options.tls !== undefined,
      options.pushIntervalMs ?? DEFAULT_PUSH_INTERVAL_MS,
    );
    http.maxHeadersCount = 32;
    http.headersTimeout = REQUEST_TIMEOUT_MS;
    http.requestTimeout = REQUEST_TIMEOUT_MS;
    http.keepAliveTimeout = REQUEST_TIMEOUT_MS;
    http.maxConnections = MAX_HTTP_CONNECTIONS;
    http.on('connection', (socket: Socket) => {
      endpoint.sockets.add(socket);
      socket.once('close', () => endpoint.sockets.delete(socket));
    });
    http.on('request', (request: IncomingMessage, response: ServerResponse) => endpoint.handle(request, response));
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(port, host, () => {
        http.off('error', reject);
        resolve();
      });
    });
    return endpoint;
  }

  /** Where it listens: `http://host:port` (or https). */
  get url(): string {
    const address = this.http.address() as AddressInfo;
    return `${this.secure ? 'https' : 'http'}://${formatAddress({ host: address.address, port: address.port })}`;
  }

  private handle(request: IncomingMessage, response: ServerResponse): void {
    const path = (request.url ?? '/').split('?')[0];
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      return this.send(response, 405, 'text/plain; charset=utf-8', 'read-only: GET or HEAD\n', { allow: 'GET, HEAD' });
    }
    switch (path) {
      case '/metrics':
        return this.send(response, 200, PROMETHEUS_CONTENT_TYPE, this.exposition());
      case '/healthz':
        return this.send(response, 200, 'text/plain; charset=utf-8', 'ok\n');
      case '/readyz': {
        const { ready, reasons } = this.metrics.readiness();
        return this.send(
          response,
          ready ? 200 : 503,
          'text/plain; charset=utf-8',
          ready ? 'ready\n' : `not ready: ${reasons.join('; ')}\n`,
        );
      }
      case '/state':
        return this.send(response, 200, 'application/json', JSON.stringify(this.metrics.state()));
      case '/events':
        return this.stream(request, response);
      case '/':
      case '/index.html':
        return this.send(response, 200, 'text/html; charset=utf-8', dashboardPage(this.metrics.state()));
      case '/favicon.ico':
        return this.send(response, 204, 'image/x-icon', '');
      case '/dashboard.js':
        return this.send(response, 200, 'text/javascript; charset=utf-8', DASHBOARD_SCRIPT);
      default:
        return this.send(
          response,
          404,
          'text/plain; charset=utf-8',
          'not found: try /, /metrics, /healthz or /readyz\n',
        );
    }
  }

  /** /metrics's text, made once per snapshot (readers in a flood share it as they share the snapshot). */
  private exposition(): string {
    const state = this.metrics.state();
    if (this.rendered?.state !== state) this.rendered = { state, text: formatPrometheus(state) };
    return this.rendered.text;
  }

  private send(
    response: ServerResponse,
    status: number,
    type: string,
    body: string,
    headers: Record<string, string> = {},
  ): void {
    response.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, ...headers });
    response.end(response.req.method === 'HEAD' ? undefined : body);
  }

  /** Server-sent events: the figures now, then each push interval, until the reader leaves. */
  private stream(request: IncomingMessage, response: ServerResponse): void {
    response.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream', connection: 'keep-alive' });
    // An event stream outlives the request timeout: it is one long response.
    request.socket.setTimeout(0);
    this.streams.add(response);
    response.write(`retry: 2000\ndata: ${JSON.stringify(this.metrics.state())}\n\n`);
    response.once('close', () => this.streams.delete(response));
    this.pushTimer ??= setInterval(() => this.push(), this.pushIntervalMs);
    this.pushTimer.unref();
  }

  private push(): void {
    if (this.streams.size === 0) {
      clearInterval(this.pushTimer);
      this.pushTimer = undefined;
      return;
    }
    const data = `data: ${JSON.stringify(this.metrics.state())}\n\n`;
    // A reader that does not keep up is dropped rather than buffered for.
    for (const stream of this.streams) if (!stream.write(data) && stream.writableLength > 1024 * 1024) stream.destroy();
  }

  /** Stops listening and closes every connection, event streams included. */
  async close(): Promise<void> {
    clearInterval(this.pushTimer);
    for (const stream of this.streams) stream.end();
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }
}
