/**
 * The demo's SIMD kernels (examples/kernels.ts: mandelbrot_simd, matmul_simd, through the device
 * library's four-lane helpers) on the host device's workers: the same results as their scalar
 * versions bit for bit, on sizes that leave a tail of one to three lanes, over several teams and
 * with teams of several threads; matmul also against a plain TypeScript reference. offload build
 * translates them to WGSL's vec4 (test/wgsl-differential.test.ts runs them there), and notes a
 * SIMD operation it does not cover.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { decodeBundle } from '../src/image/bundle.js';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildBundle } from '../src/build/compile.js';
import { Offload, type Device, type Library, type Runtime } from '../src/index.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { seededRandom } from './helpers/random.js';

const MiB = 1024 * 1024;

describe('SIMD kernels of the demo on the host device', { timeout: 120_000 }, () => {
  let runtime: Runtime;
  let device: Device;
  let library: Library;
  let bundlePath: string;

  before(async () => {
    bundlePath = await fixtureBundle('examples/kernels.ts');
    runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 32 * MiB, inline: 'never' },
      webgpu: false,
      proxies: [],
    });
    device = runtime.devices[0]!;
    library = await runtime.register(bundlePath);
  });
  after(() => runtime?.shutdown());

  it('translate to WGSL, as the scalar ones do', async () => {
    const bundle = decodeBundle(new Uint8Array(await readFile(bundlePath)));
    const wgsl = bundle.images.find((image) => image.info.format === 'wgsl');
    assert.ok(wgsl, 'examples/kernels.ts has a WGSL image');
    const kernels = (wgsl.info.kernels ?? []).map((kernel) => kernel.name);
    assert.ok(kernels.includes('matmul') && kernels.includes('mandelbrot'), kernels.join(', '));
    assert.ok(kernels.includes('matmul_simd') && kernels.includes('mandelbrot_simd'), kernels.join(', '));
    assert.deepEqual(bundle.manifest.notes ?? [], []);
  });

  it('a kernel that calls only the helpers translates; one with an operation not covered is noted by it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'offload-simd-helpers-'));
    try {
      const source = join(dir, 'helpers.ts');
      await writeFile(
        source,
        [
          'import { loadF32x4, storeF32x4, teamId, numTeams } from "offload-ts/device";',
          '/** y[i..i+3] = x[i..i+3] for every group of four below n, by team. */',
          'export function copy4(n: i32, x: usize, y: usize): void {',
          '  for (let i = teamId() * 4; i + 4 <= n; i += numTeams() * 4) storeF32x4(y, i, loadF32x4(x, i));',
          '}',
          '/** y[i..i+3] = min(x[i..i+3], 0). */',
          'export function clamp4(n: i32, x: usize, y: usize): void {',
          '  for (let i = teamId() * 4; i + 4 <= n; i += numTeams() * 4) storeF32x4(y, i, f32x4.min(loadF32x4(x, i), f32x4.splat(0)));',
          '}',
          '',
        ].join('\n'),
      );
      const built = await buildBundle({ sources: [source], output: join(dir, 'helpers') });
      assert.deepEqual(
        built.notes.map((note) => [note.kernel, note.reason]),
        [
          [
            'clamp4',
            'calls f32x4.min, which the WGSL translation of 128-bit SIMD does not cover (a kernel using it stays wasm-only)',
          ],
        ],
      );
      const helpers = await runtime.register(built.path);
      const kernel = await device.kernel(helpers, 'copy4');
      const x = Float32Array.from({ length: 40 }, (_, i) => i * 0.5 - 3);
      const queue = device.queue();
      const [xBuf, yBuf] = [await device.alloc(160), await device.alloc(160)];
      queue.write(xBuf, x);
      queue.fill(yBuf, 0);
      queue.launch(kernel, { teams: 3 }, [38, xBuf, yBuf]);
      const y = new Float32Array(40);
      queue.read(yBuf, y);
      await queue.finish();
      await Promise.all([xBuf.free(), yBuf.free()]);
      // Groups of four below 38: elements 0 to 35.
      assert.deepEqual([...y], [...x.slice(0, 36), 0, 0, 0, 0]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  /** Runs `name` with `args` (buffers filled from `inputs`) and reads back buffer `result`. */
  async function run(
    name: string,
    grid: { teams: number; threads?: number },
    args: (number | 'out' | Float32Array)[],
    outBytes: number,
  ): Promise<Uint8Array> {
    const kernel = await device.kernel(library, name);
    const queue = device.queue();
    const buffers = [];
    const out = await device.alloc(outBytes);
    // Not zero: a pixel or element the kernel leaves out shows.
    queue.fill(out, Uint32Array.of(0xdeadbeef));
    const launchArgs = [];
    for (const arg of args) {
      if (arg === 'out') launchArgs.push(out);
      else if (typeof arg === 'number') launchArgs.push(arg);
      else {
        const buffer = await device.alloc(arg.byteLength);
        buffers.push(buffer);
        queue.write(buffer, arg);
        launchArgs.push(buffer);
      }
    }
    queue.launch(kernel, grid, launchArgs);
    const result = new Uint8Array(outBytes);
    queue.read(out, result);
    await queue.finish();
    await Promise.all([out, ...buffers].map((buffer) => buffer.free()));
    return result;
  }

  it('mandelbrot_simd counts what mandelbrot counts, tails of 0 to 3 pixels, one thread or several per team', async () => {
    for (const [width, height, grid] of [
      [64, 48, { teams: 7 }],
      [67, 13, { teams: 5 }],
      [66, 9, { teams: 3, threads: 4 }],
      [65, 11, { teams: 2, threads: 3 }],
      [3, 5, { teams: 2 }],
    ] as const) {
      const args = [width, height, 200, -2.2, -1.125, 3 / width, 'out'] as const;
      const scalar = await run('mandelbrot', grid, [...args], width * height * 4);
      const simd = await run('mandelbrot_simd', grid, [...args], width * height * 4);
      assert.deepEqual(new Uint32Array(simd.buffer), new Uint32Array(scalar.buffer), `${width} x ${height}`);
      const counts = new Uint32Array(simd.buffer);
      assert.ok(
        counts.some((count) => count === 200) && counts.some((count) => count < 5),
        'inside and outside the set',
      );
    }
  });

  it('matmul_simd computes what matmul does bit for bit, and both what a plain TypeScript product does', async () => {
    const random = seededRandom(42);
    for (const [n, grid] of [
      [37, { teams: 5 }],
      [32, { teams: 3 }],
      [18, { teams: 2, threads: 3 }],
      [1, { teams: 1 }],
    ] as const) {
      const a = Float32Array.from({ length: n * n }, () => random() * 2 - 1);
      const b = Float32Array.from({ length: n * n }, () => random() * 2 - 1);
      const scalar = new Float32Array((await run('matmul', grid, [n, a, b, 'out'], n * n * 4)).buffer);
      const simd = new Float32Array((await run('matmul_simd', grid, [n, a, b, 'out'], n * n * 4)).buffer);
      assert.deepEqual(simd, scalar, `n = ${n}`);
      for (let i = 0; i < n; i++) {
        for (let j = 0; j < n; j++) {
          let sum = 0;
          for (let k = 0; k < n; k++) sum = Math.fround(sum + Math.fround(a[i * n + k]! * b[k * n + j]!));
          assert.equal(scalar[i * n + j], sum, `c[${i}][${j}] of n = ${n}`);
        }
      }
    }
  });
});
