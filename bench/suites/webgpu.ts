/**
 * The WebGPU device against the host device, in the same run, on the kernels of one source
 * (bench/webgpu/kernels.ts: its wasm image for the host device, its WGSL translation for the
 * WebGPU one): saxpy over 2^24 floats (memory-bound) and a simplified XSBench
 * cross-section lookup (f32, binary searches and gathers). Each result is checked: saxpy against
 * a reference, the lookups of the two devices against each other and a sample against a plain
 * TypeScript reference. With a software adapter (Mesa lavapipe) the "GPU" is this CPU: the suite
 * is then a correctness run of the WebGPU path with timings beside it, not a race.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedBundle } from '../../src/cli/kernel-cache.js';
import { Offload, type Device, type Library } from '../../src/index.js';
import { webgpuUnavailable } from '../../src/plugins/webgpu/adapter.js';
import { measure, type Plan } from '../measure.js';
import type { Goal, Row, Suite } from '../suite.js';
import { seededRandom } from '../../test/helpers/random.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const MiB = 1024 * 1024;
/** Host device memory: saxpy's x and y (128 MiB) and the lookup data (~39 MiB). */
const HOST_MEMORY_BYTES = 384 * MiB;

const SAXPY_N = 2 ** 24;
const SAXPY_A = 0.5;
/** WebGPU launch shape for saxpy: 4 elements per invocation (the kernel strides past teams * threads). */
const SAXPY_THREADS = 256;

/** The translated kernels against hand-written WGSL, on the same device. */
const TRANSLATION_GOAL: Goal = { op: '>=', value: 0.9, note: 'of the hand-written kernel' };

/** XSBench "small": 68 nuclides, 11,303 grid points each, 12 materials of these sizes. */
const NUCLIDES = 68;
const GRID_POINTS = 11_303;
const NUM_NUCS = [34, 5, 4, 4, 27, 21, 21, 21, 21, 21, 9, 9];
const MATERIALS = NUM_NUCS.length;
const MAX_NUCS = Math.max(...NUM_NUCS);
const CHANNELS = 5;
const LOOKUPS = 2 ** 18;
const LOOKUP_SEED = 0x2545f491;
const LOOKUP_THREADS = 64;
/** Every how many lookups one is recomputed in TypeScript. */
const REFERENCE_STRIDE = 997;
/** How far the two devices' f32 sums may differ: |a - b| <= RTOL * max(|a|, |b|) + ATOL. */
const RTOL = 1e-4;
const ATOL = 1e-6;

interface LookupData {
  energy: Float32Array;
  xs: Float32Array;
  numNucs: Int32Array;
  mats: Int32Array;
  concs: Float32Array;
}

/** Sorted energy grids from 0 to 1 (random spacing), random cross sections, XSBench's material sizes. */
function lookupData(): LookupData {
  const next = seededRandom(42);
  const energy = new Float32Array(NUCLIDES * GRID_POINTS);
  const steps = new Float64Array(GRID_POINTS);
  for (let nuc = 0; nuc < NUCLIDES; nuc++) {
    let sum = 0;
    for (let k = 1; k < GRID_POINTS; k++) steps[k] = sum += 0.5 + next();
    const grid = energy.subarray(nuc * GRID_POINTS, (nuc + 1) * GRID_POINTS);
    for (let k = 0; k < GRID_POINTS; k++) grid[k] = steps[k]! / sum;
    grid[0] = 0;
    grid[GRID_POINTS - 1] = 1;
    for (let k = 1; k < GRID_POINTS; k++) {
      if (!(grid[k]! > grid[k - 1]!)) throw new Error(`webgpu: energy grid ${nuc} is not strictly increasing at ${k}`);
    }
  }
  const xs = new Float32Array(NUCLIDES * GRID_POINTS * CHANNELS);
  for (let i = 0; i < xs.length; i++) xs[i] = next();
  const numNucs = Int32Array.from(NUM_NUCS);
  const mats = new Int32Array(MATERIALS * MAX_NUCS);
  const concs = new Float32Array(MATERIALS * MAX_NUCS);
  for (let mat = 0; mat < MATERIALS; mat++) {
    // The fuel (material 0) holds the first 34 nuclides; the others distinct random ones.
    const chosen = new Set<number>();
    while (chosen.size < NUM_NUCS[mat]!) chosen.add(mat === 0 ? chosen.size : Math.floor(next() * NUCLIDES));
    [...chosen].forEach((nuc, j) => {
      mats[mat * MAX_NUCS + j] = nuc;
      concs[mat * MAX_NUCS + j] = 0.05 + next();
    });
  }
  return { energy, xs, numNucs, mats, concs };
}

