// The proxy's live dashboard (`offload proxy --metrics`, GET /): opened in headless Chromium
// beside a real client that launches kernels over 127.0.0.1, it shows the client's session and
// its launches within two seconds, and keeps up as they go on. A screenshot of it is the test's
// artefact (in a temporary folder; OFFLOAD_DASHBOARD_SCREENSHOT=<file> keeps one there too, as
// docs/images/dashboard.png was made).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdtemp, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { Offload } from '../src/index.js';
import { MetricsEndpoint } from '../src/proxy/metrics-http.js';
import { ProxyMetrics } from '../src/proxy/metrics.js';
import { ProxyServer } from '../src/proxy/server.js';
import { browserSkip, launchChromium } from './helpers/browser.js';
import { fixtureBundle } from './helpers/fixtures.js';

const missing = await browserSkip();

describe('the proxy dashboard', { timeout: 120_000, skip: missing }, () => {
  it("shows a connected client's session and its launches within two seconds, and follows them", async (t: TestContext) => {
    const token = randomBytes(16).toString('hex');
    const server = await ProxyServer.start({
      listen: '127.0.0.1:0',
      token,
      runtime: { host: { threads: 2, memoryBytes: 64 * 1024 * 1024 }, webgpu: false },
      quotas: { buffers: 4 },
      metrics: new ProxyMetrics({ names: true }),
    });
    const endpoint = await MetricsEndpoint.start(server.metrics, { listen: '127.0.0.1:0', pushIntervalMs: 250 });
    const runtime = await Offload.init({ host: false, webgpu: false, proxies: [server.address], token });
    const browser = await launchChromium();
    let launching = true;
    let loop: Promise<void> = Promise.resolve();
    try {
      const device = runtime.devices[0]!;
      const lib = await runtime.register(await fixtureBundle());
      const iota = await device.kernel(lib, 'iota_i32');
      const buffer = await device.alloc(1024 * 1024);
      const queue = device.queue();
      // A quota refusal, for the page's refusals table.
      await Promise.all([1, 2, 3, 4].map(() => device.alloc(64).catch(() => undefined)));
      loop = (async () => {
        while (launching) {
          queue.write(buffer, new Uint8Array(64 * 1024));
          queue.launch(iota, { teams: 4 }, [4096, buffer]);
          queue.read(buffer, new Uint8Array(16 * 1024));
          await queue.finish();
          await new Promise((resolve) => setTimeout(resolve, 2));
        }
      })();
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      page.on('console', (message) => {
        if (message.type() === 'error') errors.push(message.text());
      });
      // When the session's row first shows launches, on the page's clock (0: the navigation's
      // start), as a reader would see it: not counting the test's own round trips to the browser.
      await page.addInitScript(() => {
        const watch = setInterval(() => {
          const cell = document.querySelector('#sessions tr[data-tenant="1"] td.launches');
          if (Number(cell?.textContent ?? 0) > 0) {
            (window as unknown as { shownAt: number }).shownAt = performance.now();
            clearInterval(watch);
          }
        }, 5);
      });
      // The browser's own start (its first renderer) is not the page's doing: it comes first.
      await page.goto('about:blank');
      await page.goto(endpoint.url);
      const row = page.locator('#sessions tr[data-tenant="1"]');
      await page.waitForFunction(() => (window as unknown as { shownAt?: number }).shownAt !== undefined, undefined, {
        timeout: 10_000,
      });
      const shownAfterMs = await page.evaluate(() => (window as unknown as { shownAt: number }).shownAt);
      assert.ok(
        shownAfterMs < 2000,
        `the session and its launches showed ${shownAfterMs} ms after the page was asked for`,
      );
      assert.match((await row.textContent()) ?? '', /#1 127\.0\.0\.1:\d+/);
      // It follows: the launch count shown grows, the device's too, the status says ready.
      const first = Number(await row.locator('td.launches').textContent());
      await page.waitForFunction(
        (before) =>
          Number(document.querySelector('#sessions tr[data-tenant="1"] td.launches')?.textContent ?? 0) > before,
        first,
        { timeout: 5000 },
      );
      assert.ok(Number(await page.locator('#devices tr[data-device="0"] td.launches').textContent()) > first);
      assert.equal(await page.locator('#status').textContent(), 'ready');
      assert.match((await page.locator('#refusals tbody').textContent()) ?? '', /quota.*OUT_OF_MEMORY/);
      await page.waitForFunction(
        () => (document.querySelector('#rate polyline')?.getAttribute('points') ?? '').length > 0,
      );
      assert.deepEqual(errors, []);

      const folder = await mkdtemp(path.join(tmpdir(), 'offload-dashboard-'));
      const shot = path.join(folder, 'dashboard.png');
      await page.setViewportSize({ width: 1280, height: 760 });
      await new Promise((resolve) => setTimeout(resolve, 1500)); // a few seconds of chart
      await page.screenshot({ path: shot, fullPage: true });
      assert.ok((await stat(shot)).size > 10_000);
      const keep = process.env.OFFLOAD_DASHBOARD_SCREENSHOT;
      if (keep) await copyFile(shot, keep);
      t.diagnostic(
        `the session and its launches showed ${shownAfterMs.toFixed(0)} ms after the page was asked for; screenshot: ${shot}`,
      );
    } finally {
      launching = false;
      await loop.catch(() => {});
      await browser.close();
      await runtime.shutdown();
      await endpoint.close();
      await server.shutdown();
    }
  });
});
