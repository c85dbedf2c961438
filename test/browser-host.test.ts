// The host device in a page, in headless Chromium (Debian's, driven by playwright-core): a page
// program bundled with esbuild from the built package, its host worker bundled beside it
// (offload-ts/host-worker), served cross-origin isolated from 127.0.0.1, runs saxpy on the host
// device's Web Workers with Node's result; a runaway kernel with a time limit is stopped and the
// device goes on; print() lines and host calls reach the page; small launches run inline. The same
// page served without COOP/COEP gets no host device, and runtime.diagnostics names the headers.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { map, Offload } from '../src/index.js';
import { browserSkip, bundleHostWorker, bundlePage, launchChromium, servePage } from './helpers/browser.js';
import { fixtureBundle } from './helpers/fixtures.js';

/** The page's program: every host-device feature once, its findings into #out. */
const HOST_PROGRAM = `import { Offload, map } from 'offload-ts';

const prints = [], info = [];
const rt = await Offload.init({ host: { threads: 2, memoryBytes: 64 << 20 }, webgpu: false,
  print: (line) => prints.push(line.text), info: (line) => info.push(line) });
const out = { diagnostics: rt.diagnostics, plugins: rt.devices.map((device) => device.info.plugin) };
const host = rt.devices.find((device) => device.info.plugin === 'host');
if (host) {
  const lib = await rt.register('kernels.offload');
  const [saxpy, spin, say, callHost, grid] = await Promise.all(['saxpy', 'spin', 'say', 'call_host', 'record_grid'].map((name) => host.kernel(lib, name)));
  const x = Float32Array.from({ length: 64 }, (_, i) => i), y = Float32Array.from({ length: 64 }, (_, i) => i / 4);
  await rt.target(host, saxpy, { teams: 4 }, [64, 2.5, map.to(x), map.tofrom(y)]);
  const flag = await host.alloc(4), q = host.queue();
  q.write(flag, new Int32Array(1));
  out.runaway = await q.launch(spin, { teams: 2, timeoutMs: 300 }, [flag]).done.then(() => 'completed', (error) => error.code);
  const again = Float32Array.from({ length: 64 }, (_, i) => i / 4);
  await rt.target(host, saxpy, { teams: 4 }, [64, 2.5, map.to(x), map.tofrom(again)]);
  const grids = new Int32Array(8);
  await rt.target(host, grid, { teams: 2 }, [map.from(grids)]);
  await rt.target(host, say, { teams: 2 }, [1, map.to(new Float64Array([0.25, 0.75])), -1]);
  rt.hostFunctions.add('scale', (team, factor) => team + factor * 2);
  const called = new Float64Array(2);
  await rt.target(host, callHost, { teams: 2 }, [0, 1.5, map.from(called)]);
  Object.assign(out, { y: Array.from(y), again: Array.from(again), prints, called: Array.from(called), grids: Array.from(grids), info });
}
await rt.shutdown();
document.getElementById('out').textContent = JSON.stringify(out);
`;

interface PageOutput {
  diagnostics: string[];
  plugins: string[];
  y?: number[];
  again?: number[];
  runaway?: string;
  prints?: string[];
  called?: number[];
  grids?: number[];
  info?: string[];
}

const skip = await browserSkip();

