/**
 * The host device (wasm workers over one shared memory) against the raw JavaScript it is
 * built from: TypedArray.set for copies, a bare Atomics round trip for launches, the same wasm
 * kernel on the main thread for compute (DESIGN section 7).
 */
import { PAGE_BYTES, STATIC_WINDOW_END } from '../../src/image/wasm-abi.js';
import type { Device, Library, Queue, Runtime } from '../../src/index.js';
import { Offload } from '../offload.js';
import { spinMicros } from '../../src/plugins/host/worker-pool.js';
import { AtomicsRoundTrip } from '../atomics-round-trip.js';
import { benchBundle } from '../kernel-bundle.js';
import { instantiateOnMainThread } from '../main-thread-image.js';
import { measure, type Plan } from '../measure.js';
import { simdRows } from '../simd.js';
import type { Row, Suite } from '../suite.js';

const MiB = 1024 * 1024;
const COPY_BYTES = 64 * MiB;
const SAXPY_N = 2 ** 24;
const PIPELINED_LAUNCHES = 20_000;
/** Device memory: the copy buffer plus saxpy's x and y. Baselines get memories of this size too. */
const MEMORY_BYTES = 256 * MiB;
/** Where baselines put their data in their own memory: the first address the device hands out. */
const RAW_ADDRESS = STATIC_WINDOW_END;

/** A shared wasm memory like the device's, but the runtime's nowhere. */
function rawMemory(): WebAssembly.Memory {
  const pages = MEMORY_BYTES / PAGE_BYTES;
  return new WebAssembly.Memory({ initial: pages, maximum: pages, shared: true });
}

interface Setup {
  device: Device;
  queue: Queue;
  library: Library;
  bundlePath: string;
  plan: Plan;
}

// The first warm-up run of each copy commits the pages of both memories, so no timed run pays
// page faults.
async function copies({ device, queue, plan }: Setup): Promise<Row[]> {
  const buffer = await device.alloc(COPY_BYTES);
  const src = new Uint8Array(COPY_BYTES).fill(0xa5);
  const dst = new Uint8Array(COPY_BYTES).fill(0x5a);
  const raw = new Uint8Array(rawMemory().buffer);
  const [write, rawWrite, read, rawRead] = await measure(plan, [
    {
      label: 'queue.write(buffer, 64 MiB Uint8Array) + finish()',
      count: COPY_BYTES,
      run: () => {
        queue.write(buffer, src);
        return queue.finish();
      },
    },
    {
      label: 'new Uint8Array(sharedWasmMemory.buffer).set(src, offset), on a separate 256 MiB shared memory',
      count: COPY_BYTES,
      run: () => raw.set(src, RAW_ADDRESS),
    },
    {
      label: 'queue.read(buffer, 64 MiB Uint8Array) + finish()',
      count: COPY_BYTES,
      run: () => {
        queue.read(buffer, dst);
        return queue.finish();
      },
    },
    {
      label: 'dst.set(memView.subarray(offset, offset + 64 MiB)), same memory',
      count: COPY_BYTES,
      run: () => dst.set(raw.subarray(RAW_ADDRESS, RAW_ADDRESS + COPY_BYTES)),
    },
  ]);
  await buffer.free();
  const goal = { op: '>=', value: 0.9 } as const;
  return [
    { name: 'write 64 MiB to the device', unit: 'GB/s', offload: write!, baseline: rawWrite!, goal },
    { name: 'read 64 MiB from the device', unit: 'GB/s', offload: read!, baseline: rawRead!, goal },
  ];
}

