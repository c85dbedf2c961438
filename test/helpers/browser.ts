/**
 * Pages in a real browser, for tests: Debian's Chromium (/usr/bin/chromium, installed by
 * .ci/run) driven headless by playwright-core, which never downloads a browser; a page program
 * bundled from the built package as a user's bundler would; and a small HTTP server on
 * 127.0.0.1 that serves it with the cross-origin isolation headers.
 */
import { execFile } from 'node:child_process';
import { access, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { build, type Metafile, type Plugin } from 'esbuild';
import { chromium, type Browser } from 'playwright-core';

const ROOT = path.join(import.meta.dirname, '..', '..');
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Why a browser test skips, or undefined when it runs: only when Chromium is missing and
 * OFFLOAD_REQUIRE_BROWSER is not 1 (CI sets it, so there the test fails instead of skipping).
 */
export async function browserSkip(): Promise<string | undefined> {
  if (process.env.OFFLOAD_REQUIRE_BROWSER === '1') return undefined;
  return access(CHROMIUM).then(
    () => undefined,
    () => `${CHROMIUM} is missing (apt-get install chromium; OFFLOAD_REQUIRE_BROWSER=1 makes this a failure)`,
  );
}

/** Headless Chromium, WebGPU on (its software adapter where there is no GPU); playwright makes a fresh profile. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: 60_000,
    args: [
      '--no-sandbox',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--enable-unsafe-webgpu',
    ],
  });
}

/** The page program, as a user writes it: every device the page finds runs saxpy; the results go into #out. */
export const PAGE_PROGRAM = `import { Offload, map } from 'offload-ts';

const params = new URLSearchParams(location.search);
const rt = await Offload.init({
  webgpu: { fallback: true },
  proxies: params.getAll('proxy'),
  token: params.get('token') ?? undefined,
});
const lib = await rt.register(params.get('bundle') ?? 'kernels.offload');
const results = [];
for (const device of rt.devices) {
  const saxpy = await device.kernel(lib, 'saxpy');
  const x = Float32Array.from({ length: 64 }, (_, i) => i);
  const y = Float32Array.from({ length: 64 }, (_, i) => i / 4);
  await rt.target(device, saxpy, { teams: 4 }, [64, 2.5, map.to(x), map.tofrom(y)]);
  results.push({ plugin: device.info.plugin, y: Array.from(y) });
}
await rt.shutdown();
document.getElementById('out').textContent = JSON.stringify(results);
`;

/** Bundles `program` as a page's bundler would: the package through its browser condition, nothing else configured. */
/** Builds the package (dist/) unless it is there: a page loads the built modules, as a user's would. */
export async function ensureBuilt(): Promise<void> {
  try {
    await access(path.join(ROOT, 'dist/browser.js'));
  } catch {
    await promisify(execFile)(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', '--silent', 'build'], {
      cwd: ROOT,
    });
  }
}

