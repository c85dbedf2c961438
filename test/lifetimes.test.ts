/**
 * Lifetimes with an owner and an end: what a client makes on a proxy is freed when it leaves,
 * whichever way it leaves, and what a program drops is not kept by the runtime.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Offload, type Buffer, type Queue } from '../src/index.js';
import { collectGarbage } from '../src/plugins/host/garbage.js';
import type { RemoteDevice } from '../src/plugins/remote/device.js';
import type { ProxyStats } from '../src/proxy/server.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { proxyStats, proxyStatsUntil, startProxy, type ProxyProcess } from './helpers/proxy.js';
import { typeCheck } from './helpers/typecheck.js';

const MiB = 1024 * 1024;
const BUFFER_BYTES = 64 * 1024;

/** Nothing of any client left: no session, connection, queue, buffer, image or context, on the proxy or its host device. */
function empty(stats: ProxyStats): boolean {
  const host = stats.devices[0]!;
  return (
    stats.sessions + stats.connections + stats.queues + stats.buffers + stats.images + stats.contexts === 0 &&
    host.contexts === 1 && // the proxy's own
    host.images === 0 &&
    host.inFlight === 0
  );
}

describe('lifetimes', { timeout: 600_000 }, () => {
  describe('200 clients of one proxy, each making 100 queues and 100 buffers, half leaving cleanly and half killed', () => {
    let proxy: ProxyProcess;
    let bundle: string;
    before(async () => {
      proxy = await startProxy({ threads: 2, memory: '64M' });
      bundle = await fixtureBundle();
    });
    after(async () => {
      await proxy?.stop();
    });

    /** One client: 100 buffers written through 100 queues (and an image and a launch on some), then gone. */
    async function client(index: number): Promise<void> {
      const runtime = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
      const device = runtime.devices[0]!;
      const buffers: Buffer[] = await Promise.all(Array.from({ length: 100 }, () => device.alloc(BUFFER_BYTES)));
      const queues: Queue[] = Array.from({ length: 100 }, () => device.queue());
      const data = new Uint8Array(BUFFER_BYTES).fill(index & 255);
      queues.forEach((q, i) => q.write(buffers[i]!, data));
      if (index % 4 === 0) {
        const iota = await device.kernel(await runtime.register(bundle), 'iota_i32');
        queues[0]!.launch(iota, { teams: 2 }, [16, buffers[0]!]);
      }
      await Promise.all(queues.map((q) => q.finish()));
      if (index % 2 === 1) {
        // Killed: the connection drops with everything still allocated, nothing said.
        (device.plugin as RemoteDevice).connection.close();
      } else if (index % 4 === 2) {
        // Clean, by hand: every queue destroyed and every buffer freed before leaving.
        for (const q of queues) await q.destroy();
        for (const b of buffers) await b.free();
      }
      await runtime.shutdown();
    }

    async function clients(from: number, to: number, concurrency = 4): Promise<void> {
      let next = from;
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < to) await client(next++);
        }),
      );
    }

    /** A real client process, killed with SIGKILL once it has made its buffers and queues. */
    async function killedProcess(): Promise<void> {
      const script = `
        import { Offload } from ${JSON.stringify(new URL('../src/index.ts', import.meta.url).href)};
        const runtime = await Offload.init({ host: false, webgpu: false, proxies: [${JSON.stringify(proxy.address)}], token: ${JSON.stringify(proxy.token)} });
        const device = runtime.devices[0];
        const buffers = await Promise.all(Array.from({ length: 100 }, () => device.alloc(${BUFFER_BYTES})));
        const queues = buffers.map((b) => { const q = device.queue(); q.write(b, new Uint8Array(${BUFFER_BYTES}).fill(3)); return q; });
        await Promise.all(queues.map((q) => q.finish()));
        console.log('ready');
        setInterval(() => {}, 1000);
      `;
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      try {
        await new Promise<void>((resolve, reject) => {
          child.stdout.on('data', (chunk: globalThis.Buffer) => chunk.toString().includes('ready') && resolve());
          child.once('exit', (code) => reject(new Error(`the client exited early (${code})`)));
        });
      } finally {
        child.kill('SIGKILL');
      }
    }

    it('leaves nothing behind: every count returns to zero and the memory to its baseline', async () => {
      // Warm up (code, pools, allocator high-water marks), then take the baseline.
      await clients(0, 8);
      const baseline = await proxyStatsUntil(proxy, empty);
      assert.ok(empty(baseline), `after the warm-up: ${JSON.stringify(baseline)}`);

      await clients(8, 200);
      for (let n = 0; n < 4; n++) await killedProcess();
      const busiest = await proxyStats(proxy);

      const final = await proxyStatsUntil(
        proxy,
        (stats) => empty(stats) && stats.rssBytes < baseline.rssBytes + 48 * MiB,
        30_000,
      );
      assert.ok(empty(final), `live objects left: ${JSON.stringify(final)}`);
      const grown = final.rssBytes - baseline.rssBytes;
      // 196 clients each wrote 6.25 MiB of buffers: a leak of their memory would be over 1 GiB.
      assert.ok(
        grown < 48 * MiB,
        `the proxy's RSS grew by ${(grown / MiB).toFixed(1)} MiB (baseline ${(baseline.rssBytes / MiB).toFixed(0)} MiB, last busy ${(busiest.rssBytes / MiB).toFixed(0)} MiB)`,
      );
    });
  });

  describe('await using', () => {
    it('type-checks on the public handles (Runtime, Library, Buffer, Queue) and nowhere else', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'offload-using-'));
      try {
        await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
        await writeFile(
          join(dir, 'use.ts'),
          `import { Offload } from 'offload-ts';
{
  await using runtime = await Offload.init();
  await using library = await runtime.register('kernels.offload');
  const device = runtime.devices[0]!;
  await using buffer = await device.alloc(16);
  await using queue = device.queue();
  queue.write(buffer, new Uint8Array(16));
  await using context = await runtime.createContext();
  void library;
  void context;
}
`,
        );
        await writeFile(
          join(dir, 'bad.ts'),
          `import { Offload } from 'offload-ts';
const runtime = await Offload.init();
{
  await using device = runtime.devices[0]!;
}
`,
        );
        const [use, bad] = await Promise.all([typeCheck(dir, 'use.ts'), typeCheck(dir, 'bad.ts')]);
        assert.deepEqual(use, []);
        assert.match(bad.join('\n'), /bad\.ts\(4,\d+\): error TS2851/, 'a Device is not disposable');
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  });

  describe('in one program', () => {
    it('keeps no queue the program dropped: only queues with work pending are held, and a dropped one is collected', async () => {
      const runtime = await Offload.init({ host: { threads: 1, memoryBytes: 4 * MiB }, webgpu: false, proxies: [] });
      try {
        const device = runtime.devices[0]!;
        const buffer = await device.alloc(64);
        // In a function of its own, so that no stale register of this frame holds the last queue.
        const use = async (): Promise<WeakRef<Queue>> => {
          const q = device.queue();
          await q.write(buffer, new Uint8Array(64)).done;
          return new WeakRef(q);
        };
        const refs: WeakRef<Queue>[] = [];
        for (let i = 0; i < 1000; i++) refs.push(await use());
        for (let attempt = 0; attempt < 20 && refs.some((ref) => ref.deref()); attempt++) {
          await collectGarbage();
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        assert.equal(refs.filter((ref) => ref.deref()).length, 0, 'every dropped queue was collected');
      } finally {
        await runtime.shutdown();
      }
    });
  });
});