async function launches({ device, queue, library, plan }: Setup): Promise<Row[]> {
  const empty = await device.kernel(library, 'empty');
  const rounds = plan.quick ? 500 : 2000;
  const spin = spinMicros();
  const raw = new AtomicsRoundTrip();
  const roundTrips = await measure(plan, [
    {
      label: 'await queue.launch(empty, { teams: 1 }, []).done, one after the other',
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await queue.launch(empty, { teams: 1 }, []).done;
      },
    },
    {
      label:
        '(a) raw round trip to one worker: Atomics.store + notify; the worker, in Atomics.wait, answers with store + notify; the main thread awaits Atomics.waitAsync',
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await raw.once(0);
      },
    },
    {
      label: `(b) the same raw round trip, the main thread polling ${spin} us before Atomics.waitAsync (the runtime's technique, OFFLOAD_HOST_SPIN_US)`,
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await raw.once(spin);
      },
    },
  ]).finally(() => raw.close());
  const [sequential, waitAsyncOnly, polled] = roundTrips;
  const [pipelined] = await measure(plan, [
    {
      label: `${PIPELINED_LAUNCHES.toLocaleString('en-US')} x queue.launch(empty, { teams: 1 }, []) without awaiting, then await finish()`,
      count: PIPELINED_LAUNCHES,
      run: () => {
        for (let i = 0; i < PIPELINED_LAUNCHES; i++) queue.launch(empty, { teams: 1 }, []);
        return queue.finish();
      },
    },
  ]);
  return [
    {
      name: 'empty-kernel launch round trip vs raw (a)',
      unit: 'us',
      offload: sequential!,
      baseline: waitAsyncOnly!,
      goal: { op: '<=', value: 0.5, absolute: 3, note: 'short kernels run inline' },
    },
    {
      name: 'empty-kernel launch round trip vs raw (b)',
      unit: 'us',
      offload: sequential!,
      baseline: polled!,
      goal: 'none (the goal is vs (a))',
    },
    {
      name: `empty launches pipelined on one queue (${PIPELINED_LAUNCHES.toLocaleString('en-US')})`,
      unit: 'launches/s',
      offload: pipelined!,
      baseline: { ...sequential!, label: 'sequential launches (the round-trip loop above)' },
    },
  ];
}

/** saxpy on every worker against one call of the same image on the main thread. */
async function saxpy({ device, queue, library, bundlePath, plan }: Setup): Promise<Row> {
  const kernel = await device.kernel(library, 'saxpy');
  const n = SAXPY_N;
  const bytes = n * 4;
  const workers = device.info.computeUnits;
  const teams = 8 * workers;
  const a = 0.5;
  const xs = new Float32Array(n);
  for (let i = 0; i < n; i++) xs[i] = (i % 1000) / 1000;
  const ys = new Float32Array(n).fill(1);
  const [x, y] = [await device.alloc(bytes), await device.alloc(bytes)];
  queue.write(x, xs);
  queue.write(y, ys);
  await queue.finish();
  const memory = rawMemory();
  const [rawX, rawY] = [RAW_ADDRESS, RAW_ADDRESS + bytes];
  new Float32Array(memory.buffer, rawX, n).set(xs);
  new Float32Array(memory.buffer, rawY, n).set(ys);
  const direct = (await instantiateOnMainThread(bundlePath, memory)).saxpy!;
  const [offload, baseline] = await measure(plan, [
    {
      label: `await queue.launch(saxpy, { teams: ${teams} }, [n, a, x, y]).done, x and y already on the device`,
      count: 12 * n,
      run: async () => {
        await queue.launch(kernel, { teams }, [n, a, x, y]).done;
      },
    },
    {
      label:
        'saxpy(n, a, x, y) of the same wasm image, instantiated on the main thread over its own shared memory, as team 0 of 1',
      count: 12 * n,
      run: () => direct(n, a, rawX, rawY),
    },
  ]);
  // Both sides ran saxpy equally often on equal data: equal results show both did the work.
  const result = new Float32Array(n);
  queue.read(y, result);
  await queue.finish();
  const expected = new Float32Array(memory.buffer, rawY, n);
  for (let i = 0; i < n; i++) {
    if (result[i] !== expected[i])
      throw new Error(`saxpy: the device and the main thread disagree at element ${i}: ${result[i]} vs ${expected[i]}`);
  }
  await Promise.all([x.free(), y.free()]);
  return {
    name: `saxpy over 2^24 f32 (12 bytes/element), ${teams} teams on ${workers} workers vs the main thread`,
    unit: 'GB/s',
    offload: offload!,
    baseline: baseline!,
    goal: { op: '~', value: workers, note: 'the worker count' },
  };
}

/** mandelbrot on every worker against one call of the same image on the main thread. */
async function mandelbrot({ device, queue, library, bundlePath, plan }: Setup): Promise<Row> {
  const kernel = await device.kernel(library, 'mandelbrot');
  const [width, height, maxIter, x0, y0] = [1024, 768, 256, -2.2, -1.125];
  const dx = 3 / width;
  const pixels = width * height;
  const workers = device.info.computeUnits;
  const teams = 16 * workers;
  const out = await device.alloc(pixels * 4);
  const memory = rawMemory();
  const direct = (await instantiateOnMainThread(bundlePath, memory)).mandelbrot!;
  const [offload, baseline] = await measure(plan, [
    {
      label: `await queue.launch(mandelbrot, { teams: ${teams} }, [...]).done, ${width} x ${height} pixels, ${maxIter} iterations at most`,
      count: pixels,
      run: async () => {
        await queue.launch(kernel, { teams }, [width, height, maxIter, x0, y0, dx, out]).done;
      },
    },
    {
      label: 'mandelbrot(...) of the same wasm image on the main thread, as team 0 of 1',
      count: pixels,
      run: () => direct(width, height, maxIter, x0, y0, dx, RAW_ADDRESS),
    },
  ]);
  const result = new Uint32Array(pixels);
  queue.read(out, result);
  await queue.finish();
  const expected = new Uint32Array(memory.buffer, RAW_ADDRESS, pixels);
  const differs = result.findIndex((count, i) => count !== expected[i]);
  if (differs >= 0) throw new Error(`mandelbrot: the device and the main thread disagree at pixel ${differs}`);
  await out.free();
  return {
    name: `mandelbrot ${width} x ${height} (compute-bound), ${teams} teams on ${workers} workers vs the main thread`,
    unit: 'Mpixels/s',
    offload: offload!,
    baseline: baseline!,
    goal: { op: '~', value: workers, note: 'the worker count' },
  };
}