export async function bundlePage(dir: string, program = PAGE_PROGRAM): Promise<{ code: string; metafile: Metafile }> {
  await ensureBuilt();
  await mkdir(path.join(dir, 'node_modules'), { recursive: true });
  await symlink(ROOT, path.join(dir, 'node_modules', 'offload-ts')).catch(() => {});
  await writeFile(path.join(dir, 'main.js'), program);
  const result = await build({
    entryPoints: [path.join(dir, 'main.js')],
    absWorkingDir: dir,
    bundle: true,
    platform: 'browser',
    format: 'esm',
    target: 'es2022',
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
  return { code: result.outputFiles[0]!.text, metafile: result.metafile };
}

/**
 * The page versions of src/, as a bundler picks them for the built package: package.json's
 * "browser" field, its dist/ paths read as the src/ files they are built from (X.js -> X.ts);
 * src/index.ts, imported from outside src/, is the package's browser entry, src/browser.ts.
 */
function pageSources(): Plugin {
  return {
    name: 'offload-page-sources',
    async setup(build) {
      const pkg = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
        browser: Record<string, string>;
      };
      const swaps = new Map<string, string>();
      const source = (dist: string): string =>
        path.join(ROOT, dist.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts'));
      for (const [from, to] of Object.entries(pkg.browser)) swaps.set(source(from), source(to));
      swaps.set(path.join(ROOT, 'src/index.ts'), path.join(ROOT, 'src/browser.ts'));
      build.onResolve({ filter: /^\.\.?\// }, (args) => {
        const resolved = path.resolve(args.resolveDir, args.path).replace(/\.js$/, '.ts');
        const swap = swaps.get(resolved);
        if (!swap || swap === args.importer) return undefined;
        // src/browser.ts imports src/index.ts itself; only the way in from outside is swapped.
        if (resolved.endsWith('src/index.ts') && args.importer.startsWith(path.join(ROOT, 'src'))) return undefined;
        return { path: swap };
      });
    },
  };
}

/**
 * Bundles a test's page program (`entry`, TypeScript) from the sources, for a page: src/ as the
 * package's browser build has it, and node:test and node:assert/strict replaced by the page
 * shims of page-node-test.ts and page-node-assert.ts, so a suite written for node:test runs in
 * the page unchanged.
 */
export async function bundleTestPage(entry: string): Promise<string> {
  return bundleFromSources(entry, {
    'node:test': path.join(ROOT, 'test/helpers/page-node-test.ts'),
    'node:assert/strict': path.join(ROOT, 'test/helpers/page-node-assert.ts'),
  });
}

/** The host device's page worker built from src/ as bundleTestPage builds the page: serve it as /offload-host-worker.js. */
export function bundleTestHostWorker(): Promise<string> {
  return bundleFromSources(path.join(ROOT, 'src/plugins/host/offload-host-worker.ts'));
}

async function bundleFromSources(entry: string, alias: Record<string, string> = {}): Promise<string> {
  const result = await build({
    entryPoints: [entry],
    absWorkingDir: ROOT,
    bundle: true,
    platform: 'browser',
    format: 'esm',
    target: 'es2022',
    write: false,
    logLevel: 'silent',
    alias,
    plugins: [pageSources()],
  });
  return result.outputFiles[0]!.text;
}

/** What `servePage` serves: a path's body and content type. */
export type PageFiles = Record<string, { body: string | Uint8Array; type: string }>;

/** Headers of a cross-origin isolated page (SharedArrayBuffer, shared WebAssembly.Memory). */
export const ISOLATION_HEADERS = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
  'Cross-Origin-Resource-Policy': 'same-origin',
};

/** Serves `files` on 127.0.0.1 (any free port), each with `headers`; 404 for anything else. */
export async function servePage(
  files: PageFiles,
  headers: Record<string, string> = ISOLATION_HEADERS,
): Promise<{ origin: string; close(): Promise<void> }> {
  const server = http.createServer((request, response) => {
    const file = files[new URL(request.url ?? '/', 'http://page').pathname];
    if (!file) {
      response.writeHead(404, headers).end('not found');
      return;
    }
    response.writeHead(200, { ...headers, 'Content-Type': file.type, 'Cache-Control': 'no-store' }).end(file.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * Bundles the host device's page worker as a page's bundler would, beside the page's bundle:
 * `offload-ts/host-worker` as a second entry point named offload-host-worker.js (the page's
 * host device starts its workers from that name, next to the bundle). Call after bundlePage.
 */
export async function bundleHostWorker(dir: string): Promise<string> {
  const result = await build({
    entryPoints: { 'offload-host-worker': 'offload-ts/host-worker' },
    absWorkingDir: dir,
    bundle: true,
    platform: 'browser',
    format: 'esm',
    target: 'es2022',
    write: false,
    outdir: dir,
    logLevel: 'silent',
  });
  return result.outputFiles[0]!.text;
}