const f = Math.fround;

/** Lookup i of xs_lookup in TypeScript, every operation rounded to f32 as the host device's wasm does. */
function referenceLookup(data: LookupData, i: number): number[] {
  const lcg = (state: number) => (Math.imul(state, 1664525) + 1013904223) >>> 0;
  let state = (Math.imul(i, 2654435761) ^ LOOKUP_SEED) >>> 0;
  state = lcg(lcg(state));
  const e = f((state >>> 8) * 2 ** -24);
  state = lcg(state);
  const mat = (state >>> 8) % MATERIALS;
  const sums = [0, 0, 0, 0, 0];
  for (let j = 0; j < data.numNucs[mat]!; j++) {
    const nuc = data.mats[mat * MAX_NUCS + j]!;
    const conc = data.concs[mat * MAX_NUCS + j]!;
    const grid = nuc * GRID_POINTS;
    let lo = 0;
    let hi = GRID_POINTS - 1;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (data.energy[grid + mid]! > e) hi = mid;
      else lo = mid;
    }
    const e0 = data.energy[grid + lo]!;
    const t = f(f(e - e0) / f(data.energy[grid + lo + 1]! - e0));
    const low = (grid + lo) * CHANNELS;
    for (let c = 0; c < CHANNELS; c++) {
      const a = data.xs[low + c]!;
      const b = data.xs[low + CHANNELS + c]!;
      sums[c] = f(sums[c]! + f(conc * f(a + f(t * f(b - a)))));
    }
  }
  return sums;
}

/** Both devices, each with its kernels and queue. */
interface Side {
  device: Device;
  library: Library;
  /** Grid of each kernel on this device. */
  saxpyGrid: { teams: number; threads?: number };
  lookupGrid: { teams: number; threads?: number };
  what: string;
  /** The rows' goal column: none, and why, where the adapter is a software one; the translation's goal. */
  goal?: Goal | string;
}

/** saxpy on two sides (`gpu` is the row's offload-ts column, `host` its baseline), checked on both. */
async function saxpy(gpu: Side, host: Side, plan: Plan, versus: string): Promise<Row> {
  const n = SAXPY_N;
  const bytes = n * 4;
  const xs = new Float32Array(n);
  for (let i = 0; i < n; i++) xs[i] = (i % 1000) / 1000;
  const ys = new Float32Array(n).fill(1);
  const contenders = await Promise.all(
    [gpu, host].map(async (side) => {
      const kernel = await side.device.kernel(side.library, 'saxpy');
      const queue = side.device.queue();
      const [x, y] = [await side.device.alloc(bytes), await side.device.alloc(bytes)];
      queue.write(x, xs);
      queue.write(y, ys);
      await queue.finish();
      const grid = side.saxpyGrid;
      return {
        side,
        queue,
        x,
        y,
        contender: {
          label: `queue.launch(saxpy, { teams: ${grid.teams}${grid.threads ? `, threads: ${grid.threads}` : ''} }, [n, a, x, y]) + finish() on the ${side.what}, x and y already there`,
          count: 12 * n,
          run: () => {
            queue.launch(kernel, grid, [n, SAXPY_A, x, y]);
            return queue.finish();
          },
        },
      };
    }),
  );
  const [onGpu, onHost] = await measure(
    plan,
    contenders.map(({ contender }) => contender),
  );
  // Each side ran saxpy warmup + repetitions times on y = 1: y = 1 + k a x, accumulated in f32.
  const runs = plan.warmup + plan.repetitions;
  const expected = new Float32Array(1000);
  for (let v = 0; v < 1000; v++) {
    const x = f(v / 1000);
    let y = 1;
    for (let k = 0; k < runs; k++) y = f(f(f(SAXPY_A) * x) + y);
    expected[v] = y;
  }
  for (const { side, queue, x, y } of contenders) {
    const result = new Float32Array(n);
    queue.read(y, result);
    await queue.finish();
    for (let i = 0; i < n; i++) {
      const want = expected[i % 1000]!;
      // The GPU may fuse a * x + y (one rounding instead of two): allow a few ulps over the runs.
      if (!(Math.abs(result[i]! - want) <= 1e-6 * runs * Math.abs(want))) {
        throw new Error(
          `webgpu: saxpy on the ${side.what} is wrong at element ${i}: ${result[i]} instead of ${want} after ${runs} runs`,
        );
      }
    }
    await Promise.all([x.free(), y.free()]);
  }
  return {
    name: `saxpy over 2^24 f32 (12 bytes/element): ${versus}`,
    unit: 'GB/s',
    offload: onGpu!,
    baseline: onHost!,
    ...(gpu.goal ? { goal: gpu.goal } : {}),
  };
}

