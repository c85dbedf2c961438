/**
 * One kernel source, two devices: every kernel of examples/, the bench's WebGPU suite and the
 * test fixtures that offload build translates to WGSL runs on the host device (its wasm image)
 * and on the WebGPU device (its translation, Dawn on lavapipe here) with the same seeded random
 * inputs, and the results must agree: exactly for integers, within f32 rounding for floats
 * (WGSL allows a device to fuse a multiply and an add, and its division to be off by 2.5 ulp).
 * The test also checks that the cases cover every translated kernel of those sources.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { Offload, type Device, type Library, type Runtime } from '../src/index.js';
import { decodeBundle } from '../src/image/bundle.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { seededRandom } from './helpers/random.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

type Data = Int32Array | Uint32Array | Float32Array | Uint8Array;
/** A launch argument: a scalar, or a buffer with its initial contents (read back and compared after the launch). */
type Arg = number | { data: Data };

interface Case {
  /** The kernel source, relative to the repository root. */
  source: string;
  kernel: string;
  /** The teams of a kernel written for teams; for a per-item kernel, its `{ items }` (no threads or team memory). */
  teams?: number | [number, number];
  items?: number | [number, number];
  /** Threads per team (on both devices); 1 by default. */
  threads?: number | [number, number];
  /** Team memory per team (teamMemory()). */
  teamMemoryBytes?: number;
  args: (random: () => number) => Arg[];
  /** How results may differ beyond the default rules. */
  compare?: (got: Data, expected: Data, name: string) => void;
}

const SOURCES = [
  'examples/kernels.ts',
  'bench/webgpu/kernels.ts',
  'test/fixtures/kernels.ts',
  'test/fixtures/webgpu/user-kernels.ts',
  'test/fixtures/webgpu/subset.ts',
];

const ints = (random: () => number, n: number): Int32Array =>
  Int32Array.from({ length: n }, () => Math.floor(random() * 2 ** 32) | 0);
const floats = (random: () => number, n: number, scale = 10): Float32Array =>
  Float32Array.from({ length: n }, () => (random() * 2 - 1) * scale);
const zeros = (n: number): Float32Array => new Float32Array(n);

/** Mandelbrot counts: chaotic at the set's edge, where an ulp changes the count: 99% must agree exactly. */
const mostCounts = (got: Data, expected: Data, name: string): void => {
  const differing = got.filter((value, i) => value !== expected[i]).length;
  assert.ok(differing <= got.length / 100, `${name}: ${differing} of ${got.length} counts differ`);
};

/** The f32 sequence of a dot product's partial sums: the order is the same, the products may be fused. */
const DOT_TOLERANCE = 1e-5;

