// `offload serve` (a real child process) and its demo page in headless Chromium: the page is
// cross-origin isolated, runs the demo's kernels on every device it finds (WebGPU through
// navigator.gpu, the proxy `offload serve` started over ws://, the host device on Web Workers
// where the page's build has one), and shows `offload demo`'s table, every row checked OK, with
// a chart of the times and a trace to download. A screenshot is taken (OFFLOAD_DEMO_SCREENSHOT
// names where it goes; docs/images/demo-page.png is one). The server gives nothing outside its
// page, and refuses bad options.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import type { Browser } from 'playwright-core';
import { browserSkip, ensureBuilt, launchChromium } from './helpers/browser.js';

const MAIN = path.join(import.meta.dirname, '..', 'src', 'cli', 'main.ts');

/** Runs `offload serve` with `args`; resolves with the page's URL once it says it serves. */
function serve(args: string[]): Promise<{ child: ChildProcess; url: string; output: () => string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'serve', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, OFFLOAD_PROXIES: '' },
  });
  let output = '';
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      output += `${line}\n`;
      const match = /^serving (http:\/\/\S+)$/.exec(line);
      if (match) resolve({ child, url: match[1]!, output: () => output });
    });
    child.once('exit', (code) => reject(new Error(`offload serve exited (${code}) before serving:\n${output}`)));
  });
}

/** Stops a child and waits for it. */
async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

const skip = await browserSkip();

describe('offload serve: the demo page in headless Chromium', { timeout: 240_000, skip }, () => {
  let browser: Browser;
  let served: Awaited<ReturnType<typeof serve>>;

  before(async () => {
    await ensureBuilt();
    [served, browser] = await Promise.all([serve(['--port', '0', '--size', '65536']), launchChromium()]);
  });

  after(async () => {
    await browser?.close();
    await stop(served?.child);
  });

  it("runs the demo's kernels on every device the page finds and shows the table, every row checked, with a chart", async () => {
    const page = await browser.newPage({ viewport: { width: 1180, height: 900 } });
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    try {
      await page.goto(served.url);
      await page.waitForFunction(() => document.body.dataset.state !== undefined, undefined, { timeout: 180_000 });
      const state = await page.evaluate(() => document.body.dataset.state);
      const status = await page.locator('#status').textContent();
      assert.equal(state, 'done', `${status} ${errors.join('; ')}`);
      assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'served with COOP/COEP');
      const rows = await page.$$eval('#rows tr', (trs) =>
        trs.map((tr) => ({
          plugin: tr.getAttribute('data-plugin'),
          cells: [...tr.querySelectorAll('td')].map((td) => td.textContent ?? ''),
        })),
      );
      const plugins = new Set(rows.map((row) => row.plugin));
      assert.ok(plugins.has('webgpu'), `WebGPU rows: ${[...plugins].join(', ')}`);
      assert.ok(plugins.has('remote'), `rows of the proxy over ws://: ${[...plugins].join(', ')}`);
      for (const plugin of plugins) {
        const kernels = rows.filter((row) => row.plugin === plugin).map((row) => row.cells[0]);
        assert.deepEqual(kernels, ['saxpy', 'dot_partial', 'mandelbrot', 'transpose'], `the kernels on ${plugin}`);
      }
      for (const { cells } of rows) {
        assert.equal(cells.length, 7, cells.join(' | '));
        assert.equal(cells[6], 'checked: OK', cells.join(' | '));
        assert.match(cells[2]!, /^\d+ x \d+$/, 'grid');
        assert.match(cells[4]!, /^[\d.]+ (ms|µs)$/, 'launch time');
      }
      assert.equal(await page.locator('#chart rect.bar').count(), rows.length, 'a bar per row');
      const trace = await page.evaluate(async () => {
        const link = document.getElementById('trace') as HTMLAnchorElement;
        return (await fetch(link.href)).text();
      });
      const spans = (JSON.parse(trace) as { traceEvents: { ph: string }[] }).traceEvents.filter((e) => e.ph === 'X');
      assert.ok(spans.length >= rows.length, `${spans.length} spans in the page's trace`);
      const file =
        process.env.OFFLOAD_DEMO_SCREENSHOT ?? path.join(await mkdtemp(path.join(os.tmpdir(), 'demo-')), 'page.png');
      await page.screenshot({ path: file, fullPage: true });
      const png = await readFile(file);
      assert.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47], 'a PNG');
      if (!process.env.OFFLOAD_DEMO_SCREENSHOT) await rm(path.dirname(file), { recursive: true, force: true });
    } finally {
      await page.close();
    }
  });

  it('serves the isolation headers, and nothing outside dist/, config.json and the bundle', async () => {
    const home = await fetch(served.url);
    assert.equal(home.headers.get('cross-origin-opener-policy'), 'same-origin');
    assert.equal(home.headers.get('cross-origin-embedder-policy'), 'require-corp');
    const module = await fetch(new URL('/offload/platform-files.js', served.url));
    assert.match(await module.text(), /fetch\(url\)/, "a Node module's page version (package.json's browser field)");
    for (const probe of [
      '/offload/../package.json',
      '/offload/%2e%2e/%2e%2e/package.json',
      '/offload/..%2fsrc/index.js',
      '/package.json',
      '/offload/missing.js',
    ])
      assert.equal((await fetch(new URL(probe, served.url))).status, 404, probe);
    assert.equal((await fetch(served.url, { method: 'POST', body: 'x' })).status, 405);
  });

  it('refuses bad options, naming them', async (t) => {
    const { run } = await import('../src/cli/serve.js');
    const said: string[] = [];
    t.mock.method(console, 'error', (line: string) => said.push(line));
    for (const [args, message] of [
      [['--port', '70000'], /--port must be a port number/],
      [['--port', 'http'], /--port must be a port number/],
      [['--size', '0'], /--size must be an integer/],
      [['--host', 'a b'], /--host must be an address/],
    ] as const) {
      said.length = 0;
      assert.equal(await run([...args]), 2, args.join(' '));
      assert.match(said.join('\n'), message);
    }
  });
});
