// The conformance suite (test/conformance/suite.ts, the one Node runs) in headless Chromium:
// bundled with node:test and node:assert/strict replaced by small page shims
// (test/helpers/page-node-test.ts, page-node-assert.ts), run in a cross-origin isolated page
// against each device kind the page finds: WebGPU through navigator.gpu (Chromium's software
// adapter), a remote device behind a real `offload proxy --listen ws://` child process, and the
// host device on Web Workers where the page's build has one. Skips are the suite's own, asked of
// the device's capabilities as in Node; every other test must pass.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { Browser } from 'playwright-core';
import { browserSkip, bundleTestHostWorker, bundleTestPage, launchChromium, servePage } from './helpers/browser.js';
import { fixtureBundle } from './helpers/fixtures.js';
import type { PageTestResult } from './helpers/page-node-test.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';

interface PageRun {
  plugins?: string[];
  results?: PageTestResult[];
  missing?: string;
  error?: string;
}

/** What the suite's skips say: each names what the device lacks (its info), or that the target has no peer. */
const CAPABILITY_SKIP =
  /lacks .*\(info\.capabilities\)|\(info\.(kernelPrint|hostCalls|launchTimeouts) is false\)|has teams of at most \d+ threads|has no second device/;

const skip = await browserSkip();

describe('the conformance suite in headless Chromium', { timeout: 240_000, skip }, () => {
  let browser: Browser;
  let proxy: ProxyProcess;
  let site: Awaited<ReturnType<typeof servePage>>;

  before(async () => {
    const entry = path.join(import.meta.dirname, 'helpers', 'conformance-page.ts');
    const [code, worker, kernels] = await Promise.all([
      bundleTestPage(entry),
      bundleTestHostWorker(),
      fixtureBundle().then((file) => readFile(file)),
    ]);
    site = await servePage({
      '/': {
        body: '<!doctype html><meta charset="utf-8"><pre id="out"></pre><script type="module" src="main.js"></script>',
        type: 'text/html',
      },
      '/main.js': { body: code, type: 'text/javascript' },
      '/offload-host-worker.js': { body: worker, type: 'text/javascript' },
      '/kernels.offload': { body: kernels, type: 'application/octet-stream' },
    });
    [proxy, browser] = await Promise.all([
      startProxy({ listen: 'ws://127.0.0.1:0', threads: 2, memory: '256M', args: ['--allow-origin', site.origin] }),
      launchChromium(),
    ]);
  });

  after(async () => {
    await browser?.close();
    await proxy?.stop();
    await site?.close();
  });

  /** Runs the suite in a fresh page against the page's device of plugin `device`. */
  async function runIn(device: string): Promise<PageRun> {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    try {
      const query = new URLSearchParams({ device, proxy: proxy.address, token: proxy.token });
      await page.goto(`${site.origin}/?${query.toString()}`);
      const handle = await page.waitForFunction(() => document.getElementById('out')?.textContent, undefined, {
        timeout: 180_000,
      });
      const run = JSON.parse(String(await handle.jsonValue())) as PageRun;
      if (errors.length > 0) run.error = `${run.error ?? ''} page errors: ${errors.join('; ')}`;
      return run;
    } finally {
      await page.close();
    }
  }

  /** Asserts the page's run: no failure, every skip a capability's, and most of the suite run. */
  function check(t: TestContext, device: string, run: PageRun): void {
    assert.equal(run.error, undefined, run.error);
    const results = run.results!;
    const failed = results.filter((result) => result.status === 'fail');
    assert.deepEqual(
      failed.map((result) => `${result.name}: ${result.message}`),
      [],
      `the suite's failures on the page's ${device} device`,
    );
    const skipped = results.filter((result) => result.status === 'skip');
    for (const result of skipped) assert.match(result.message ?? '', CAPABILITY_SKIP, `${result.name} skipped`);
    const passed = results.filter((result) => result.status === 'pass').length;
    assert.ok(passed >= 50, `${passed} of ${results.length} tests passed`);
    t.diagnostic(
      `${device} in the page: ${passed} passed, ${skipped.length} skipped (${[...new Set(skipped.map((s) => s.message))].join('; ')})`,
    );
  }

  it('passes on WebGPU through navigator.gpu', async (t) => {
    const run = await runIn('webgpu');
    assert.equal(run.missing, undefined, `the page found no WebGPU device, only: ${run.plugins?.join(', ')}`);
    check(t, 'webgpu', run);
  });

  it('passes on a remote device behind `offload proxy --listen ws://`', async (t) => {
    const run = await runIn('remote');
    assert.equal(run.missing, undefined, `the page found no remote device, only: ${run.plugins?.join(', ')}`);
    check(t, 'remote', run);
  });

  it('passes on the host device (Web Workers) where the page has one', async (t) => {
    const run = await runIn('host');
    assert.equal(run.error, undefined, run.error);
    if (run.missing) return t.skip(`the page's build has no host device (it found: ${run.plugins?.join(', ')})`);
    check(t, 'host', run);
  });
});