const CASES: Case[] = [
  // examples/kernels.ts (offload demo)
  {
    source: 'examples/kernels.ts',
    kernel: 'saxpy_items',
    items: 1001,
    args: (r) => [1.5, { data: floats(r, 1001) }, { data: floats(r, 1001) }],
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'mandelbrot_items',
    items: [64, 48],
    args: () => [200, -2.2, -1.125, 3 / 64, { data: new Uint32Array(64 * 48) }],
    compare: mostCounts,
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'saxpy',
    teams: 7,
    threads: 32,
    args: (r) => [1001, 1.5, { data: floats(r, 1001) }, { data: floats(r, 1001) }],
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'dot_partial',
    teams: 5,
    args: (r) => [999, { data: floats(r, 999) }, { data: floats(r, 999) }, { data: zeros(5) }],
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'transpose',
    teams: [4, 3],
    threads: [16, 16],
    teamMemoryBytes: 16 * 17 * 4,
    args: (r) => [61, 47, { data: floats(r, 61 * 47) }, { data: zeros(61 * 47) }],
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'transpose_naive',
    teams: [4, 3],
    threads: [16, 16],
    args: (r) => [61, 47, { data: floats(r, 61 * 47) }, { data: zeros(61 * 47) }],
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'mandelbrot',
    teams: 9,
    threads: 16,
    args: () => [64, 48, 200, -2.2, -1.125, 3 / 64, { data: new Int32Array(64 * 48) }],
    compare: mostCounts,
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'matmul',
    teams: 5,
    threads: 8,
    args: (r) => [29, { data: floats(r, 29 * 29, 1) }, { data: floats(r, 29 * 29, 1) }, { data: zeros(29 * 29) }],
  },
  // The SIMD versions: f32x4/i32x4 as WGSL vec4 (src/build/wgsl-simd.ts); widths that leave a tail of lanes.
  {
    source: 'examples/kernels.ts',
    kernel: 'mandelbrot_simd',
    teams: 9,
    threads: 4,
    args: () => [66, 48, 200, -2.2, -1.125, 3 / 64, { data: new Int32Array(66 * 48) }],
    compare: mostCounts,
  },
  {
    source: 'examples/kernels.ts',
    kernel: 'matmul_simd',
    teams: 5,
    threads: 2,
    args: (r) => [30, { data: floats(r, 30 * 30, 1) }, { data: floats(r, 30 * 30, 1) }, { data: zeros(30 * 30) }],
  },
  // bench/webgpu/kernels.ts
  {
    source: 'bench/webgpu/kernels.ts',
    kernel: 'saxpy',
    teams: 5,
    threads: 64,
    args: (r) => [4097, -0.75, { data: floats(r, 4097) }, { data: floats(r, 4097) }],
  },
  { source: 'bench/webgpu/kernels.ts', kernel: 'xs_lookup', teams: 6, threads: 8, args: (r) => lookupArgs(r) },
  // test/fixtures/kernels.ts (the conformance kernels that translate; scan_memory is hand-written WGSL)
  { source: 'test/fixtures/kernels.ts', kernel: 'empty', teams: 3, args: () => [] },
  {
    source: 'test/fixtures/kernels.ts',
    kernel: 'fill_f32',
    teams: 4,
    args: (r) => [300, r() * 100, { data: floats(r, 310) }],
  },
  {
    source: 'test/fixtures/kernels.ts',
    kernel: 'saxpy',
    teams: 6,
    args: (r) => [500, r(), { data: floats(r, 500) }, { data: floats(r, 500) }],
  },
  { source: 'test/fixtures/kernels.ts', kernel: 'iota_i32', teams: 5, args: (r) => [250, { data: ints(r, 260) }] },
  {
    source: 'test/fixtures/kernels.ts',
    kernel: 'add_i32',
    teams: 3,
    args: (r) => [400, Math.floor(r() * 2 ** 31), { data: ints(r, 400) }],
  },
  { source: 'test/fixtures/kernels.ts', kernel: 'record_grid', teams: 11, args: () => [{ data: new Int32Array(44) }] },
  { source: 'test/fixtures/kernels.ts', kernel: 'busy', teams: 2, args: () => [5000, { data: zeros(2) }] },
  {
    source: 'test/fixtures/kernels.ts',
    kernel: 'wait_flag',
    teams: 2,
    args: () => [{ data: Int32Array.of(1) }, 10, { data: new Int32Array(1) }],
  },
  { source: 'test/fixtures/kernels.ts', kernel: 'count_team', teams: 9, args: (r) => [{ data: ints(r, 9) }] },
  { source: 'test/fixtures/kernels.ts', kernel: 'spin', teams: 4, args: () => [{ data: Int32Array.of(7) }] },
  {
    source: 'test/fixtures/kernels.ts',
    kernel: 'team_scan',
    teams: 4,
    threads: 32,
    teamMemoryBytes: 2 * 32 * 4,
    args: (r) => [{ data: ints(r, 120) }, { data: new Int32Array(120) }, 120],
  },
  {
    source: 'test/fixtures/kernels.ts',
    kernel: 'grid3d',
    teams: 5,
    threads: 8,
    args: () => [{ data: new Int32Array(5 * 8 + 8) }],
  },
  // A new user's kernels
  {
    source: 'test/fixtures/webgpu/user-kernels.ts',
    kernel: 'saxpy',
    teams: 10,
    threads: 64,
    args: (r) => [3000, 2.5, { data: floats(r, 3000) }, { data: floats(r, 3000) }],
  },
  {
    source: 'test/fixtures/webgpu/user-kernels.ts',
    kernel: 'dot',
    teams: 8,
    args: (r) => [2000, { data: floats(r, 2000) }, { data: floats(r, 2000) }, { data: zeros(8) }],
  },
  {
    source: 'test/fixtures/webgpu/user-kernels.ts',
    kernel: 'stencil',
    teams: 13,
    threads: 16,
    args: (r) => [40, 30, { data: floats(r, 1200) }, { data: zeros(1200) }],
  },
  {
    source: 'test/fixtures/webgpu/user-kernels.ts',
    kernel: 'mandelbrot',
    teams: 12,
    threads: 32,
    args: () => [96, 64, 300, -2, -1.2, 2.4 / 64, { data: new Int32Array(96 * 64) }],
    compare: mostCounts,
  },
  // The subset
  {
    source: 'test/fixtures/webgpu/subset.ts',
    kernel: 'int_ops',
    teams: 7,
    threads: 16,
    args: (r) => [700, { data: ints(r, 700) }, { data: ints(r, 700) }, { data: new Int32Array(700 * 8) }],
  },
  {
    source: 'test/fixtures/webgpu/subset.ts',
    kernel: 'float_ops',
    teams: 5,
    threads: 32,
    args: (r) => [600, { data: floats(r, 600) }, { data: floats(r, 600) }, { data: zeros(600 * 6) }],
  },
  {
    source: 'test/fixtures/webgpu/subset.ts',
    kernel: 'bytes',
    teams: 6,
    threads: 8,
    args: (r) => [512, { data: ints(r, 512) }, { data: new Int32Array(512 * 4) }, { data: new Uint8Array(512 * 3) }],
  },
  {
    source: 'test/fixtures/webgpu/subset.ts',
    kernel: 'control',
    teams: 4,
    threads: 32,
    args: (r) => [400, { data: ints(r, 400) }, { data: new Int32Array(400) }],
  },
  {
    source: 'test/fixtures/webgpu/subset.ts',
    kernel: 'histogram',
    teams: 5,
    threads: 64,
    args: (r) => [1000, { data: ints(r, 1000) }, 13, { data: new Uint32Array(15) }, { data: new Int32Array(1000) }],
  },
];