describe('the host device in a page in headless Chromium', { timeout: 120_000, skip }, () => {
  let dir: string;
  let browser: Browser;
  const sites: Awaited<ReturnType<typeof servePage>>[] = [];
  let files: Parameters<typeof servePage>[0];
  let bundlePath: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'offload-host-page-'));
    bundlePath = await fixtureBundle();
    const { code } = await bundlePage(dir, HOST_PROGRAM);
    const [worker, kernels] = await Promise.all([bundleHostWorker(dir), readFile(bundlePath)]);
    files = {
      '/': {
        body: '<!doctype html><meta charset="utf-8"><pre id="out"></pre><script type="module" src="main.js"></script>',
        type: 'text/html',
      },
      '/main.js': { body: code, type: 'text/javascript' },
      '/offload-host-worker.js': { body: worker, type: 'text/javascript' },
      '/kernels.offload': { body: kernels, type: 'application/octet-stream' },
    };
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    for (const site of sites) await site.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Serves the page (with `headers`, or the isolation headers; less the host worker with `noWorker`) and runs it; its output. */
  async function run(headers?: Record<string, string>, noWorker = false): Promise<PageOutput> {
    const served = { ...files };
    if (noWorker) delete served['/offload-host-worker.js'];
    const site = await servePage(served, headers);
    sites.push(site);
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    try {
      await page.goto(`${site.origin}/`);
      const handle = await Promise.race([
        page.waitForFunction(() => document.getElementById('out')?.textContent, undefined, { timeout: 60_000 }),
        new Promise<never>((_, reject) => page.on('pageerror', reject)),
      ]).catch((error: Error) => {
        throw new Error(`${error.message} (${errors.join('; ')})`);
      });
      return JSON.parse(String(await handle.jsonValue())) as PageOutput;
    } finally {
      await page.close();
    }
  }

  it('runs saxpy on Web Workers as in Node, stops a runaway kernel and goes on, prints, calls the host, runs small launches inline', async () => {
    const page = await run();
    assert.deepEqual(page.diagnostics, []);
    assert.deepEqual(page.plugins, ['host']);
    const rt = await Offload.init({ host: { threads: 2, memoryBytes: 64 << 20 }, webgpu: false });
    try {
      const device = rt.devices[0]!;
      const saxpy = await device.kernel(await rt.register(bundlePath), 'saxpy');
      const x = Float32Array.from({ length: 64 }, (_, i) => i);
      const y = Float32Array.from({ length: 64 }, (_, i) => i / 4);
      await rt.target(device, saxpy, { teams: 4 }, [64, 2.5, map.to(x), map.tofrom(y)]);
      assert.deepEqual(page.y, Array.from(y), "the page's host device answers as Node's");
    } finally {
      await rt.shutdown();
    }
    assert.equal(page.runaway, 'TIMEOUT', 'the runaway launch failed at its time limit');
    assert.deepEqual(page.again, page.y, 'the device goes on after its workers were replaced');
    // Two teams on two workers print in no set order (each team's own lines keep theirs: the
    // conformance suite checks that); one line each here.
    assert.deepEqual([...page.prints!].sort(), ['team, line, value: 0, 0, 0.25', 'team, line, value: 1, 0, 0.75']);
    assert.deepEqual(page.called, [3, 4], "host calls reach the page's functions");
    assert.deepEqual(page.grids, [0, 2, 0, 1, 1, 2, 0, 1], 'record_grid: team, teams, thread, threads of each team');
    const places = page.info!.filter((line) => /launch of kernel (saxpy|record_grid) with/.test(line));
    assert.match(places.at(-1)!, /record_grid.*ran on the calling thread\)$/, 'a bounded kernel runs inline');
    assert.match(places[0]!, /saxpy.*ran on the workers\)$/, 'a kernel with a loop runs on the workers');
  });

  it('has no host device in a page that is not cross-origin isolated, and says which headers to send', async () => {
    const page = await run({});
    assert.deepEqual(page.plugins, []);
    assert.equal(page.diagnostics.length, 1, page.diagnostics.join('\n'));
    assert.match(page.diagnostics[0]!, /^plugin host left out: the page is not cross-origin isolated/);
    assert.match(page.diagnostics[0]!, /Cross-Origin-Opener-Policy: same-origin/);
    assert.match(page.diagnostics[0]!, /Cross-Origin-Embedder-Policy: require-corp/);
  });

  it('loses the host device, naming the worker script, when offload-host-worker.js is not beside the bundle', async () => {
    await assert.rejects(run(undefined, true), /host workers keep dying.*offload-host-worker\.js/);
  });
});
