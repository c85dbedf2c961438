/**
 * offload-ts in a page (headless Chromium, Debian's, WebGPU through its software adapter) against
 * the same in Node, in one run: on each device kind the page finds (WebGPU; a remote device behind
 * an `offload proxy --listen ws://` child; the host device on Web Workers where the page's build
 * has one), empty-kernel launch round trips and 64 MiB writes and reads, the page's figures
 * beside Node's on the same kind of device (Node's WebGPU is Dawn on its adapter, lavapipe
 * without a GPU; its remote device is the same proxy over ws:// too). And the page's launch on the
 * proxy over WebSocket against a raw WebSocket ping-pong from the same page to an echo server (a
 * `ws` server in this process). The page is bundled from src/ by esbuild (bench/browser/page.ts).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { WebSocketServer } from 'ws';
import type { Device, Kernel } from '../../src/index.js';
import { spawnProxy } from '../../src/proxy/spawn.js';
import { Offload } from '../offload.js';
import { benchBundle } from '../kernel-bundle.js';
import { measure, type Plan, type Series } from '../measure.js';
import type { Row, Suite } from '../suite.js';
import type { PageFigures } from '../browser/page.js';
import {
  browserSkip,
  bundleTestHostWorker,
  bundleTestPage,
  launchChromium,
  servePage,
} from '../../test/helpers/browser.js';

const MiB = 1024 * 1024;
const COPY_BYTES = 64 * MiB;

const built = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const cli = existsSync(built)
  ? [built]
  : ['--import', 'tsx', fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url))];

interface NodeFigures {
  launch: Series;
  write: Series;
  read: Series;
}

/** The page's figures' counterparts on Node's device of the same kind. */
async function inNode(device: Device, empty: Kernel, plan: Plan, rounds: number): Promise<NodeFigures> {
  const queue = device.queue();
  const buffer = await device.alloc(COPY_BYTES);
  const src = new Uint8Array(COPY_BYTES).fill(0xa5);
  const dst = new Uint8Array(COPY_BYTES);
  const [launch, write, read] = await measure(plan, [
    {
      label: `await queue.launch(empty).done on Node's ${device.info.plugin} device (${device.info.name}), one after the other`,
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await queue.launch(empty, { teams: 1 }, []).done;
      },
    },
    {
      label: `queue.write(buffer, 64 MiB) + finish() in Node (${device.info.name})`,
      count: COPY_BYTES,
      run: () => (queue.write(buffer, src), queue.finish()),
    },
    {
      label: `queue.read(buffer, 64 MiB) + finish() in Node (${device.info.name})`,
      count: COPY_BYTES,
      run: () => (queue.read(buffer, dst), queue.finish()),
    },
  ]);
  await buffer.free();
  await queue.destroy();
  return { launch: launch!, write: write!, read: read! };
}

export const browserSuite: Suite = {
  name: 'browser',
  description:
    "offload-ts in headless Chromium against the same in Node: each device kind's launch round trip and 64 MiB write/read; the page's proxy launch over WebSocket against a raw WebSocket ping-pong",
  async run(plan, progress) {
    const skip = await browserSkip();
    if (skip) {
      progress(`browser: skipped: ${skip}`);
      return [];
    }
    const rounds = plan.quick ? 100 : 500;
    const bundlePath = await benchBundle();
    const page = await bundleTestPage(fileURLToPath(new URL('../browser/page.ts', import.meta.url)));
    const site = await servePage({
      '/': {
        body: '<!doctype html><meta charset="utf-8"><pre id="out"></pre><script type="module" src="main.js"></script>',
        type: 'text/html',
      },
      '/main.js': { body: page, type: 'text/javascript' },
      '/offload-host-worker.js': { body: await bundleTestHostWorker(), type: 'text/javascript' },
      '/kernels.offload': { body: await readFile(bundlePath), type: 'application/octet-stream' },
    });
    const token = randomBytes(16).toString('hex');
    const echo = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    echo.on('connection', (socket) => socket.on('message', (data, binary) => socket.send(data, { binary })));
    await new Promise((resolve) => echo.once('listening', resolve));
    const proxy = await spawnProxy({
      cli,
      token,
      listen: 'ws://127.0.0.1:0',
      args: ['--allow-origin', site.origin],
      env: { ...process.env, OFFLOAD_PROXIES: '', OFFLOAD_WEBGPU: 'off', OFFLOAD_HOST_MEMORY: '256M' },
    });
    const browser = await launchChromium();
    try {
      progress('browser: measuring in the page');
      const tab = await browser.newPage();
      const query = new URLSearchParams({
        proxy: proxy.address,
        token,
        echo: `ws://127.0.0.1:${(echo.address() as AddressInfo).port}`,
        warmup: String(plan.warmup),
        repetitions: String(plan.repetitions),
        rounds: String(rounds),
      });
      await tab.goto(`${site.origin}/?${query.toString()}`);
      const handle = await tab.waitForFunction(() => document.getElementById('out')?.textContent, undefined, {
        timeout: 600_000,
      });
      const figures = JSON.parse(String(await handle.jsonValue())) as PageFigures;
      await tab.close();
      if (figures.error) throw new Error(`the bench page failed: ${figures.error}`);

      progress('browser: measuring the same in Node');
      const runtime = await Offload.init({
        webgpu: { fallback: true },
        proxies: [proxy.address],
        token,
        host: { memoryBytes: 256 * MiB },
      });
      const rows: Row[] = [];
      try {
        const library = await runtime.register(bundlePath);
        for (const inPage of figures.devices) {
          const device = runtime.devices.find((candidate) => candidate.info.plugin === inPage.plugin);
          if (!device) {
            progress(`browser: Node has no ${inPage.plugin} device: the page's figures stand alone`);
            continue;
          }
          const node = await inNode(device, await device.kernel(library, 'empty'), plan, rounds);
          const named = (series: Series): Series => ({ ...series, label: `${series.label} (${inPage.name})` });
          rows.push(
            {
              name: `${inPage.plugin}: empty-kernel launch round trip, page vs Node`,
              unit: 'us',
              offload: named(inPage.launch),
              baseline: node.launch,
            },
            {
              name: `${inPage.plugin}: 64 MiB write, page vs Node`,
              unit: 'GB/s',
              offload: named(inPage.write),
              baseline: node.write,
            },
            {
              name: `${inPage.plugin}: 64 MiB read, page vs Node`,
              unit: 'GB/s',
              offload: named(inPage.read),
              baseline: node.read,
            },
          );
        }
      } finally {
        await runtime.shutdown();
      }
      const remote = figures.devices.find((device) => device.plugin === 'remote');
      if (remote)
        rows.push({
          name: 'proxy launch over WebSocket from the page vs a raw WebSocket ping-pong from the same page',
          unit: 'us',
          offload: remote.launch,
          baseline: figures.ping,
        });
      return rows;
    } finally {
      await browser.close();
      await proxy.stop();
      echo.close();
      await site.close();
    }
  },
};
