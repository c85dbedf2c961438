/**
 * `offload serve`: serves the demo page (apps/demo-page.ts) with the headers that make it
 * cross-origin isolated (COOP/COEP, so a page may share memory with its workers), and starts an
 * `offload proxy` over WebSocket beside it, whose only allowed origin is the page's. The page
 * runs the demo's kernels on every device it finds and shows `offload demo`'s table.
 *
 * No bundler: the package's built ES modules (dist/) are served as they are, with package.json's
 * "browser" field applied as a page's bundler applies it (a request for a Node module gets its
 * page version). What a page may fetch is the .js files under dist/, config.json and the bundle;
 * nothing else of the machine.
 */
import { randomBytes } from 'node:crypto';
import { access, readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { DemoPageConfig } from '../apps/demo-page.js';
import { spawnProxy, type SpawnedProxy } from '../proxy/spawn.js';
import { usageError, wrapHelp } from './format.js';
import { cachedBundle } from './kernel-cache.js';

export const summary = "Serve a page that runs the demo on the browser's devices and a proxy over WebSocket";

const DEFAULT_PORT = 8080;
const DEFAULT_SIZE = 2 ** 20;
const MAX_SIZE = 2 ** 26; // a page holds its vectors three times over; more is no demo

const HELP = wrapHelp(`Usage: offload serve [--port N] [--host H] [--size N] [--no-proxy]

${summary}:
a page, served with the cross-origin isolation headers (COOP/COEP), that runs saxpy, a dot
product, mandelbrot and a tiled transpose on every device the page finds: the host device on
Web Workers, WebGPU through navigator.gpu, and a local 'offload proxy' started here over
ws:// (its only allowed origin is the page's), with 'offload demo''s table and a chart of the
times. It runs until SIGINT or SIGTERM.

Options:
  --port <N>     The page's port (default ${DEFAULT_PORT}; 0: any free port)
  --host <H>     The address to listen on (default 127.0.0.1)
  --size <N>     Vector length of saxpy and the dot product (default ${DEFAULT_SIZE})
  --no-proxy     Start no proxy: the page's own devices only
  -h, --help     Show this help`);

// src/cli and dist/cli sit at the same depth below the package root.
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const KERNELS_SOURCE = path.join(ROOT, 'examples', 'kernels.ts');

/** The isolation headers, on every answer: a page without them has no SharedArrayBuffer. */
const HEADERS = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'X-Content-Type-Options': 'nosniff',
  'Cache-Control': 'no-store',
};

const PAGE = `<!doctype html>
<html lang="en">
<meta charset="utf-8">
<title>offload-ts demo</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #212529; }
  h1 { font-size: 20px; margin: 0 0 4px; }
  #devices, #status { color: #495057; margin: 4px 0 12px; }
  table { border-collapse: collapse; margin: 8px 0 16px; }
  th, td { text-align: left; padding: 4px 12px 4px 0; border-bottom: 1px solid #e9ecef; white-space: nowrap; }
  td:nth-child(5), td:nth-child(6) { text-align: right; font-variant-numeric: tabular-nums; }
  td.ok { color: #2b8a3e; } td.mismatch { color: #c92a2a; font-weight: bold; }
</style>
<h1>offload-ts in a page</h1>
<div id="devices"></div>
<div id="status">loading…</div>
<table>
  <thead><tr><th>kernel</th><th>device</th><th>grid</th><th>problem</th><th>launch</th><th>round trip</th><th>result</th></tr></thead>
  <tbody id="rows"></tbody>
</table>
<div style="color:#495057">launch time of each kernel on each device (log scale)</div>
<div id="chart-box"></div>
<p id="trace-box"></p>
<script type="module" src="/offload/apps/demo-page.js"></script>
</html>
`;

/** The page versions of the package's modules: package.json's "browser" field, as paths under dist/. */
async function browserSwaps(): Promise<Map<string, string>> {
  const pkg = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
    browser?: Record<string, string>;
  };
  const swaps = new Map<string, string>();
  for (const [from, to] of Object.entries(pkg.browser ?? {})) swaps.set(path.join(ROOT, from), path.join(ROOT, to));
  return swaps;
}

export interface DemoServer {
  url: string;
  proxy: SpawnedProxy | undefined;
  close(): Promise<void>;
}