/** xs_lookup's arguments at a small size: 4 nuclides of 64 grid points, 12 materials of 1-4 of them. */
function lookupArgs(random: () => number): Arg[] {
  const nuclides = 4;
  const points = 64;
  const maxNucs = 4;
  const count = 300;
  const energy = new Float32Array(nuclides * points);
  for (let nuc = 0; nuc < nuclides; nuc++) {
    for (let k = 0; k < points; k++) energy[nuc * points + k] = k / (points - 1);
  }
  const xs = Float32Array.from({ length: nuclides * points * 5 }, () => random());
  const numNucs = Int32Array.from({ length: 12 }, () => 1 + Math.floor(random() * maxNucs));
  const mats = Int32Array.from({ length: 12 * maxNucs }, () => Math.floor(random() * nuclides));
  const concs = Float32Array.from({ length: 12 * maxNucs }, () => random());
  return [
    count,
    points,
    maxNucs,
    Math.floor(random() * 2 ** 31),
    { data: energy },
    { data: xs },
    { data: numNucs },
    { data: mats },
    { data: concs },
    { data: zeros(count * 5) },
  ];
}

/** Runs one case on `device` and returns every buffer's contents after the launch. */
async function runCase(device: Device, library: Library, run: Case): Promise<Data[]> {
  const args = run.args(seededRandom(run.kernel.length * 7919 + run.source.length));
  const kernel = await device.kernel(library, run.kernel);
  const q = device.queue();
  const buffers = await Promise.all(
    args.map(async (arg) => (typeof arg === 'number' ? undefined : device.alloc(Math.max(4, arg.data.byteLength)))),
  );
  try {
    args.forEach((arg, i) => {
      if (typeof arg !== 'number' && arg.data.byteLength > 0) q.write(buffers[i]!, arg.data);
    });
    q.launch(
      kernel,
      run.items !== undefined
        ? { items: run.items }
        : { teams: run.teams ?? 1, threads: run.threads ?? 1, teamMemoryBytes: run.teamMemoryBytes ?? 0 },
      args.map((arg, i) => (typeof arg === 'number' ? arg : buffers[i]!)),
    );
    const results = args.flatMap((arg, i) => {
      if (typeof arg === 'number') return [];
      const out = new (arg.data.constructor as new (n: number) => Data)(arg.data.length);
      q.read(buffers[i]!, out);
      return [out];
    });
    await q.finish();
    return results;
  } finally {
    await Promise.all(buffers.map(async (buffer) => buffer?.free()));
    await q.destroy();
  }
}

