// runtime.metrics(): what a program's own devices have done and hold (launches by outcome and
// their time, bytes copied, memory held, operations in flight), on the host device and on a
// proxy's device, where it agrees with the proxy's own /metrics; and `offload devices --watch`,
// which prints them live.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Offload, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { metricsUrl, scrapeUntil } from './helpers/metrics.js';
import { startProxy } from './helpers/proxy.js';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Allocates 4096 bytes, writes them, launches iota 3 times and a trap once, reads 64 bytes back. */
async function work(runtime: Runtime): Promise<void> {
  const device = runtime.devices[0]!;
  const lib = await runtime.register(await fixtureBundle());
  const iota = await device.kernel(lib, 'iota_i32');
  const trap = await device.kernel(lib, 'trap_oob');
  const buffer = await device.alloc(4096);
  const queue = device.queue();
  queue.write(buffer, new Uint8Array(4096));
  for (let i = 0; i < 3; i++) queue.launch(iota, { teams: 2 }, [16, buffer]);
  queue.read(buffer, new Uint8Array(64));
  await queue.finish();
  await rejectsWith(queue.launch(trap, { teams: 1 }, [0xfffffff0]).done, 'KERNEL_TRAP');
  await queue.finish().catch(() => {});
}

describe('runtime.metrics()', { timeout: 120_000 }, () => {
  it("counts a host device's launches, copies and memory, and times launches from the first call on", async () => {
    const runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 16 * 1024 * 1024 },
      webgpu: false,
      proxies: [],
    });
    try {
      const before = runtime.metrics().devices[0]!;
      assert.deepEqual(
        { ...before, name: undefined },
        {
          device: 0,
          name: undefined,
          up: true,
          launches: { ok: 0, failed: 0 },
          kernelSeconds: 0,
          timedLaunches: 0,
          bytesIn: 0,
          bytesOut: 0,
          memoryHeldBytes: 0,
          memoryLimitBytes: runtime.devices[0]!.info.memoryBytes,
          queueDepth: 0,
        },
      );
      await work(runtime);
      const after = runtime.metrics().devices[0]!;
      assert.deepEqual(after.launches, { ok: 3, failed: 1 });
      assert.equal(after.timedLaunches, 4, 'launches after the first call are timed');
      assert.ok(after.kernelSeconds > 0);
      assert.equal(after.bytesIn, 4096);
      assert.equal(after.bytesOut, 64);
      assert.equal(after.memoryHeldBytes, 4096);
      // In flight: a launch that runs until its time limit.
      const device = runtime.devices[0]!;
      const busy = await device.kernel(await runtime.register(await fixtureBundle()), 'busy');
      const scratch = await device.alloc(64);
      const queue = device.queue();
      const running = queue.launch(busy, { teams: 1, timeoutMs: 300 }, [2_000_000_000, scratch]);
      assert.equal(runtime.metrics().devices[0]!.queueDepth, 1);
      await rejectsWith(running.done, 'TIMEOUT');
      await queue.finish().catch(() => {});
      await scratch.free();
      const done = runtime.metrics().devices[0]!;
      assert.equal(done.queueDepth, 0);
      assert.deepEqual(done.launches, { ok: 3, failed: 2 });
      assert.equal(done.memoryHeldBytes, 4096);
    } finally {
      await runtime.shutdown();
    }
  });

  it("on a proxy's device, agrees with the proxy's own /metrics", async () => {
    const proxy = await startProxy({ args: ['--metrics', '127.0.0.1:0'] });
    const runtime = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
    try {
      await work(runtime);
      const mine = runtime.metrics().devices[0]!;
      assert.deepEqual(mine.launches, { ok: 3, failed: 1 });
      assert.equal(mine.memoryHeldBytes, 4096);
      const theirs = await scrapeUntil(
        metricsUrl(proxy.output()),
        (s) => s.value('offload_device_launches_total', { device: '0', outcome: 'trap' }) === 1,
      );
      assert.equal(theirs.value('offload_device_launches_total', { device: '0', outcome: 'ok' }), mine.launches.ok);
      assert.equal(theirs.value('offload_device_bytes_total', { device: '0', direction: 'in' }), mine.bytesIn);
      assert.equal(theirs.value('offload_device_bytes_total', { device: '0', direction: 'out' }), mine.bytesOut);
      assert.equal(theirs.value('offload_device_memory_held_bytes', { device: '0' }), mine.memoryHeldBytes);
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('offload devices --watch prints every device live, --count times', async () => {
    const proxy = await startProxy();
    try {
      const result = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
        execFile(
          process.execPath,
          [
            '--import',
            'tsx',
            path.join(root, 'src/cli/main.ts'),
            'devices',
            '--watch',
            '--interval',
            '100',
            '--count',
            '3',
            '--proxies',
            proxy.address,
          ],
          {
            cwd: root,
            env: { ...process.env, OFFLOAD_TOKEN: proxy.token, OFFLOAD_WEBGPU: 'off', OFFLOAD_HOST_THREADS: '1' },
            timeout: 60_000,
          },
          (error, stdout, stderr) =>
            resolve({ code: typeof error?.code === 'number' ? error.code : error ? -1 : 0, stdout, stderr }),
        ),
      );
      assert.equal(result.code, 0, result.stderr);
      const prints = result.stdout.trim().split('\n\n');
      assert.equal(prints.length, 3, result.stdout);
      for (const print of prints) {
        const lines = print.split('\n');
        assert.match(lines[0]!, /^offload devices --watch {2}\d{4}-\d\d-\d\dT/);
        assert.match(lines[1]!, /^device +name +state +free +held +launches +failed +in queue +in \/ out$/);
        // The host device, then the proxy's, each up with its memory.
        assert.equal(lines.length, 4, print);
        assert.match(lines[3]!, /^1 +host .* up +[\d.]+ [KMG]iB of [\d.]+ [KMG]iB +0 B +0 +0 +0 +0 B \/ 0 B$/);
      }
    } finally {
      await proxy.stop();
    }
  });
});
