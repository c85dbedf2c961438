/**
 * Inline launches on the host device (src/plugins/host/inline.ts): which kernels may run on the
 * calling thread, that they behave there as on the workers (results, traps, time limits), that
 * auto learns in both directions, and that a proxy's client gets only provably bounded kernels
 * run inline.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { readCodeShapes } from '../src/build/wasm-code-shape.js';
import { decodeBundle } from '../src/image/bundle.js';
import { OffloadError } from '../src/errors.js';
import { Offload, type Kernel, type KernelArgument, type Runtime } from '../src/index.js';
import { HostDevice } from '../src/plugins/host/device.js';
import type { Grid, LaunchArg } from '../src/plugins/interface.js';
import { FORGIVE_AFTER_RUNS, InlinePolicy, inlineMode, LONG_RUN_US } from '../src/plugins/host/inline.js';
import { rejectsWith } from './conformance/suite.js';
import { bytesAllocated } from './helpers/allocation.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { hostileModule } from './helpers/hostile-images.js';
import { seededRandom } from './helpers/random.js';

const MiB = 1024 * 1024;

async function withRuntime<T>(
  inline: 'auto' | 'never' | 'always',
  body: (runtime: Runtime, lines: string[]) => Promise<T>,
): Promise<T> {
  const lines: string[] = [];
  const runtime = await Offload.init({
    host: { threads: 2, memoryBytes: 16 * MiB, inline },
    webgpu: false,
    proxies: [],
    info: (line) => lines.push(line),
  });
  try {
    return await body(runtime, lines);
  } finally {
    await runtime.shutdown();
  }
}

/**
 * Launches `kernel` until it has run inline `times` times in a row (a loaded machine may make the
 * first worker runs too slow to count as quick); fails after 50 launches.
 */
async function warmUp(
  runtime: Runtime,
  lines: string[],
  kernel: Kernel,
  args: KernelArgument[],
  times = 2,
): Promise<void> {
  const queue = runtime.devices[0]!.queue();
  for (let i = 0; i < 50; i++) {
    await queue.launch(kernel, { teams: 1 }, args).done;
    const where = places(lines, kernel.name);
    if (where.length >= times && where.slice(-times).every((place) => place === 'inline')) return;
  }
  assert.fail(
    `kernel ${kernel.name} never ran inline ${times} times in a row: ${places(lines, kernel.name).join(', ')}`,
  );
}

/** Where each launch of `kernel` ran, in order, from the OFFLOAD_INFO lines. */
function places(lines: readonly string[], kernel: string): string[] {
  const pattern = new RegExp(`launch of kernel ${kernel} with .*, ran on the (calling thread|workers)\\)$`);
  return lines.flatMap((line) => {
    const match = pattern.exec(line);
    return match ? [match[1] === 'workers' ? 'workers' : 'inline'] : [];
  });
}