/** Starts the page's server on `host`:`port`, and the proxy unless `proxy` is false. */
export async function startDemoServer(options: {
  host: string;
  port: number;
  size: number;
  proxy: boolean;
}): Promise<DemoServer> {
  const dist = path.join(ROOT, 'dist');
  try {
    await access(path.join(dist, 'apps', 'demo-page.js'));
  } catch {
    throw new Error(`${dist} has no built page (dist/apps/demo-page.js): run 'npm run build' first`);
  }
  const bundle = await cachedBundle([KERNELS_SOURCE], { label: 'offload-demo', name: 'kernels' });
  const kernels = await readFile(bundle.path);
  const swaps = await browserSwaps();
  const config: DemoPageConfig = { size: options.size };

  const server = http.createServer((request, response) => {
    const answer = (status: number, type: string, body: string | Uint8Array): void => {
      response.writeHead(status, { ...HEADERS, 'Content-Type': type }).end(body);
    };
    let pathname: string;
    try {
      pathname = decodeURIComponent(new URL(request.url ?? '/', 'http://page').pathname);
    } catch {
      return answer(400, 'text/plain', 'bad URL');
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') return answer(405, 'text/plain', 'GET only');
    if (pathname === '/') return answer(200, 'text/html; charset=utf-8', PAGE);
    if (pathname === '/config.json') return answer(200, 'application/json', JSON.stringify(config));
    if (pathname === '/kernels.offload') return answer(200, 'application/octet-stream', kernels);
    if (pathname.startsWith('/offload/') && pathname.endsWith('.js')) {
      const file = path.join(dist, pathname.slice('/offload/'.length));
      // Only what lies under dist/: '..' and absolute paths lead nowhere else.
      if (!file.startsWith(dist + path.sep)) return answer(404, 'text/plain', 'not found');
      readFile(swaps.get(file) ?? file).then(
        (body) => answer(200, 'text/javascript; charset=utf-8', body),
        () => answer(404, 'text/plain', 'not found'),
      );
      return;
    }
    answer(404, 'text/plain', 'not found');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `http://${shownHost}:${port}/`;
  let proxy: SpawnedProxy | undefined;
  try {
    if (options.proxy) {
      const token = randomBytes(24).toString('hex');
      // The page reaches the proxy on the host it was loaded from; its origin is one of these.
      const origins = new Set([new URL(url).origin, `http://localhost:${port}`, `http://127.0.0.1:${port}`]);
      proxy = await spawnProxy({
        cli: [...process.execArgv, process.argv[1]!],
        token,
        listen: `ws://${shownHost}:0`,
        inheritStderr: true,
        args: [...origins].flatMap((origin) => ['--allow-origin', origin]),
        env: { ...process.env, OFFLOAD_PROXIES: '' },
      });
      config.proxyPort = Number(new URL(proxy.address).port);
      config.token = token;
    }
  } catch (error) {
    server.close();
    throw error;
  }
  return {
    url,
    proxy,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await proxy?.stop();
    },
  };
}

export async function run(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      port: { type: 'string' },
      host: { type: 'string' },
      size: { type: 'string' },
      'no-proxy': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const port = values.port === undefined ? DEFAULT_PORT : Number(values.port);
  if (!/^\d+$/.test(values.port ?? '0') || port > 65535)
    return usageError('serve', `--port must be a port number from 0 to 65535, got '${values.port}'`);
  const size = values.size === undefined ? DEFAULT_SIZE : Number(values.size);
  if (!/^\d+$/.test(values.size ?? '1') || size < 1 || size > MAX_SIZE)
    return usageError('serve', `--size must be an integer from 1 to ${MAX_SIZE}, got '${values.size}'`);
  const host = values.host ?? '127.0.0.1';
  if (host === '' || /[/\s]/.test(host))
    return usageError('serve', `--host must be an address or a host name to listen on, got '${host}'`);

  const served = await startDemoServer({ host, port, size, proxy: values['no-proxy'] !== true });
  if (served.proxy) console.log(`proxy    ${served.proxy.address} (a local 'offload proxy' over WebSocket)`);
  console.log(`serving ${served.url}`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await served.close();
  return 0;
}
