// A page in headless Chromium (Debian's, driven by playwright-core): the 20-line page program of
// test/helpers/browser.ts, bundled from the built package, served from 127.0.0.1 with the
// cross-origin isolation headers, runs saxpy on every device the page finds, the host device on
// Web Workers (its worker bundled beside the page), WebGPU through navigator.gpu (Chromium's software adapter) and a proxy over ws:// started here, its bundle
// registered by URL; the results are the same as the same program's in Node. A page whose
// origin the proxy does not allow gets no device from it.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { map, Offload } from '../src/index.js';
import { ProxyServer } from '../src/proxy/server.js';
import { wrapperSource } from '../src/build/wrappers.js';
import { decodeBundle } from '../src/image/bundle.js';
import { browserSkip, bundleHostWorker, bundlePage, launchChromium, servePage } from './helpers/browser.js';
import { fixtureBundle } from './helpers/fixtures.js';

const token = 'page-token-0123456789abcdef';

/** A page program that traces (trace: true) saxpy on every device and shows runtime.trace(), through a Blob as a download would. */
// A page program that launches through the typed wrapper `offload build` writes (kernels.js),
// which finds the bundle beside itself (new URL('./kernels.offload', import.meta.url)).
const WRAPPER_PROGRAM = `import { Offload, map } from 'offload-ts';
import { load } from './kernels.js';

const out = document.getElementById('out');
try {
  const rt = await Offload.init({ webgpu: { fallback: true } });
  const k = await load(rt);
  const results = [];
  for (const device of rt.devices) {
    const x = Float32Array.from({ length: 64 }, (_, i) => i);
    const y = Float32Array.from({ length: 64 }, (_, i) => i / 4);
    await k.saxpy(device, { teams: 4 }, 64, 2.5, map.to(x), map.tofrom(y));
    results.push({ plugin: device.info.plugin, y: Array.from(y) });
  }
  await rt.shutdown();
  out.textContent = JSON.stringify(results);
} catch (error) {
  out.textContent = JSON.stringify({ error: String(error) });
}
`;

const TRACE_PROGRAM = `import { Offload, map } from 'offload-ts';

const params = new URLSearchParams(location.search);
const out = document.getElementById('out');
try {
  const rt = await Offload.init({ webgpu: { fallback: true }, proxies: params.getAll('proxy'), token: params.get('token'), trace: true });
  const lib = await rt.register('kernels.offload');
  for (const device of rt.devices) {
    const x = new Float32Array(64);
    const y = new Float32Array(64);
    await rt.target(device, await device.kernel(lib, 'saxpy'), { teams: 2 }, [64, 2, map.to(x), map.tofrom(y)]);
  }
  const blob = new Blob([JSON.stringify(await rt.trace())], { type: 'application/json' });
  await rt.shutdown();
  out.textContent = await blob.text();
} catch (error) {
  out.textContent = JSON.stringify({ error: String(error) });
}
`;
const MiB = 1024 * 1024;

interface DeviceResult {
  plugin: string;
  y: number[];
}

/** The page program's loop, in Node: saxpy on every device, the same inputs. */
async function inNode(proxy: string, bundle: string): Promise<DeviceResult[]> {
  const rt = await Offload.init({ webgpu: { fallback: true }, proxies: [proxy], token });
  try {
    const lib = await rt.register(bundle);
    const results: DeviceResult[] = [];
    for (const device of rt.devices) {
      const saxpy = await device.kernel(lib, 'saxpy');
      const x = Float32Array.from({ length: 64 }, (_, i) => i);
      const y = Float32Array.from({ length: 64 }, (_, i) => i / 4);
      await rt.target(device, saxpy, { teams: 4 }, [64, 2.5, map.to(x), map.tofrom(y)]);
      results.push({ plugin: device.info.plugin, y: Array.from(y) });
    }
    return results;
  } finally {
    await rt.shutdown();
  }
}

const skip = await browserSkip();