describe('inline launches', { timeout: 120_000 }, () => {
  it('reads from the code which kernels are bounded and which synchronise', async () => {
    const wasm = decodeBundle(new Uint8Array(await readFile(await fixtureBundle()))).images.find(
      (image) => image.info.format === 'wasm',
    )!.bytes;
    const names = [
      'empty',
      'count_team',
      'trap_abort',
      'record_grid',
      'saxpy',
      'busy',
      'spin',
      'wait_flag',
      'call_host',
    ];
    const shapes = readCodeShapes(wasm, names);
    const shape = (name: string) => {
      const { bounded, synchronizes } = shapes.get(name)!;
      return { bounded, synchronizes };
    };
    assert.deepEqual(shape('empty'), { bounded: true, synchronizes: false });
    assert.equal(shapes.get('call_host')!.callsHost, true, 'hostCall: never inline');
    assert.equal(shapes.get('saxpy')!.callsHost, false);
    assert.deepEqual(shape('count_team'), { bounded: true, synchronizes: true }, 'an atomic add, no loop');
    assert.deepEqual(shape('trap_abort'), { bounded: true, synchronizes: false }, 'abort returns at once (it throws)');
    assert.deepEqual(shape('saxpy'), { bounded: false, synchronizes: false });
    assert.deepEqual(shape('busy'), { bounded: false, synchronizes: false });
    assert.deepEqual(shape('spin'), { bounded: false, synchronizes: true });
    assert.deepEqual(shape('wait_flag'), { bounded: false, synchronizes: true });
    // Hand-made code: a loop, an atomic wait, a bulk fill, an opcode the reader does not know.
    const made = (body: number[]) => {
      const { bounded, synchronizes } = readCodeShapes(hostileModule({ body }), ['k']).get('k')!;
      return { bounded, synchronizes };
    };
    assert.deepEqual(made([0x03, 0x40, 0x0c, 0x00, 0x0b]), { bounded: false, synchronizes: false }, 'loop: br 0');
    assert.deepEqual(
      made([0x41, 0x00, 0x41, 0x00, 0x42, 0x7f, 0xfe, 0x01, 0x02, 0x00, 0x1a]),
      { bounded: false, synchronizes: true },
      'memory.atomic.wait32',
    );
    assert.deepEqual(
      made([0x41, 0x00, 0x41, 0x00, 0x41, 0x7f, 0xfc, 0x0b, 0x00]),
      { bounded: false, synchronizes: false },
      'memory.fill',
    );
    assert.deepEqual(made([0xff]), { bounded: false, synchronizes: true }, 'unknown opcode');
    assert.deepEqual(
      made([0x10, 0x00]),
      { bounded: false, synchronizes: false },
      'a call into the module (here: itself)',
    );
    assert.deepEqual(readCodeShapes(hostileModule({}), ['missing']).get('missing'), {
      bounded: false,
      synchronizes: true,
      codeBytes: 0,
      callsHost: true,
      barrierStackBytes: undefined,
    });
  });

  it('reads hostile code without hanging or failing other than INCOMPATIBLE_IMAGE', async () => {
    const wasm = decodeBundle(new Uint8Array(await readFile(await fixtureBundle()))).images.find(
      (image) => image.info.format === 'wasm',
    )!.bytes;
    const names = ['empty', 'saxpy', 'count_team', 'spin'];
    const random = seededRandom(13);
    let read = 0;
    const started = performance.now();
    for (let i = 0; i < 3000; i++) {
      const mutated = Uint8Array.from(wasm);
      for (let flips = 1 + Math.floor(random() * 4); flips > 0; flips--)
        mutated[Math.floor(random() * mutated.length)] = Math.floor(random() * 256);
      try {
        const shapes = readCodeShapes(mutated, names);
        assert.equal(shapes.size, names.length);
        read++;
      } catch (error) {
        assert.ok(
          error instanceof OffloadError && error.code === 'INCOMPATIBLE_IMAGE',
          `mutation ${i}: ${String(error)}`,
        );
      }
    }
    assert.ok(read > 0, 'some mutations still parse');
    assert.ok(performance.now() - started < 20_000);
  });

  it('runs a bounded kernel inline at once, and a looping one on the workers until a quick run there', async () => {
    await withRuntime('auto', async (runtime, lines) => {
      const device = runtime.devices[0]!;
      const library = await runtime.register(await fixtureBundle());
      const [empty, iota] = await Promise.all([device.kernel(library, 'empty'), device.kernel(library, 'iota_i32')]);
      const buffer = await device.alloc(64);
      const q = device.queue();
      for (let i = 0; i < 3; i++) await q.launch(empty, { teams: 4 }, []).done;
      // Its first launch already (a run the machine's load stretches past the budget may send the next ones to the workers).
      assert.equal(places(lines, 'empty')[0], 'inline');
      await warmUp(runtime, lines, iota, [16, buffer]);
      assert.equal(places(lines, 'iota_i32')[0], 'workers', 'a kernel with a loop starts on the workers');
      // Far more teams than its time per team fits in the budget: back to the workers.
      await q.launch(iota, { teams: 1_000_000 }, [16, buffer]).done;
      assert.equal(places(lines, 'iota_i32').at(-1), 'workers');
      const out = new Int32Array(16);
      await q.read(buffer, out).done;
      assert.deepEqual(
        Array.from(out),
        Array.from({ length: 16 }, (_, i) => i),
      );
    });
  });

  it('gives the same results and the same trap texts as the workers', async () => {
    const run = (inline: 'never' | 'always') =>
      withRuntime(inline, async (runtime) => {
        const device = runtime.devices[0]!;
        const library = await runtime.register(await fixtureBundle());
        const [grid, abort, oob] = await Promise.all(
          ['record_grid', 'trap_abort', 'trap_oob'].map((name) => device.kernel(library, name)),
        );
        const buffer = await device.alloc(4 * 4 * 8);
        const q = device.queue();
        await q.launch(grid!, { teams: 8 }, [buffer]).done;
        const out = new Int32Array(32);
        await q.read(buffer, out).done;
        const failures = [];
        for (const [kernel, args] of [
          [abort!, [1]],
          [oob!, [0xfffffff0]],
        ] as const) {
          const queue = device.queue();
          // One team: with more, whichever worker traps first names its team.
          failures.push((await rejectsWith(queue.launch(kernel, { teams: 1 }, [...args]).done, 'KERNEL_TRAP')).message);
        }
        return { grid: Array.from(out), failures };
      });
    const workers = await run('never');
    const inline = await run('always');
    assert.deepEqual(inline, workers);
    assert.match(inline.failures[0]!, /trapped in team 0: abort: flag must be zero/);
  });

  it('learns: a kernel that turns long freezes the program once, then runs on the workers', async () => {
    await withRuntime('auto', async (runtime, lines) => {
      const device = runtime.devices[0]!;
      const busy = await device.kernel(await runtime.register(await fixtureBundle()), 'busy');
      const out = await device.alloc(8);
      await warmUp(runtime, lines, busy, [10, out]);
      const before = places(lines, 'busy').length;
      // Now ~20 ms or more a launch: the first is inline (it was short until then), the others not.
      const q = device.queue();
      for (let i = 0; i < 6; i++) await q.launch(busy, { teams: 1 }, [20_000_000, out]).done;
      assert.deepEqual(places(lines, 'busy').slice(before), [
        'inline',
        'workers',
        'workers',
        'workers',
        'workers',
        'workers',
      ]);
    });
  });

  it('traces an inline launch from its enqueueing to its end', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'offload-inline-'));
    const file = join(dir, 'trace.json');
    try {
      const lines: string[] = [];
      const runtime = await Offload.init({
        host: { threads: 1, memoryBytes: 16 * MiB, inline: 'always' },
        webgpu: false,
        proxies: [],
        trace: file,
        info: (line) => lines.push(line),
      });
      const device = runtime.devices[0]!;
      const busy = await device.kernel(await runtime.register(await fixtureBundle()), 'busy');
      const out = await device.alloc(8);
      const started = performance.now();
      await device.queue().launch(busy, { teams: 1 }, [20_000_000, out]).done;
      const took = performance.now() - started;
      await runtime.shutdown();
      assert.deepEqual(places(lines, 'busy'), ['inline']);
      const events = (JSON.parse(await readFile(file, 'utf8')) as { traceEvents: { name: string; dur?: number }[] })
        .traceEvents;
      const traced = events.find((event) => event.name === 'busy')!;
      assert.ok(
        traced.dur! / 1000 >= took * 0.9,
        `the trace shows ${traced.dur! / 1000} ms for a launch that took ${took} ms`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('checks a time limit after an inline run, and runs the next launch on the workers', async () => {
    await withRuntime('auto', async (runtime, lines) => {
      const device = runtime.devices[0]!;
      const busy = await device.kernel(await runtime.register(await fixtureBundle()), 'busy');
      const out = await device.alloc(8);
      await warmUp(runtime, lines, busy, [10, out]);
      const first = await rejectsWith(
        device.queue().launch(busy, { teams: 1, timeoutMs: 5 }, [50_000_000, out]).done,
        'TIMEOUT',
      );
      assert.match(
        first.message,
        /time limit of 5 ms on the calling thread, where it cannot be stopped: it ran to its end in [\d.]+ ms/,
      );
      const second = await rejectsWith(
        device.queue().launch(busy, { teams: 1, timeoutMs: 5 }, [2_000_000_000, out]).done,
        'TIMEOUT',
      );
      assert.match(second.message, /the workers running it were stopped and replaced/);
      // A device whose every launch is inline cannot stop one, and says so.
      await withRuntime('always', async (inlineOnly) => {
        const inlineDevice = inlineOnly.devices[0]!;
        assert.equal(inlineDevice.info.launchTimeouts, false);
        const kernel = await inlineDevice.kernel(await inlineOnly.register(await fixtureBundle()), 'busy');
        await rejectsWith(
          Promise.resolve().then(() => inlineDevice.queue().launch(kernel, { teams: 1, timeoutMs: 5 }, [1, out]).done),
          'UNSUPPORTED',
          /cannot stop a running launch/,
        );
      });
    });
  });

  it("runs a proxy client's kernel inline only when its code proves it short", async () => {
    const wasm = decodeBundle(new Uint8Array(await readFile(await fixtureBundle())));
    const image = wasm.images.find((found) => found.info.format === 'wasm')!;
    const device = HostDevice.create({ threads: 1, memoryBytes: 16 * MiB, inline: 'auto' });
    try {
      const client = device.context();
      const loaded = await client.loadImage({
        name: 'fixtures',
        info: image.info,
        bytes: image.bytes,
        entries: wasm.manifest.entries,
      });
      const buffer = await client.alloc(64, 'device');
      const queue = client.createQueue();
      const ptr = { type: 'ptr', alloc: buffer, offset: 0 } as const;
      const grid = { teams: 1, threads: 1, teamDims: [1, 1, 1], threadDims: [1, 1, 1], teamMemoryBytes: 0 } as Grid;
      const launched = (name: string, args: LaunchArg[]) =>
        new Promise<string | undefined>((resolve, reject) =>
          queue.launch(loaded.kernels.get(name)!, grid, args, {
            launchSettled: (error, where) =>
              error === undefined
                ? resolve(where)
                : reject(error instanceof Error ? error : new Error('the launch failed')),
          }),
        );
      const where: unknown[] = [];
      for (let i = 0; i < 3; i++) where.push(await launched('empty', []));
      for (let i = 0; i < 3; i++) where.push(await launched('iota_i32', [{ type: 'i32', value: 16 }, ptr]));
      assert.deepEqual(where, [...Array(3).fill('on the calling thread'), ...Array(3).fill('on the workers')]);
      await client.close();
    } finally {
      await device.close();
    }
  });

  it('allocates nothing per pipelined launch but its Event, on an idle queue and behind a held one', async () => {
    // Every launch inline, so that the machine's load cannot move some to the workers (whose
    // launches allocate what a futex round trip needs); OFFLOAD_INFO off: its lines are strings.
    const runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 16 * MiB, inline: 'always' },
      webgpu: false,
      proxies: [],
    });
    try {
      const device = runtime.devices[0]!;
      const library = await runtime.register(await fixtureBundle());
      const mixed = await device.kernel(library, 'mixed');
      const out = await device.alloc(32);
      const queue = device.queue();
      const grid = { teams: 1 };
      const args: KernelArgument[] = [7, 2n ** 40n, 1.5, -2.25, out];
      const launches = 20_000;
      const pipeline = async (held: boolean): Promise<void> => {
        // A host function holding the queue: every launch after it waits in the queue's rings.
        if (held) queue.hostFunction(() => new Promise((resolve) => setTimeout(resolve, 2)));
        for (let i = 0; i < launches; i++) queue.launch(mixed, grid, args);
        await queue.finish();
      };
      for (const held of [false, true]) {
        // Warm: optimised, and the queue's rings grown to the pipeline's depth.
        await pipeline(held);
        await pipeline(held);
        // The least of three: code V8 has not optimised yet boxes every number it touches.
        const perLaunch: number[] = [];
        for (let run = 0; run < 3; run++) perLaunch.push((await bytesAllocated(() => pipeline(held))) / launches);
        // The Event is 128 bytes; before launches stopped allocating, one allocated about 2,000 (4,700 under tsx).
        assert.ok(
          Math.min(...perLaunch) < 400,
          `${held ? 'behind a held queue' : 'on an idle queue'}: ${perLaunch.map((b) => b.toFixed(0)).join(', ')} bytes a launch`,
        );
      }
      const back = new DataView(new ArrayBuffer(32));
      await queue.read(out, new Uint8Array(back.buffer)).done;
      assert.deepEqual(
        [back.getInt32(0, true), back.getBigInt64(8, true), back.getFloat32(16, true), back.getFloat64(24, true)],
        [7, 2n ** 40n, 1.5, -2.25],
      );
    } finally {
      await runtime.shutdown();
    }
  });

  it('counts no run of provably short code slowed by the machine, and takes strikes back after runs within budget', () => {
    const provable = { bounded: true, synchronizes: false, codeBytes: 200, callsHost: false, barrierStackBytes: 0 };
    const learned = { ...provable, bounded: false };
    /** Launches placed on the workers (each completing quickly there) before one runs inline again. */
    const onWorkersUntilInline = (policy: InlinePolicy): number => {
      let onWorkers = 0;
      while (!policy.choose(1, undefined)) {
        policy.ranOnPool(1, 100);
        assert.ok(++onWorkers <= 1 << 16, 'the policy never tries inline again');
      }
      return onWorkers;
    };
    const preempted = 5 * LONG_RUN_US;

    // Bounded code: a run of milliseconds a team was its thread preempted (a slice of another
    // process), and is not counted; a run over budget that the code could take sends 16 launches
    // to the workers, however often, and is never a strike.
    const short = new InlinePolicy('auto', provable, false);
    assert.equal(short.choose(1, undefined), true);
    short.ranInline(1, 40); // the run that compiled it
    for (let episode = 0; episode < 20; episode++) {
      short.ranInline(1, preempted);
      assert.equal(onWorkersUntilInline(short), 0, `episode ${episode}: a preempted run sends nothing to the workers`);
      short.ranInline(1, 60);
      assert.equal(onWorkersUntilInline(short), 16, `episode ${episode}: 16 launches on the workers, never more`);
      assert.equal(short.choose(16, undefined), false, 'timed at 60 us a team: 16 teams are over budget');
      short.ranOnPool(16, 100);
      assert.equal(short.choose(16, undefined), true, 'a quick run on the workers: try inline again');
      short.ranInline(16, 16 * 100);
      assert.equal(onWorkersUntilInline(short), 16);
      short.ranInline(1, 2);
    }
    assert.equal(short.strikeCount, 0);

    // Code not proven short (the program's own, learnt): a long run is a strike, each doubling
    // the launches sent to the workers; runs within budget take the strikes back one by one.
    const long = new InlinePolicy('auto', learned, true);
    assert.equal(long.choose(1, undefined), false, 'not timed yet: the workers first');
    long.ranOnPool(1, 100);
    assert.equal(long.choose(1, undefined), true);
    long.ranInline(1, 3); // compiles it
    for (const [strike, skipped] of [
      [1, 16],
      [2, 32],
      [3, 64],
    ] as const) {
      assert.equal(long.choose(1, undefined), true);
      long.ranInline(1, preempted);
      assert.equal(long.strikeCount, strike);
      assert.equal(onWorkersUntilInline(long), skipped);
    }
    for (let run = 1; run < FORGIVE_AFTER_RUNS; run++) long.ranInline(1, 3);
    assert.equal(long.strikeCount, 3, 'one run short of a strike taken back');
    long.ranInline(1, 60); // over budget, not long: the count starts again
    assert.equal(onWorkersUntilInline(long), 16);
    for (let run = 1; run < FORGIVE_AFTER_RUNS; run++) long.ranInline(1, 3);
    assert.equal(long.strikeCount, 3);
    long.ranInline(1, 3);
    assert.equal(long.strikeCount, 2);
    for (let run = 0; run < 2 * FORGIVE_AFTER_RUNS; run++) long.ranInline(1, 3);
    assert.equal(long.strikeCount, 0);
    long.ranInline(1, preempted);
    assert.equal(long.strikeCount, 1);
    assert.equal(onWorkersUntilInline(long), 16, 'the strikes taken back no longer double the launches sent away');
  });

  it('takes OFFLOAD_HOST_INLINE and refuses anything but auto, never and always', () => {
    assert.equal(inlineMode({}), 'auto');
    assert.equal(inlineMode({ OFFLOAD_HOST_INLINE: 'never' }), 'never');
    assert.throws(
      () => inlineMode({ OFFLOAD_HOST_INLINE: 'sometimes' }),
      /OFFLOAD_HOST_INLINE must be one of auto, never, always, not 'sometimes'/,
    );
  });
});