/**
 * The execution model's cost on the host device: examples/kernels.ts's transpose through team
 * memory and barriers (a team's 256 threads take turns on its worker, switching at the barrier:
 * asyncify) against transpose_naive, the same grid without team memory or barrier.
 */
async function teamMemoryTranspose({ device, queue, library, plan }: Setup): Promise<Row> {
  const [tiled, naive] = [await device.kernel(library, 'transpose'), await device.kernel(library, 'transpose_naive')];
  const [width, height, tile] = [512, 512, 16];
  const elements = width * height;
  const input = Float32Array.from({ length: elements }, (_, i) => i % 4093);
  const [inBuf, outBuf] = [await device.alloc(elements * 4), await device.alloc(elements * 4)];
  queue.write(inBuf, input);
  await queue.finish();
  const grid = { teams: [width / tile, height / tile] as [number, number], threads: [tile, tile] as [number, number] };
  const [offload, baseline] = await measure(plan, [
    {
      label: `await queue.launch(transpose, { teams: [32, 32], threads: [16, 16], teamMemoryBytes: ${tile * (tile + 1) * 4} }, [...]).done: 16 x 16 tiles through team memory, one barrier`,
      count: elements,
      run: async () => {
        await queue.launch(tiled, { ...grid, teamMemoryBytes: tile * (tile + 1) * 4 }, [width, height, inBuf, outBuf])
          .done;
      },
    },
    {
      label:
        'await queue.launch(transpose_naive, { teams: [32, 32], threads: [16, 16] }, [...]).done: the same grid, no team memory, no barrier',
      count: elements,
      run: async () => {
        await queue.launch(naive, grid, [width, height, inBuf, outBuf]).done;
      },
    },
  ]);
  const result = new Float32Array(elements);
  queue.read(outBuf, result);
  await queue.finish();
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (result[x * height + y] !== input[y * width + x])
        throw new Error(`transpose: element (${x}, ${y}) is ${result[x * height + y]}, not ${input[y * width + x]}`);
    }
  }
  await Promise.all([inBuf.free(), outBuf.free()]);
  return {
    name: `transpose ${width} x ${height} f32 in 16 x 16 tiles through team memory and a barrier vs without (host device)`,
    unit: 'Melements/s',
    offload: offload!,
    baseline: baseline!,
    goal: 'none: what a barrier costs where threads take turns',
  };
}

/** A kernel's calls of a host function (hostCall) against a raw Atomics round trip between the main thread and a worker. */
async function hostCalls({ device, queue, library, plan }: Setup, runtime: Runtime): Promise<Row> {
  const kernel = await device.kernel(library, 'host_calls');
  const calls = plan.quick ? 200 : 2000;
  let ticks = 0;
  runtime.hostFunctions.add('tick', () => ++ticks);
  const raw = new AtomicsRoundTrip();
  const [offload, baseline] = await measure(plan, [
    {
      label: `await queue.launch(host_calls, { teams: 1 }, [${calls}]).done: ${calls} hostCall("tick", 1, i) from one thread, answered on the main thread`,
      count: calls,
      run: async () => {
        await queue.launch(kernel, { teams: 1 }, [calls]).done;
      },
    },
    {
      label:
        '(a) raw round trip to one worker: Atomics.store + notify; the worker answers; the main thread awaits Atomics.waitAsync',
      count: calls,
      run: async () => {
        for (let i = 0; i < calls; i++) await raw.once(0);
      },
    },
  ]).finally(() => raw.close());
  runtime.hostFunctions.delete('tick');
  if (ticks === 0) throw new Error('host_calls: the host function never ran');
  return {
    name: 'hostCall from a kernel on the host device vs a raw Atomics round trip',
    unit: 'calls/s',
    offload: offload!,
    baseline: baseline!,
    goal: 'none: the cost per call (README)',
  };
}