/** The lookups on two sides (as saxpy's); the host device's results are checked against a TypeScript reference. */
async function lookups(
  gpu: Side,
  host: Side,
  plan: Plan,
  progress: (line: string) => void,
  versus: string,
): Promise<Row> {
  const data = lookupData();
  const count = LOOKUPS;
  const arrays = [data.energy, data.xs, data.numNucs, data.mats, data.concs];
  const sides = await Promise.all(
    [gpu, host].map(async (side) => {
      const kernel = await side.device.kernel(side.library, 'xs_lookup');
      const queue = side.device.queue();
      const buffers = await Promise.all(arrays.map((array) => side.device.alloc(array.byteLength)));
      const out = await side.device.alloc(count * CHANNELS * 4);
      arrays.forEach((array, i) => queue.write(buffers[i]!, array));
      await queue.finish();
      const grid = side.lookupGrid;
      const args = [count, GRID_POINTS, MAX_NUCS, LOOKUP_SEED, ...buffers, out];
      return {
        side,
        queue,
        buffers: [...buffers, out],
        out,
        contender: {
          label: `queue.launch(xs_lookup, { teams: ${grid.teams}${grid.threads ? `, threads: ${grid.threads}` : ''} }, [...]) + finish() on the ${side.what}`,
          count,
          run: () => {
            queue.launch(kernel, grid, args);
            return queue.finish();
          },
        },
      };
    }),
  );
  const [onGpu, onHost] = await measure(
    plan,
    sides.map(({ contender }) => contender),
  );
  progress('webgpu: checking the lookups');
  const results = await Promise.all(
    sides.map(async ({ queue, out }) => {
      const result = new Float32Array(count * CHANNELS);
      queue.read(out, result);
      await queue.finish();
      return result;
    }),
  );
  const [gpuResult, hostResult] = results as [Float32Array, Float32Array];
  // The host device computes in IEEE f32 like the reference: the sample must match exactly.
  for (let i = 0; i < count && host.device.info.plugin === 'host'; i += REFERENCE_STRIDE) {
    const want = referenceLookup(data, i);
    for (let c = 0; c < CHANNELS; c++) {
      const got = hostResult[i * CHANNELS + c]!;
      if (got !== want[c])
        throw new Error(
          `webgpu: xs_lookup on the host device: lookup ${i} channel ${c} is ${got}, the reference ${want[c]}`,
        );
    }
  }
  let maxRelative = 0;
  let nonZero = 0;
  for (let k = 0; k < count * CHANNELS; k++) {
    const [a, b] = [gpuResult[k]!, hostResult[k]!];
    const scale = Math.max(Math.abs(a), Math.abs(b));
    if (!(Math.abs(a - b) <= RTOL * scale + ATOL)) {
      throw new Error(
        `webgpu: xs_lookup: the ${gpu.what} and the ${host.what} disagree at lookup ${Math.floor(k / CHANNELS)} channel ${k % CHANNELS}: ${a} vs ${b}`,
      );
    }
    if (scale > 0) maxRelative = Math.max(maxRelative, Math.abs(a - b) / scale);
    if (b !== 0) nonZero++;
  }
  if (nonZero < count * CHANNELS * 0.9)
    throw new Error(`webgpu: xs_lookup: only ${nonZero} of ${count * CHANNELS} sums are non-zero`);
  progress(`webgpu: lookups agree, largest relative difference ${maxRelative.toExponential(1)}`);
  for (const { buffers } of sides) await Promise.all(buffers.map((buffer) => buffer.free()));
  const megabytes = arrays.reduce((sum, array) => sum + array.byteLength, 0) / 1e6;
  return {
    name:
      `XSBench-style lookups, f32, ${NUCLIDES} nuclides x ${GRID_POINTS.toLocaleString('en-US')} points (${megabytes.toFixed(1)} MB), ` +
      `${count.toLocaleString('en-US')} lookups: ${versus} (largest relative difference ${maxRelative.toExponential(1)})`,
    unit: 'lookups/s',
    offload: onGpu!,
    baseline: onHost!,
    ...(gpu.goal ? { goal: gpu.goal } : {}),
  };
}

