/** `offload proxy`: serves this machine's devices to remote clients until stopped. */
import { parseArgs } from 'node:util';
import { launchTimeoutFromEnv } from '../api/runtime.js';
import { formatBytes, parseBytes, parseCount, parseMilliseconds } from '../units.js';
import { collectGarbage } from '../plugins/host/garbage.js';
import { ProxyServer } from '../proxy/server.js';
import { LOG_FORMATS, LOG_LEVELS, ProxyLog, type LogFormat, type LogLevel } from '../proxy/log.js';
import { ProxyMetrics } from '../proxy/metrics.js';
import { MetricsEndpoint, type MetricsEndpointOptions } from '../proxy/metrics-http.js';
import { readPem, tlsFromEnv } from '../transport/tls-files.js';
import { defaultToken, isLocalOnly } from '../transport/connect.js';
import { usageError, wrapHelp } from './format.js';
import { readTenants, readToken } from './token.js';

export const summary = "Serve this machine's devices to remote programs (a proxy)";

const HELP = wrapHelp(`Usage: offload proxy --listen <address> [--token-file <file>] [--tenants <file>]
       offload proxy --mpi          (as ranks of an mpirun job)

${summary}. Clients name it in
Offload.init({ proxies: ['host:port'], token }) or OFFLOAD_PROXIES / OFFLOAD_TOKEN.
It runs until SIGINT or SIGTERM, then frees everything and exits (within 10 s,
whatever its devices are doing: past that it exits with status 1). Each client works
in a context of its own (its own device memory, images, buffers and queues), freed
when it leaves, however it leaves. SIGUSR2 prints what the proxy holds as a line
'stats {json}' (sessions, queues, buffers, images, per-device counts, RSS).

Options:
  --listen <address>    Address to listen on: host:port (TCP), ws://host:port or
                        wss://host:port (the same protocol over WebSocket, for
                        pages and programs; wss:// with --tls-cert and --tls-key;
                        the token goes in the first frame, never in the URL, and
                        every limit below holds as over TCP). Port 0: any free
                        port; the chosen address is printed as 'listening on ...'
  --allow-origin <o>    A page origin (scheme://host[:port], as the browser sends
                        it) that may use a ws:// or wss:// proxy; repeat for more,
                        * for any. Other pages are refused (HTTP 403) before their
                        first frame. Default: none (only programs, which send no
                        Origin, connect)
  --token-file <file>   File holding the shared secret, private (chmod 600) and at
                        least 16 bytes (default: OFFLOAD_TOKEN, unless --tenants)
  --tenants <file>      Named tokens, each a tenant: a private file (chmod 600) of
                        lines name:token (tokens at least 16 bytes, all distinct;
                        # comments). The --quota-* limits bound what each tenant's
                        connections hold together; a --token-file token is one more,
                        unnamed, tenant
  --tls-cert <file>     Serve over TLS with this certificate (PEM), with --tls-key;
                        clients then name the proxy tls://host:port and trust its
                        CA ({ tls: { ca } } or OFFLOAD_TLS_CA)
  --tls-key <file>      The private key of --tls-cert (PEM)
  --tls-ca <file>       The CAs to trust for links to tls:// peers (default: the system's)
  --insecure            Listen on a non-loopback address without TLS (token and data in
                        clear on the network); refused without it
  --launch-timeout <ms> The longest any client's kernel launch (or rectangle copy) may
                        run; past it the launch fails with TIMEOUT and the device goes
                        on (default: OFFLOAD_LAUNCH_TIMEOUT, or 120000; 0: no limit)
  --max-connections <n> Connections served at once (default 256, fitted to the file
                        limit: at most (ulimit -n - 64) / 2); a quarter of them at most
                        may be logging in, the oldest of those is dropped first, and
                        never for a client that has logged in
  --login-timeout <ms>  How long a new connection has to log in (default 10000)
  --peer-timeout <ms>   A client that sends nothing (not even its heartbeat) this long
                        is gone, and its session ends (default OFFLOAD_PEER_TIMEOUT or 60000)
  --peers <list>        Proxies this one may link to for a client's proxy-to-proxy
                        copies (host:port,...; 'any' for every address). Default: none,
                        so such copies go through the client; MPI ranks of the same job
                        always may. A link logs in with a grant that lets it write into
                        the one buffer it copies to, and nothing else.
  Quotas, per tenant (token) over all its connections (over one: OUT_OF_MEMORY):
  --quota-memory <size> device memory allocated, e.g. 512M (default: the devices')
  --quota-buffers <n>   live buffers (default 65536)
  --quota-queues <n>    queues (default 4096)
  --quota-images <n>    registered images (default 256)
  --quota-image-bytes <size> bytes of those images (default 256M)
  --quota-pending <size> data held for requests not yet done (default 256M)
  --proxy-memory <size> The proxy's own memory all clients together may make it hold
                        (images, data in flight, records of buffers and queues; default:
                        half the JS heap limit, at most a quarter of the machine's memory)
  --mpi                 Serve the application ranks of this MPI job instead, e.g.
                        mpirun -np 2 offload proxy --mpi : -np 1 node app.js
                        (exits when every application rank has finished)
  Operating it:
  --metrics <host:port> Serve GET /metrics (Prometheus), /healthz, /readyz and a live
                        dashboard at / over HTTP there (port 0: any free port; printed
                        as 'metrics on <url>'); loopback only (plain HTTP) unless
                        --tls-cert (then HTTPS with that certificate) or --metrics-insecure
                        (plain HTTP anywhere). Read-only, no token: it never shows a token
                        or a buffer's bytes, and clients by number only
  --metrics-names       Show clients' addresses and refusals' messages there too
  --metrics-insecure    Serve metrics on a non-loopback address without TLS
  --log-format <f>      human (default) or json: one JSON object per line on stderr
                        for each connection, login, refusal (with its reason), session
                        end (with what it held), device lost, and shutdown
  --log-level <l>       debug, info, warn or error (default: info with json; error with
                        human, so that the default output stays as it was)
  --exit-with-parent    Also stop (as on SIGTERM) when standard input closes: the
                        parent that started the proxy with a pipe there has ended,
                        by whatever signal (launch, demo, bench and the tests do this)
  -h, --help            Show this help`);