/**
 * mandelbrot as a program would write it without offload-ts: plain TypeScript on the main
 * thread, in JavaScript numbers (f64), row by row.
 */
function mandelbrotPlain(
  width: number,
  height: number,
  maxIter: number,
  x0: number,
  y0: number,
  dx: number,
  out: Uint32Array,
): void {
  for (let row = 0; row < height; row++) {
    const cy = y0 + row * dx;
    for (let col = 0; col < width; col++) {
      const cx = x0 + col * dx;
      let zx = 0;
      let zy = 0;
      let iter = 0;
      while (iter < maxIter && zx * zx + zy * zy <= 4) {
        const t = zx * zx - zy * zy + cx;
        zy = 2 * zx * zy + cy;
        zx = t;
        iter++;
      }
      out[row * width + col] = iter;
    }
  }
}

/**
 * Per-item kernels (examples/kernels.ts: the body for one element or pixel, launched with
 * `{ items }`, the device choosing the teams) against examples/kernels.ts's hand-written block
 * kernels on the same data, and mandelbrot against plain TypeScript on the main thread.
 */
async function perItem({ device, queue, library, plan }: Setup, runtime: Runtime): Promise<Row[]> {
  const checkedLibrary = await runtime.register(await benchBundle(true));
  const workers = device.info.computeUnits;
  const [saxpyBlock, saxpyItems] = [await device.kernel(library, 'saxpy'), await device.kernel(library, 'saxpy_items')];
  const saxpyChecked = await device.kernel(checkedLibrary, 'saxpy_items');
  const n = SAXPY_N;
  // Like with like: the hand-written loop runs on the grid the device picks for the items.
  const saxpyGrid = device.suggestGrid(saxpyItems, { items: n });
  const teams = saxpyGrid.teams as number;
  const [x, y] = [await device.alloc(n * 4), await device.alloc(n * 4)];
  queue.write(
    x,
    Float32Array.from({ length: n }, (_, i) => (i % 1000) / 1000),
  );
  queue.write(y, new Float32Array(n).fill(1));
  await queue.finish();
  const [items, block, checkedSaxpy] = await measure(plan, [
    {
      label: `await queue.launch(saxpy_items, { items: n }, [a, x, y]).done: y[i] = a * x[i] + y[i] per item (the device's grid: ${teams} teams of 1 thread)`,
      count: 12 * n,
      run: async () => {
        await queue.launch(saxpyItems, { items: n }, [0.5, x, y]).done;
      },
    },
    {
      label: `await queue.launch(saxpy, { teams: ${teams} }, [n, a, x, y]).done: examples/kernels.ts's hand-written block loop`,
      count: 12 * n,
      run: async () => {
        await queue.launch(saxpyBlock, { teams }, [n, 0.5, x, y]).done;
      },
    },
    {
      label: 'the same saxpy_items launch, built with offload build --checked (every x[i] checked)',
      count: 12 * n,
      run: async () => {
        await queue.launch(saxpyChecked, { items: n }, [0.5, x, y]).done;
      },
    },
  ]);
  await Promise.all([x.free(), y.free()]);

  const [mandelBlock, mandelItems] = [
    await device.kernel(library, 'mandelbrot'),
    await device.kernel(library, 'mandelbrot_items'),
  ];
  const [width, height, maxIter, x0, y0] = [1024, 768, 256, -2.2, -1.125];
  const dx = 3 / width;
  const pixels = width * height;
  const mandelTeams = 16 * workers;
  const mandelGrid = device.suggestGrid(mandelItems, { items: [width, height] });
  const [outItems, outBlock] = [await device.alloc(pixels * 4), await device.alloc(pixels * 4)];
  const plainOut = new Uint32Array(pixels);
  const mandelChecked = await device.kernel(checkedLibrary, 'mandelbrot_items');
  const [mItems, mBlock, mPlain, mChecked] = await measure(plan, [
    {
      label: `await queue.launch(mandelbrot_items, { items: [${width}, ${height}] }, [...]).done: one pixel per item (the device's grid: ${String(mandelGrid.teams)} teams, a contiguous block of pixels each)`,
      count: pixels,
      run: async () => {
        await queue.launch(mandelItems, { items: [width, height] }, [maxIter, x0, y0, dx, outItems]).done;
      },
    },
    {
      label: `await queue.launch(mandelbrot, { teams: ${mandelTeams} }, [...]).done: examples/kernels.ts's rows per team`,
      count: pixels,
      run: async () => {
        await queue.launch(mandelBlock, { teams: mandelTeams }, [width, height, maxIter, x0, y0, dx, outBlock]).done;
      },
    },
    {
      label: 'mandelbrot in plain TypeScript (f64 numbers, a Uint32Array) on the main thread',
      count: pixels,
      run: () => mandelbrotPlain(width, height, maxIter, x0, y0, dx, plainOut),
    },
    {
      label: 'the same mandelbrot_items launch, built with offload build --checked',
      count: pixels,
      run: async () => {
        await queue.launch(mandelChecked, { items: [width, height] }, [maxIter, x0, y0, dx, outItems]).done;
      },
    },
  ]);
  const [a, b] = [new Uint32Array(pixels), new Uint32Array(pixels)];
  queue.read(outItems, a);
  queue.read(outBlock, b);
  await queue.finish();
  const differs = a.findIndex((count, i) => count !== b[i]);
  if (differs >= 0) throw new Error(`mandelbrot_items: differs from mandelbrot at pixel ${differs}`);
  // The same work: plain TypeScript's f64 and the kernel's f32 escape at a few pixels' different
  // iterations; the row states how far apart the total iterations are.
  const iterations = (counts: Uint32Array): number => counts.reduce((sum, count) => sum + count, 0);
  const workGap = Math.abs(iterations(plainOut) - iterations(a)) / iterations(a);
  if (workGap > 0.001)
    throw new Error(
      `mandelbrot in plain TypeScript did ${(workGap * 100).toFixed(3)}% more or less work than mandelbrot_items`,
    );
  await Promise.all([outItems.free(), outBlock.free()]);
  await checkedLibrary.unregister();
  return [
    {
      name: `per-item saxpy over 2^24 f32 ({ items }) vs the hand-written block kernel, both ${teams} teams on ${workers} workers`,
      unit: 'GB/s',
      offload: items!,
      baseline: block!,
      goal: { op: '>=', value: 0.95 },
    },
    {
      name: `per-item mandelbrot ${width} x ${height} ({ items: [x, y] }) vs the hand-written kernel, ${workers} workers`,
      unit: 'Mpixels/s',
      offload: mItems!,
      baseline: mBlock!,
      goal: { op: '>=', value: 0.95 },
    },
    {
      name: `per-item mandelbrot ${width} x ${height} on ${workers} workers vs plain TypeScript on the main thread`,
      unit: 'Mpixels/s',
      offload: mItems!,
      baseline: mPlain!,
      goal: {
        op: '>=',
        value: 1.8,
        note: `on 2 workers; the same work: total iterations within ${(workGap * 100).toFixed(3)}%`,
      },
    },
    {
      name: 'per-item saxpy built with --checked vs unchecked (the cost of bounds checks)',
      unit: 'GB/s',
      offload: checkedSaxpy!,
      baseline: items!,
      goal: 'none: the cost of --checked (docs/kernels.md)',
    },
    {
      name: 'per-item mandelbrot built with --checked vs unchecked',
      unit: 'Mpixels/s',
      offload: mChecked!,
      baseline: mItems!,
      goal: 'none: the cost of --checked (docs/kernels.md)',
    },
  ];
}