export const webgpuSuite: Suite = {
  name: 'webgpu',
  description:
    'the WebGPU device against the host device, one AssemblyScript source (wasm, and WGSL translated by offload build)',
  async run(plan, progress) {
    const runtime = await Offload.init({
      host: { memoryBytes: HOST_MEMORY_BYTES },
      webgpu: { fallback: true },
      proxies: [],
    });
    try {
      const gpuDevice = runtime.devices.find((candidate) => candidate.info.plugin === 'webgpu');
      const hostDevice = runtime.devices.find((candidate) => candidate.info.plugin === 'host');
      if (!gpuDevice) {
        progress(`webgpu: skipped: ${webgpuUnavailable() ?? 'the runtime has no WebGPU device'}`);
        return [];
      }
      if (!hostDevice) throw new Error('the runtime has no host device');
      progress(`webgpu: building the kernels, WebGPU device ${gpuDevice.info.name}`);
      const bundle = await cachedBundle([join(root, 'bench/webgpu/kernels.ts')], { label: 'offload-bench-webgpu' });
      const library = await runtime.register(bundle.path);
      const workers = hostDevice.info.computeUnits;
      const gpuThreads = (threads: number) => Math.min(threads, gpuDevice.info.maxThreadsPerTeam);
      const gpu: Side = {
        device: gpuDevice,
        library,
        saxpyGrid: {
          teams: Math.min(gpuDevice.info.maxTeams, Math.ceil(SAXPY_N / 4 / gpuThreads(SAXPY_THREADS))),
          threads: gpuThreads(SAXPY_THREADS),
        },
        lookupGrid: {
          teams: Math.min(gpuDevice.info.maxTeams, Math.ceil(LOOKUPS / gpuThreads(LOOKUP_THREADS))),
          threads: gpuThreads(LOOKUP_THREADS),
        },
        what: `WebGPU device (${gpuDevice.info.name})`,
        // The device's name ends in "(WebGPU, software)" on a fallback adapter (lavapipe, SwiftShader).
        ...(gpuDevice.info.name.endsWith(', software)')
          ? { goal: 'none: a software GPU, i.e. this CPU (a correctness run)' }
          : {}),
      };
      const host: Side = {
        device: hostDevice,
        library,
        saxpyGrid: { teams: 8 * workers },
        lookupGrid: { teams: 16 * workers },
        what: `host device (${workers} workers)`,
      };
      progress('webgpu: saxpy over 2^24 floats on both devices');
      const saxpyRow = await saxpy(gpu, host, plan, 'WebGPU device vs host device');
      progress(`webgpu: ${LOOKUPS.toLocaleString('en-US')} XSBench-style lookups on both devices`);
      const lookupRow = await lookups(gpu, host, plan, progress, 'WebGPU device vs host device');
      // The same kernels on the WebGPU device: translated by offload build vs written by hand.
      const reference = await cachedBundle(
        [join(root, 'bench/webgpu/kernels.ts'), join(root, 'bench/webgpu/reference.wgsl')],
        { label: 'offload-bench-webgpu-reference' },
      );
      const handWritten: Side = {
        ...gpu,
        library: await runtime.register(reference.path),
        what: `WebGPU device, hand-written WGSL (bench/webgpu/reference.wgsl)`,
      };
      const translated: Side = { ...gpu, what: 'WebGPU device, translated WGSL', goal: TRANSLATION_GOAL };
      progress('webgpu: saxpy and the lookups on the WebGPU device, translated vs hand-written WGSL');
      const versus = 'WebGPU device, WGSL translated from kernels.ts vs hand-written';
      return [
        saxpyRow,
        lookupRow,
        await saxpy(translated, handWritten, plan, versus),
        await lookups(translated, handWritten, plan, progress, versus),
      ];
    } finally {
      await runtime.shutdown();
    }
  },
};