export async function run(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      listen: { type: 'string' },
      'allow-origin': { type: 'string', multiple: true },
      'token-file': { type: 'string' },
      tenants: { type: 'string' },
      'launch-timeout': { type: 'string' },
      'max-connections': { type: 'string' },
      'login-timeout': { type: 'string' },
      'peer-timeout': { type: 'string' },
      peers: { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      'tls-ca': { type: 'string' },
      insecure: { type: 'boolean' },
      'quota-memory': { type: 'string' },
      'quota-buffers': { type: 'string' },
      'quota-queues': { type: 'string' },
      'quota-images': { type: 'string' },
      'quota-image-bytes': { type: 'string' },
      'proxy-memory': { type: 'string' },
      'quota-pending': { type: 'string' },
      mpi: { type: 'boolean' },
      'exit-with-parent': { type: 'boolean' },
      metrics: { type: 'string' },
      'metrics-names': { type: 'boolean' },
      'metrics-insecure': { type: 'boolean' },
      'log-format': { type: 'string' },
      'log-level': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const limit = values['launch-timeout'];
  const launchTimeoutMs =
    limit === undefined
      ? launchTimeoutFromEnv()
      : limit.trim() === '0'
        ? 0
        : parseMilliseconds(limit, '--launch-timeout');
  const option = <T>(name: keyof typeof values, parse: (text: string, name: string) => T): T | undefined => {
    const text = values[name];
    return typeof text === 'string' ? parse(text, `--${name}`) : undefined;
  };
  const count = (text: string, name: string) => parseCount(text, name, 1, 2 ** 31);
  const format = values['log-format'] ?? 'human';
  if (!(LOG_FORMATS as readonly string[]).includes(format))
    return usageError('proxy', `--log-format must be one of ${LOG_FORMATS.join(', ')}, got '${format}'`);
  const level = values['log-level'];
  if (level !== undefined && !(LOG_LEVELS as readonly string[]).includes(level))
    return usageError('proxy', `--log-level must be one of ${LOG_LEVELS.join(', ')}, got '${level}'`);
  const log = new ProxyLog({ format: format as LogFormat, level: level as LogLevel | undefined });
  const metrics = new ProxyMetrics({ names: values['metrics-names'] === true, log });
  const limits = {
    metrics,
    launchTimeoutMs,
    maxConnections: option('max-connections', count),
    loginTimeoutMs: option('login-timeout', parseMilliseconds),
    peerTimeoutMs: option('peer-timeout', parseMilliseconds),
    proxyMemoryBytes: option('proxy-memory', parseBytes),
    peers: values.peers === 'any' ? ('any' as const) : values.peers?.split(',').filter((peer) => peer !== ''),
    quotas: Object.fromEntries(
      Object.entries({
        memoryBytes: option('quota-memory', parseBytes),
        buffers: option('quota-buffers', count),
        queues: option('quota-queues', count),
        images: option('quota-images', count),
        imageBytes: option('quota-image-bytes', parseBytes),
        pendingBytes: option('quota-pending', parseBytes),
      }).filter(([, value]) => value !== undefined),
    ),
  };
  if (values.mpi) {
    if (values.listen !== undefined) return usageError('proxy', '--mpi and --listen exclude each other');
    if (values.tenants !== undefined)
      return usageError('proxy', "--mpi and --tenants exclude each other (a job's ranks share its one token)");
    const token = (await readToken(values['token-file'])) ?? defaultToken('mpi')!;
    const server = await ProxyServer.start({ listen: 'mpi', token, ...limits });
    const endpoint = await serveMetrics(server, values.metrics, { insecure: values['metrics-insecure'] });
    announce(server, endpoint);
    await Promise.race([server.finished, signalled()]);
    await stop(server, endpoint);
    return 0;
  }
  if (values.listen === undefined) return usageError('proxy', 'the address is required: --listen <host:port>');
  const tenants = values.tenants === undefined ? undefined : await readTenants(values.tenants);
  // With --tenants, only an explicit --token-file adds the unnamed tenant (not OFFLOAD_TOKEN from the environment).
  const token = tenants && values['token-file'] === undefined ? undefined : await readToken(values['token-file']);
  if (token === undefined && tenants === undefined)
    return usageError('proxy', 'a token is required: --token-file <file>, --tenants <file> or OFFLOAD_TOKEN');
  if ((values['tls-cert'] === undefined) !== (values['tls-key'] === undefined))
    return usageError('proxy', '--tls-cert and --tls-key go together');
  const tls = values['tls-cert']
    ? {
        cert: await readPem(values['tls-cert'], 'the certificate file'),
        key: await readPem(values['tls-key']!, 'the key file'),
      }
    : undefined;
  const peerTls = values['tls-ca'] ? { ca: await readPem(values['tls-ca'], 'the CA file') } : await tlsFromEnv();
  if (!tls && !isLocalOnly(values.listen)) {
    if (!values.insecure) {
      return usageError(
        'proxy',
        `listening on ${values.listen} without TLS would send the token and every byte in clear over the network; ` +
          'give --tls-cert and --tls-key, or --insecure to accept that',
      );
    }
    console.error(
      `offload proxy: listening on ${values.listen} WITHOUT TLS (--insecure): the token and all data cross the network in clear`,
    );
  }

  if (values.metrics !== undefined && !tls && !values['metrics-insecure'] && !isLocalOnly(values.metrics)) {
    return usageError(
      'proxy',
      `serving metrics on ${values.metrics} would show the proxy's figures to anyone who can reach it, in clear; ` +
        'give --tls-cert and --tls-key, or --metrics-insecure to accept that',
    );
  }

  const allowOrigins = values['allow-origin'];
  const server = await ProxyServer.start({
    listen: values.listen,
    token,
    tenants,
    tls,
    peerTls,
    allowOrigins,
    ...limits,
  });
  // Loopback: plain HTTP (nothing outside sees it). Elsewhere HTTPS with the proxy's certificate, unless --metrics-insecure.
  const metricsTls =
    values.metrics === undefined || isLocalOnly(values.metrics) || values['metrics-insecure'] ? undefined : tls;
  const endpoint = await serveMetrics(server, values.metrics, {
    tls: metricsTls,
    insecure: values['metrics-insecure'],
  });
  announce(server, endpoint);
  await signalled(values['exit-with-parent'] === true);
  await stop(server, endpoint);
  return 0;
}

/** Starts the metrics endpoint when --metrics names an address (the proxy is shut down if it cannot listen). */
async function serveMetrics(
  server: ProxyServer,
  listen: string | undefined,
  options: Omit<MetricsEndpointOptions, 'listen'>,
): Promise<MetricsEndpoint | undefined> {
  if (listen === undefined) return undefined;
  try {
    return await MetricsEndpoint.start(server.metrics, { listen, ...options });
  } catch (error) {
    await server.shutdown();
    throw error;
  }
}

/**
 * How long a stopping proxy waits for its runtime's shutdown (whose own grace for running work is
 * 5 s) before it exits anyway: a device that does not stop (a GPU in an endless shader) must not
 * keep a proxy alive past SIGTERM.
 */
const STOP_GRACE_MS = 10_000;

async function stop(server: ProxyServer, endpoint: MetricsEndpoint | undefined): Promise<void> {
  const { log } = server.metrics;
  log?.event('info', 'shutdown', `shutting down (${server.clients} clients connected)`, { clients: server.clients });
  await endpoint?.close();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), STOP_GRACE_MS);
  });
  const how = await Promise.race([server.shutdown().then(() => 'done' as const), late]);
  clearTimeout(timer);
  log?.event(
    how === 'late' ? 'error' : 'info',
    'stopped',
    how === 'late' ? 'devices did not stop in time' : 'stopped',
    {
      clean: how !== 'late',
    },
  );
  if (how === 'late') {
    console.error(`offload proxy: its devices did not stop within ${STOP_GRACE_MS} ms of the signal; exiting anyway`);
    process.exit(1);
  }
}