export const hostSuite: Suite = {
  name: 'host',
  description: 'the host device against raw TypedArray.set, Atomics round trips and the main thread',
  async run(plan, progress) {
    const runtime = await Offload.init({ host: { memoryBytes: MEMORY_BYTES } });
    try {
      const device = runtime.devices.find((candidate) => candidate.info.plugin === 'host');
      if (!device) throw new Error('the runtime has no host device');
      const bundlePath = await benchBundle();
      const setup: Setup = {
        device,
        queue: device.queue(),
        library: await runtime.register(bundlePath),
        bundlePath,
        plan,
      };
      progress('host: write/read of 64 MiB');
      const copyRows = await copies(setup);
      progress('host: launch round trips and pipelined launches');
      const launchRows = await launches(setup);
      progress('host: saxpy over 2^24 floats');
      const saxpyRow = await saxpy(setup);
      progress('host: mandelbrot');
      const mandelbrotRow = await mandelbrot(setup);
      const simdRowsMeasured = await simdRows(setup, progress);
      progress('host: per-item saxpy and mandelbrot');
      const perItemRows = await perItem(setup, runtime);
      progress('host: transpose through team memory, host calls');
      return [
        ...copyRows,
        ...launchRows,
        saxpyRow,
        mandelbrotRow,
        ...simdRowsMeasured,
        ...perItemRows,
        await teamMemoryTranspose(setup),
        await hostCalls(setup, runtime),
      ];
    } finally {
      await runtime.shutdown();
    }
  },
};