describe('a page in headless Chromium', { timeout: 240_000, skip }, () => {
  let dir: string;
  let browser: Browser;
  let proxy: ProxyServer;
  let site: Awaited<ReturnType<typeof servePage>>;
  let bundlePath: string;
  let hostWorker: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'offload-page-'));
    bundlePath = await fixtureBundle();
    const [{ code }, kernels] = await Promise.all([bundlePage(dir), readFile(bundlePath)]);
    hostWorker = await bundleHostWorker(dir);
    site = await servePage({
      '/': {
        body: '<!doctype html><meta charset="utf-8"><pre id="out"></pre><script type="module" src="main.js"></script>',
        type: 'text/html',
      },
      '/main.js': { body: code, type: 'text/javascript' },
      '/offload-host-worker.js': { body: hostWorker, type: 'text/javascript' },
      '/kernels.offload': { body: kernels, type: 'application/octet-stream' },
    });
    proxy = await ProxyServer.start({
      listen: 'ws://127.0.0.1:0',
      token,
      allowOrigins: [site.origin],
      runtime: { host: { threads: 1, memoryBytes: 64 * MiB }, webgpu: false },
    });
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await proxy?.shutdown();
    await site?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Opens the page with `query`; the program's JSON output, or its error. */
  async function run(query: string): Promise<{ results?: DeviceResult[]; error?: string; isolated: boolean }> {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    try {
      await page.goto(`${site.origin}/?${query}`);
      const text: string | { error: string } = await Promise.race([
        page.waitForFunction(() => document.getElementById('out')?.textContent, undefined, { timeout: 90_000 }),
        new Promise<never>((_, reject) => page.on('pageerror', (error) => reject(error))),
      ]).then(
        async (handle) => String(await handle.jsonValue()),
        (error: Error) => ({ error: error.message }),
      );
      const isolated = await page.evaluate(() => crossOriginIsolated);
      if (typeof text !== 'string')
        return { error: text.error + (errors.length ? ` (${errors.join('; ')})` : ''), isolated };
      return { results: JSON.parse(text) as DeviceResult[], isolated };
    } finally {
      await page.close();
    }
  }

  it('runs saxpy on the host device, on WebGPU and on a proxy over ws://, the bundle fetched by URL, with the same results as Node', async () => {
    const query = new URLSearchParams({ proxy: proxy.address, token, bundle: 'kernels.offload' }).toString();
    const page = await run(query);
    assert.equal(page.error, undefined, page.error);
    assert.equal(page.isolated, true, 'served with COOP/COEP: cross-origin isolated');
    const plugins = page.results!.map((result) => result.plugin);
    assert.ok(plugins.includes('host'), `the host device on Web Workers: ${plugins.join(', ')}`);
    assert.ok(plugins.includes('webgpu'), `WebGPU through navigator.gpu: ${plugins.join(', ')}`);
    assert.ok(plugins.includes('remote'), `the proxy over WebSocket: ${plugins.join(', ')}`);
    const expected = Array.from({ length: 64 }, (_, i) => 2.5 * i + i / 4);
    for (const result of page.results!) assert.deepEqual(result.y, expected, `saxpy on ${result.plugin} in the page`);
    const node = await inNode(proxy.address, bundlePath);
    for (const result of page.results!)
      assert.deepEqual(
        result.y,
        node.find((other) => other.plugin === result.plugin)!.y,
        `the page's ${result.plugin} device answers as Node's`,
      );
  });

  it('launches through the typed wrapper offload build writes, which finds the bundle beside it by URL', async () => {
    const wrapperDir = await mkdtemp(path.join(os.tmpdir(), 'offload-page-wrapper-'));
    try {
      const bytes = await readFile(bundlePath);
      const wrapper = wrapperSource(decodeBundle(bytes).manifest, 'kernels.offload', ['kernels.ts']);
      await writeFile(path.join(wrapperDir, 'kernels.js'), wrapper);
      const { code } = await bundlePage(wrapperDir, WRAPPER_PROGRAM);
      const wrapped = await servePage({
        '/': {
          body: '<!doctype html><meta charset="utf-8"><pre id="out"></pre><script type="module" src="main.js"></script>',
          type: 'text/html',
        },
        '/main.js': { body: code, type: 'text/javascript' },
        '/offload-host-worker.js': { body: hostWorker, type: 'text/javascript' },
        '/kernels.offload': { body: bytes, type: 'application/octet-stream' },
      });
      const page = await browser.newPage();
      try {
        await page.goto(`${wrapped.origin}/`);
        const handle = await page.waitForFunction(() => document.getElementById('out')?.textContent, undefined, {
          timeout: 90_000,
        });
        const results = JSON.parse(String(await handle.jsonValue())) as DeviceResult[] | { error: string };
        assert.ok(Array.isArray(results), JSON.stringify(results));
        assert.deepEqual(
          results.map((result) => result.plugin),
          ['host', 'webgpu'],
        );
        const expected = Array.from({ length: 64 }, (_, i) => 2.5 * i + i / 4);
        for (const result of results)
          assert.deepEqual(result.y, expected, `saxpy through the wrapper on ${result.plugin}`);
      } finally {
        await page.close();
        await wrapped.close();
      }
    } finally {
      await rm(wrapperDir, { recursive: true, force: true });
    }
  });

  it('keeps a trace in the page (trace: true): runtime.trace() is a Chrome trace with spans of each device and of the proxy', async () => {
    const traceDir = await mkdtemp(path.join(os.tmpdir(), 'offload-page-trace-'));
    try {
      const { code } = await bundlePage(traceDir, TRACE_PROGRAM);
      const traced = await servePage({
        '/': {
          body: '<!doctype html><meta charset="utf-8"><pre id="out"></pre><script type="module" src="main.js"></script>',
          type: 'text/html',
        },
        '/main.js': { body: code, type: 'text/javascript' },
        '/offload-host-worker.js': { body: hostWorker, type: 'text/javascript' },
        '/kernels.offload': { body: await readFile(bundlePath), type: 'application/octet-stream' },
      });
      const allowed = await ProxyServer.start({
        listen: 'ws://127.0.0.1:0',
        token,
        allowOrigins: [traced.origin],
        runtime: { host: { threads: 1, memoryBytes: 16 * MiB }, webgpu: false },
      });
      const page = await browser.newPage();
      try {
        await page.goto(`${traced.origin}/?${new URLSearchParams({ proxy: allowed.address, token }).toString()}`);
        const handle = await page.waitForFunction(() => document.getElementById('out')?.textContent, undefined, {
          timeout: 90_000,
        });
        const text = String(await handle.jsonValue());
        const trace = JSON.parse(text) as {
          traceEvents: { name: string; ph: string; pid: number; dur?: number; args?: { name?: string } }[];
          displayTimeUnit: string;
          error?: string;
        };
        assert.equal(trace.error, undefined, trace.error);
        assert.equal(trace.displayTimeUnit, 'ms');
        const processes = new Map(
          trace.traceEvents
            .filter((event) => event.name === 'process_name')
            .map((event) => [event.pid, event.args?.name ?? '']),
        );
        const spans = trace.traceEvents.filter((event) => event.ph === 'X');
        const launched = (pid: number) => spans.some((span) => span.pid === pid && span.name === 'saxpy');
        const gpu = [...processes].find(([, name]) => /WebGPU/i.test(name));
        assert.ok(gpu && launched(gpu[0]), `a saxpy span on the WebGPU device: ${JSON.stringify([...processes])}`);
        const remote = [...processes].find(([pid, name]) => pid < 1000 && /remote|proxy|127\.0\.0\.1/i.test(name));
        assert.ok(
          remote && launched(remote[0]),
          `a saxpy span on the remote device: ${JSON.stringify([...processes])}`,
        );
        assert.ok(
          spans.some((span) => span.pid >= 1000 && span.name === 'saxpy'),
          "the proxy's own span of the launch, merged onto the page's clock",
        );
        assert.ok(
          spans.every((span) => typeof span.dur === 'number' && span.dur >= 0),
          'every span has its duration',
        );
      } finally {
        await page.close();
        await allowed.shutdown();
        await traced.close();
      }
    } finally {
      await rm(traceDir, { recursive: true, force: true });
    }
  });

  it("gets no device from a proxy that does not allow the page's origin, and says where it looked", async () => {
    const other = await ProxyServer.start({
      listen: 'ws://127.0.0.1:0',
      token,
      allowOrigins: ['https://elsewhere.example'],
      runtime: { host: { threads: 1, memoryBytes: 16 * MiB }, webgpu: false },
    });
    try {
      const page = await run(new URLSearchParams({ proxy: other.address, token }).toString());
      assert.match(page.error ?? '', /cannot reach ws:\/\/127\.0\.0\.1:\d+.*--allow-origin name this page's origin/);
      assert.equal(other.stats(0).connections, 0);
    } finally {
      await other.shutdown();
    }
  });
});