function assertAgree(got: Data, expected: Data, name: string): void {
  assert.equal(got.length, expected.length, name);
  if (!(got instanceof Float32Array)) {
    assert.deepEqual([...got], [...expected], `${name}: integers must agree exactly`);
    return;
  }
  for (let i = 0; i < got.length; i++) {
    const a = got[i]!;
    const b = expected[i]!;
    if (Number.isNaN(b)) {
      assert.ok(Number.isNaN(a), `${name}[${i}]: ${a} on the WebGPU device, NaN on the host device`);
      continue;
    }
    assert.ok(
      Math.abs(a - b) <= DOT_TOLERANCE * Math.max(1, Math.abs(b)),
      `${name}[${i}]: ${a} on the WebGPU device, ${b} on the host device`,
    );
  }
}

const skip = await webgpuSkipReason();

describe('WGSL translation: the same kernels on the host and the WebGPU device', { skip, timeout: 300_000 }, () => {
  let runtime: Runtime;
  let host: Device;
  let gpu: Device;
  const libraries = new Map<string, Library>();
  const translated = new Map<string, string[]>();

  before(async () => {
    runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 16 * 1024 * 1024 },
      webgpu: { fallback: true },
      proxies: [],
    });
    host = runtime.devices.find((device) => device.info.plugin === 'host')!;
    gpu = runtime.devices.find((device) => device.info.plugin === 'webgpu')!;
    for (const source of SOURCES) {
      // The bundles of the sources alone: every WebGPU kernel is a translation (no .wgsl file).
      const bundle = await fixtureBundle(source);
      libraries.set(source, await runtime.register(bundle));
      const image = decodeBundle(new Uint8Array(await readFile(bundle))).images.find(
        (candidate) => candidate.info.format === 'wgsl',
      );
      translated.set(source, image?.info.kernels?.map((kernel) => kernel.name) ?? []);
    }
  });

  after(async () => {
    await runtime?.shutdown();
  });

  it('has a case for every kernel that translates', () => {
    for (const source of SOURCES) {
      const cased = CASES.filter((test) => test.source === source).map((test) => test.kernel);
      assert.deepEqual(
        [...cased].sort(),
        [...translated.get(source)!].sort(),
        `${source}: translated kernels vs cases`,
      );
    }
  });

  for (const test of CASES) {
    const grid =
      test.items !== undefined
        ? `items ${String(test.items)}`
        : `${String(test.teams)} teams${test.threads ? ` of ${String(test.threads)} threads` : ''}`;
    it(`${test.source}: ${test.kernel} (${grid})`, async () => {
      const library = libraries.get(test.source)!;
      // The same grid on both: the host device runs a team's threads too (in turns).
      const expected = await runCase(host, library, test);
      const got = await runCase(gpu, library, test);
      got.forEach((data, i) => (test.compare ?? assertAgree)(data, expected[i]!, `${test.kernel} buffer ${i}`));
    });
  }
});
