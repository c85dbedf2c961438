/** Behaviour specific to the host device: its launch path under load, its workers, its configuration. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { buildBundle } from '../src/build/compile.js';
import { Offload, type OffloadError, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';

const small = { threads: 2, memoryBytes: 64 * 1024 * 1024 };
/** Every launch on the workers (none inline): the tests of the launch ring. */
const ringOnly = { host: { ...small, inline: 'never' as const } };

async function withRuntime<T>(body: (runtime: Runtime) => Promise<T>, options = {}): Promise<T> {
  const runtime = await Offload.init({ host: small, ...options });
  try {
    return await body(runtime);
  } finally {
    await runtime.shutdown();
  }
}

describe('host device', { timeout: 180_000 }, () => {
  it('survives 100,000 back-to-back launches, each run exactly once', async () => {
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      const add = await device.kernel(await runtime.register(await fixtureBundle()), 'add_i32');
      const counter = await device.alloc(4);
      const q = device.queue();
      q.write(counter, new Int32Array(1));
      // Pipelined: 50,000 launches in flight through 64 ring slots.
      for (let i = 0; i < 50_000; i++) q.launch(add, { teams: 2 }, [1, 1, counter]);
      await q.finish();
      // Sequential: 50,000 launches, each awaited before the next (the lost-wake-up pattern).
      for (let i = 0; i < 50_000; i++) await q.launch(add, { teams: 1 }, [1, 1, counter]).done;
      const out = new Int32Array(1);
      q.read(counter, out);
      await q.finish();
      assert.equal(out[0], 100_000);
    }, ringOnly);
  });

  it('runs teams of concurrent launches from many queues to completion', async () => {
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      const add = await device.kernel(await runtime.register(await fixtureBundle()), 'add_i32');
      const n = 1000;
      const buffers = await Promise.all(Array.from({ length: 8 }, () => device.alloc(n * 4)));
      const queues = buffers.map(() => device.queue());
      queues.forEach((q, i) => q.write(buffers[i]!, new Int32Array(n)));
      for (let round = 0; round < 100; round++)
        queues.forEach((q, i) => q.launch(add, { teams: 1 + ((round + i) % 7) }, [n, 1, buffers[i]!]));
      const results = buffers.map(() => new Int32Array(n));
      queues.forEach((q, i) => q.read(buffers[i]!, results[i]!));
      await Promise.all(queues.map((q) => q.finish()));
      for (const result of results) assert.ok(result.every((v) => v === 100));
    }, ringOnly);
  });

  it('replaces a worker that dies: the launch it ran fails with KERNEL_TRAP naming it, the device goes on', async () => {
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      const lib = await runtime.register(await fixtureBundle());
      const busy = await device.kernel(lib, 'busy');
      const iota = await device.kernel(lib, 'iota_i32');
      const scratch = await device.alloc(64);
      const q = device.queue();
      const running = q.launch(busy, { teams: 1 }, [2_000_000_000, scratch]);
      // Kill the worker running it from outside, as a crash would (wait until one has claimed it).
      const pool = (
        device.plugin as unknown as {
          pool: { workers: { terminate(): Promise<number> }[]; ring: { i32: Int32Array; cell(w: number): number } };
        }
      ).pool;
      const holder = async (): Promise<number> => {
        for (;;) {
          const index = pool.workers.findIndex((_, w) => Atomics.load(pool.ring.i32, pool.ring.cell(w)) < 0);
          if (index >= 0) return index;
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
      };
      const victim = await holder();
      await pool.workers[victim]!.terminate();
      await rejectsWith(
        running.done,
        'KERNEL_TRAP',
        new RegExp(`kernel 'busy' lost a team: host worker ${victim} exited .* the worker was replaced`),
      );
      await q.finish().catch(() => {});
      // The device goes on: every worker is back, launches and copies work.
      q.launch(iota, { teams: 4 }, [16, scratch]);
      const out = new Int32Array(16);
      q.read(scratch, out);
      await q.finish();
      assert.deepEqual(
        [...out],
        Array.from({ length: 16 }, (_, i) => i),
      );
      assert.equal(device.plugin.lost, undefined);
      await (await device.alloc(8)).free();
    });
  });

  it('shuts down within its grace period while a kernel loops, failing what is left with DEVICE_LOST', async () => {
    const runtime = await Offload.init({ host: small });
    const device = runtime.devices[0]!;
    const spin = await device.kernel(await runtime.register(await fixtureBundle()), 'spin');
    const flag = await device.alloc(4);
    const q = device.queue();
    q.write(flag, new Int32Array(1));
    const looping = q.launch(spin, { teams: 2 }, [flag]);
    const behind = q.read(flag, new Int32Array(1));
    const started = performance.now();
    await runtime.shutdown({ graceMs: 200 });
    const took = performance.now() - started;
    assert.ok(took >= 200 && took < 5000, `shutdown took ${took.toFixed(0)} ms`);
    await rejectsWith(looping.done, 'DEVICE_LOST');
    await rejectsWith(behind.done, 'DEVICE_LOST');
    await rejectsWith(device.alloc(8), 'DEVICE_LOST', /shut down/);
  });

  it('ends a context while its kernel loops: that launch stops, the other contexts go on', async () => {
    await withRuntime(async (runtime) => {
      const bundle = await fixtureBundle();
      const context = await runtime.createContext();
      const looping = context.devices[0]!;
      const spin = await looping.kernel(await context.register(bundle), 'spin');
      const flag = await looping.alloc(4);
      const q = looping.queue();
      q.write(flag, new Int32Array(1));
      const stuck = q.launch(spin, { teams: 2 }, [flag]);
      const started = performance.now();
      await context.shutdown({ graceMs: 100 });
      assert.ok(performance.now() - started < 5000, 'the context ended although its kernel loops');
      await rejectsWith(stuck.done, 'DEVICE_LOST', /context was shut down/);
      const device = runtime.devices[0]!;
      const iota = await device.kernel(await runtime.register(bundle), 'iota_i32');
      const out = await device.alloc(64);
      const result = new Int32Array(16);
      const q2 = device.queue();
      q2.launch(iota, { teams: 2 }, [16, out]);
      q2.read(out, result);
      await q2.finish();
      assert.equal(result[15], 15, 'the device goes on for the other contexts');
    });
  });

  it('takes a default time limit from OFFLOAD_LAUNCH_TIMEOUT, and refuses one that is not a number of milliseconds', async () => {
    const previous = process.env.OFFLOAD_LAUNCH_TIMEOUT;
    try {
      for (const bad of ['0', '-1', '1.5', '10s', 'x'.repeat(10_000), String(2 ** 31)]) {
        process.env.OFFLOAD_LAUNCH_TIMEOUT = bad;
        const error = await rejectsWith(
          Offload.init({ host: small }),
          'INVALID_ARGUMENT',
          /OFFLOAD_LAUNCH_TIMEOUT must be a whole number of milliseconds/,
        );
        assert.ok(error.message.length < 200, 'the message does not echo the value unbounded');
      }
      process.env.OFFLOAD_LAUNCH_TIMEOUT = '150';
      await withRuntime(async (runtime) => {
        const device = runtime.devices[0]!;
        const spin = await device.kernel(await runtime.register(await fixtureBundle()), 'spin');
        const flag = await device.alloc(4);
        const q = device.queue();
        q.write(flag, new Int32Array(1));
        await rejectsWith(q.launch(spin, { teams: 1 }, [flag]).done, 'TIMEOUT', /time limit of 150 ms/);
        await q.finish().catch(() => {});
      });
    } finally {
      if (previous === undefined) delete process.env.OFFLOAD_LAUNCH_TIMEOUT;
      else process.env.OFFLOAD_LAUNCH_TIMEOUT = previous;
    }
  });

  it('prints one OFFLOAD_INFO line per load, copy and launch', async () => {
    const lines: string[] = [];
    await withRuntime(
      async (runtime) => {
        const device = runtime.devices[0]!;
        const library = await runtime.register(await fixtureBundle());
        const iota = await device.kernel(library, 'iota_i32');
        const empty = await device.kernel(library, 'empty');
        const buffer = await device.alloc(64);
        const q = device.queue();
        q.write(buffer, new Int32Array(16));
        q.launch(iota, { teams: 4 }, [16, buffer]);
        q.launch(empty, { teams: 1 }, []);
        q.read(buffer, new Int32Array(16), { offset: 0 });
        await q.finish();
      },
      { info: (line: string) => lines.push(line) },
    );
    const has = (pattern: RegExp) =>
      assert.ok(
        lines.some((line) => pattern.test(line)),
        `no line matches ${pattern}:\n${lines.join('\n')}`,
      );
    has(/^offload: device 0 info: loaded image of 'kernels-\w+' \(wasm, .* \d+ kernels\) in [\d.]+ ms$/);
    has(/copying 64 bytes from host to device, TgtPtr=0x[0-9a-f]{8}\+0 \(queue \d+\)/);
    has(/copying 64 bytes from device to host/);
    // A kernel with a loop runs on the workers until it has shown itself short; one without, inline.
    has(
      /launch of kernel iota_i32 with 4 teams and 1 threads completed [\d.]+ ms after enqueue \(queue \d+, ran on the workers\)$/,
    );
    has(
      /launch of kernel empty with 1 teams and 1 threads completed [\d.]+ ms after enqueue \(queue \d+, ran on the calling thread\)$/,
    );
    has(/unloaded image/);
  });

  it('takes its worker count and memory from options and refuses bad settings', async () => {
    await withRuntime(async (runtime) => assert.equal(runtime.devices[0]!.info.computeUnits, 3), {
      host: { threads: 3, memoryBytes: 8 * 1024 * 1024 },
    });
    await rejectsWith(Offload.init({ host: { threads: 0 } }), 'INVALID_ARGUMENT', /threads/);
    await rejectsWith(Offload.init({ host: { threads: 1, memoryBytes: 1000 } }), 'INVALID_ARGUMENT', /memory/);
    const previous = process.env.OFFLOAD_HOST_THREADS;
    process.env.OFFLOAD_HOST_THREADS = 'many';
    try {
      await rejectsWith(Offload.init(), 'INVALID_ARGUMENT', /OFFLOAD_HOST_THREADS/);
    } finally {
      if (previous === undefined) delete process.env.OFFLOAD_HOST_THREADS;
      else process.env.OFFLOAD_HOST_THREADS = previous;
    }
  });

  it('refuses a direct view of memory outside its allocation (the proxy streams reads from such views)', async () => {
    await withRuntime(async (runtime) => {
      const [a, b] = [await runtime.devices[0]!.alloc(256), await runtime.devices[0]!.alloc(256)];
      assert.equal(a.directView(0, 256)?.byteLength, 256);
      assert.equal(a.directView(200, 56)?.byteLength, 56);
      for (const [offset, bytes] of [
        [0, 257],
        [256, 1],
        [255, 2],
        [1, 2 ** 40],
        [-1, 1],
        [0, -1],
      ] as const) {
        assert.throws(
          () => a.directView(offset, bytes),
          (e: OffloadError) =>
            e.code === 'OUT_OF_BOUNDS' && /not lie inside its allocation of 256 bytes/.test(e.message),
          `a view of ${bytes} bytes at ${offset}`,
        );
      }
      await Promise.all([a.free(), b.free()]);
    });
  });

  it('refuses a second image whose static data overlaps, until the first is unregistered', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'offload-static-'));
    const source = (message: string) => `export function check(flag: i32): void { assert(flag == 0, "${message}"); }\n`;
    await writeFile(join(dir, 'a.ts'), source('first image'));
    await writeFile(join(dir, 'b.ts'), source('second image, other bytes'));
    const a = await buildBundle({ sources: [join(dir, 'a.ts')], output: join(dir, 'a'), staticBase: 0x80000 });
    const b = await buildBundle({ sources: [join(dir, 'b.ts')], output: join(dir, 'b'), staticBase: 0x80000 });
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      const first = await runtime.register(a.path);
      const second = await runtime.register(b.path);
      const check = await device.kernel(first, 'check');
      await rejectsWith(device.kernel(second, 'check'), 'INCOMPATIBLE_IMAGE', /overlaps image 'a'/);
      const q = device.queue();
      await rejectsWith(q.launch(check, { teams: 1 }, [1]).done, 'KERNEL_TRAP', /first image/);
      await q.finish().catch(() => {});
      await first.unregister();
      const other = await device.kernel(second, 'check');
      await rejectsWith(q.launch(other, { teams: 1 }, [1]).done, 'KERNEL_TRAP', /second image, other bytes/);
      await q.finish().catch(() => {});
    });
  });

  /**
   * Runs a program (`node <flags> --import tsx --input-type=module -e`) that launches iota_i32
   * over 16 elements with `hostOptions` and prints their sum, then `end` (its last statements).
   */
  async function iotaProgram(flags: string[], hostOptions: string, end: string): Promise<string> {
    const bundle = await fixtureBundle();
    const script = `
      import { Offload } from ${JSON.stringify(new URL('../src/index.ts', import.meta.url).href)};
      const runtime = await Offload.init({ host: { threads: 2, memoryBytes: 8 * 1024 * 1024, ${hostOptions} } });
      const device = runtime.devices[0];
      const iota = await device.kernel(await runtime.register(${JSON.stringify(bundle)}), 'iota_i32');
      const buffer = await device.alloc(64);
      const q = device.queue();
      q.launch(iota, { teams: 2 }, [16, buffer]);
      const out = new Int32Array(16);
      q.read(buffer, out);
      await q.finish();
      ${end}
    `;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [...flags, '--import', 'tsx', '--input-type=module', '-e', script],
      { timeout: 60_000 },
    );
    return stdout;
  }

  it('lets a program exit that never shuts its runtime down', async () => {
    const stdout = await iotaProgram([], '', "console.log('sum', out.reduce((a, b) => a + b));");
    assert.match(stdout, /sum 120/);
  });

  it('runs its workers in a program started with V8 flags (node --expose-gc --max-old-space-size=N)', async () => {
    // Node refuses such flags in a worker's execArgv; they hold for the workers anyway.
    const stdout = await iotaProgram(
      ['--expose-gc', '--max-old-space-size=512'],
      "inline: 'never'",
      "console.log('sum', out.reduce((a, b) => a + b), typeof gc); await runtime.shutdown();",
    );
    assert.match(stdout, /sum 120 function/);
  });
});