// The page shims themselves, in Node: a suite run through them fails where node:test would.
describe('the page shims of node:test and node:assert/strict', { timeout: 30_000 }, () => {
  it('compare as strict assert does: -0 apart from 0, NaN equal, typed arrays by content and type', async () => {
    const { default: shim } = await import('./helpers/page-node-assert.js');
    shim.deepEqual([NaN, new Float32Array([1, 2])], [NaN, new Float32Array([1, 2])]);
    assert.throws(() => shim.deepEqual([-0], [0]), /\[0\]/);
    assert.throws(() => shim.deepEqual(new Float32Array([1]), new Float64Array([1])), /Float64Array/);
    assert.throws(() => shim.deepEqual({ a: 1, b: [1, 2] }, { a: 1, b: [1, 3] }), /\.b\[1\]: expected 3, got 2/);
    assert.throws(() => shim.equal(1, 2, 'the message'), /the message/);
    assert.throws(() => shim.ok(0), /truthy/);
    assert.throws(() => shim.match('abc', /d/), /to match/);
    assert.throws(() => shim.throws(() => {}), /to throw/);
    assert.throws(
      () =>
        shim.throws(
          () => 'no throw',
          () => true,
        ),
      /to throw/,
    );
    shim.throws(
      () => {
        throw new RangeError('r');
      },
      (error: unknown) => error instanceof RangeError,
    );
  });

  it('run tests in order and report passes, failures, skips and a failed before() as node:test does', async () => {
    const harness = await import('./helpers/page-node-test.js');
    const order: string[] = [];
    harness.describe('outer', () => {
      harness.before(() => order.push('before'));
      harness.after(() => order.push('after'));
      harness.it('passes', () => order.push('passes'));
      harness.it('fails', () => Promise.reject(new Error('broke')));
      harness.it('skips', (t) => t.skip('lacks x'));
      harness.it('times out', { timeout: 20 }, () => new Promise(() => {}));
      harness.describe('inner', () => {
        harness.before(() => {
          throw new Error('no setup');
        });
        harness.it('never runs', () => order.push('never'));
      });
    });
    const results = await harness.runDeclared();
    assert.deepEqual(order, ['before', 'passes', 'after']);
    assert.deepEqual(
      results.map((result) => [result.name, result.status]),
      [
        ['outer > passes', 'pass'],
        ['outer > fails', 'fail'],
        ['outer > skips', 'skip'],
        ['outer > times out', 'fail'],
        ['outer > inner > never runs', 'fail'],
      ],
    );
    assert.match(results[1]!.message!, /broke/);
    assert.equal(results[2]!.message, 'lacks x');
    assert.match(results[3]!.message!, /within 20 ms/);
    assert.match(results[4]!.message!, /before\(\) failed: .*no setup/);
    assert.deepEqual(await harness.runDeclared(), [], 'each test runs once');
  });
});