/** `kill -USR2 <pid>` prints what the proxy holds (after a garbage collection) as one line. */
function reportOnSignal(server: ProxyServer): void {
  process.on('SIGUSR2', () => {
    // The event loop's delay is taken first: the collection's own pause is not a client's doing.
    const delay = server.takeEventLoopDelay();
    void collectGarbage().then(() => console.log(`stats ${JSON.stringify(server.stats(delay))}`));
  });
}

function announce(server: ProxyServer, endpoint: MetricsEndpoint | undefined): void {
  reportOnSignal(server);
  for (const device of server.runtime.devices) {
    const { info } = device;
    console.log(
      `serving device ${device.id}: ${info.name} (${info.plugin}, ${info.kind}, ${formatBytes(info.memoryBytes)}, ${info.imageFormats.join('/')})`,
    );
  }
  if (endpoint) console.log(`metrics on ${endpoint.url}`);
  console.log(`listening on ${server.address}`);
  server.metrics.log?.event('info', 'listening', `listening on ${server.address}`, {
    address: server.address,
    devices: server.runtime.devices.length,
    ...(endpoint ? { metrics: endpoint.url } : {}),
  });
}

/** Resolves on SIGINT or SIGTERM, or (`withParent`) when standard input ends or fails. */
function signalled(withParent = false): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = () => {
      // The pipe read from must not keep the process alive once the proxy has shut down.
      if (withParent) process.stdin.destroy();
      resolve();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    if (withParent) {
      process.stdin.once('end', stop);
      process.stdin.once('close', stop);
      process.stdin.once('error', stop);
      process.stdin.resume();
    }
  });
}
