/**
 * A team's threads on the host device (src/plugins/host/team-threads.ts): they take turns on the
 * worker that claimed the team and switch at barriers. Threads that return early, a trap while
 * others wait at a barrier (the next team starts clean), a thread whose locals outgrow its
 * stack, and the scratch memory each launch borrows, on the workers and inline.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Offload, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';

async function withDevice(inline: 'never' | 'always', body: (runtime: Runtime) => Promise<void>): Promise<void> {
  const runtime = await Offload.init({
    host: { threads: 1, memoryBytes: 64 * 1024 * 1024, inline },
    webgpu: false,
    proxies: [],
  });
  try {
    await body(runtime);
  } finally {
    await runtime.shutdown();
  }
}

describe('threads of a team on the host device', { timeout: 120_000 }, () => {
  for (const inline of ['never', 'always'] as const) {
    it(`counts a thread that returned as arrived at the barrier (OFFLOAD_HOST_INLINE=${inline})`, async () => {
      await withDevice(inline, async (runtime) => {
        const device = runtime.devices[0]!;
        const kernel = await device.kernel(
          await runtime.register(await fixtureBundle('test/fixtures/team-threads.ts')),
          'early_return',
        );
        const out = await device.alloc(3 * 8 * 4);
        const q = device.queue();
        q.launch(kernel, { teams: 3, threads: 8, teamMemoryBytes: 8 * 4 }, [out]);
        const got = new Int32Array(24);
        q.read(out, got);
        await q.finish();
        assert.deepEqual(
          [...got],
          Array.from({ length: 24 }, (_, i) => (i % 2 === 1 ? -1 : 0 + 20 + 40 + 60)),
        );
      });
    });

    it(`fails a launch whose thread traps between barriers, and runs the next one from a clean start (OFFLOAD_HOST_INLINE=${inline})`, async () => {
      await withDevice(inline, async (runtime) => {
        const device = runtime.devices[0]!;
        const kernel = await device.kernel(
          await runtime.register(await fixtureBundle('test/fixtures/team-threads.ts')),
          'trap_at_barrier',
        );
        const out = await device.alloc(4 * 4 * 4);
        const q = device.queue();
        await rejectsWith(
          q.launch(kernel, { teams: 4, threads: 4 }, [2, 1, out]).done,
          'KERNEL_TRAP',
          /trap_at_barrier' trapped in team 2/,
        );
        await q.finish().catch(() => {});
        q.fill(out, 0);
        q.launch(kernel, { teams: 4, threads: 4 }, [-1, -1, out]);
        const got = new Int32Array(16);
        q.read(out, got);
        await q.finish();
        assert.deepEqual([...got], new Array(16).fill(1), 'every thread of every team ran both barriers');
      });
    });

    it(`refuses teams of several threads for a kernel whose way to barrier() recurses, and runs it with one (OFFLOAD_HOST_INLINE=${inline})`, async () => {
      await withDevice(inline, async (runtime) => {
        const device = runtime.devices[0]!;
        const kernel = await device.kernel(
          await runtime.register(await fixtureBundle('test/fixtures/team-threads.ts')),
          'deep_barrier',
        );
        const out = await device.alloc(4 * 8);
        const q = device.queue();
        // Its threads' saved stacks would have no bound: asyncify would write past any stack given.
        await rejectsWith(
          q.launch(kernel, { teams: 1, threads: 4 }, [400, out]).done,
          'UNSUPPORTED',
          /deep_barrier.*recurses.*no bound/,
        );
        await q.finish().catch(() => {});
        q.launch(kernel, { teams: 1, threads: 1 }, [3, out]);
        const got = new Float64Array(1);
        q.read(out, got);
        await q.finish();
        const deep = (depth: number, x: number): number => {
          if (depth === 0) return x;
          const [a, b, c] = [x * 1.5, x + 2.5, x - 0.5];
          return deep(depth - 1, a) + a * b - c;
        };
        assert.equal(got[0], deep(3, 0));
      });
    });

    it(`sizes each thread's stack by the kernel's deepest chain of frames to barrier() (OFFLOAD_HOST_INLINE=${inline})`, async () => {
      await withDevice(inline, async (runtime) => {
        const device = runtime.devices[0]!;
        const kernel = await device.kernel(
          await runtime.register(await fixtureBundle('test/fixtures/team-threads.ts')),
          'nested_barrier',
        );
        const out = await device.alloc(64 * 4);
        const q = device.queue();
        q.launch(kernel, { teams: 2, threads: 32 }, [out]);
        const got = new Int32Array(64);
        q.read(out, got);
        await q.finish();
        assert.deepEqual(
          [...got],
          Array.from({ length: 64 }, (_, i) => (i % 32) * 3 + 7 + (31 - (i % 32))),
        );
      });
    });
  }

  it('gives back the scratch memory (team memory and stacks) of every launch', async () => {
    await withDevice('never', async (runtime) => {
      const device = runtime.devices[0]!;
      const kernel = await device.kernel(
        await runtime.register(await fixtureBundle('test/fixtures/team-threads.ts')),
        'early_return',
      );
      const out = await device.alloc(2 * 256 * 4);
      const before = await device.memoryInfo();
      const q = device.queue();
      for (let i = 0; i < 50; i++) q.launch(kernel, { teams: 2, threads: 256, teamMemoryBytes: 256 * 4 }, [out]);
      await q.finish();
      const after = await device.memoryInfo();
      assert.equal(after.freeBytes, before.freeBytes);
      assert.equal(after.largestFreeBlockBytes, before.largestFreeBlockBytes);
    });
  });
});
