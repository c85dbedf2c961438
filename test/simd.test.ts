/**
 * Kernels using wasm's 128-bit SIMD (offload build enables it, src/build/assemblyscript-build.ts):
 * they build, stay wasm-only with a note saying why, the code-shape reader reads them (the
 * inline-launch policy), and they compute on the host device's workers what the scalar arithmetic
 * does, bit for bit.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { buildBundle } from '../src/build/compile.js';
import { readCodeShapes } from '../src/build/wasm-code-shape.js';
import { decodeBundle } from '../src/image/bundle.js';
import { Offload } from '../src/index.js';
import { seededRandom } from './helpers/random.js';

const MiB = 1024 * 1024;
const SOURCE = join(import.meta.dirname, 'fixtures', 'simd.ts');

describe('SIMD kernels', { timeout: 120_000 }, () => {
  it('build wasm-only, read as code shapes, and compute on the workers what scalar code does', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'offload-simd-'));
    try {
      const built = await buildBundle({ sources: [SOURCE], output: join(dir, 'simd') });
      // lerp_f64x2 is noted for its f64 parameter, the first thing the translation meets.
      assert.deepEqual(
        built.notes.map((note) => [note.kernel, note.line, note.reason]),
        [
          [
            'lerp_f64x2',
            9,
            "has parameter 'f' of type f64 (WGSL has no f64); translated kernels compute with i32, u32, f32 and bool",
          ],
          [
            'lanes',
            24,
            'calls f64x2.mul, which the WGSL translation of 128-bit SIMD does not cover (a kernel using it stays wasm-only)',
          ],
        ],
      );
      const images = decodeBundle(built.bundle).images;
      assert.deepEqual(
        images.map((image) => image.info.format),
        ['wasm'],
      );
      // Every SIMD instruction read (an unknown opcode would make a kernel unbounded and synchronising).
      const shapes = readCodeShapes(images[0]!.bytes, ['lerp_f64x2', 'lanes']);
      assert.deepEqual(
        [...shapes].map(([name, shape]) => [name, shape.bounded, shape.synchronizes]),
        [
          ['lerp_f64x2', false, false],
          ['lanes', true, false],
        ],
      );

      const runtime = await Offload.init({
        host: { threads: 2, memoryBytes: 16 * MiB, inline: 'never' },
        webgpu: false,
        proxies: [],
      });
      try {
        const device = runtime.devices[0]!;
        const library = await runtime.register(built.path);
        const [lerp, lanes] = await Promise.all([
          device.kernel(library, 'lerp_f64x2'),
          device.kernel(library, 'lanes'),
        ]);
        const pairs = 1000;
        const random = seededRandom(13);
        const low = Float64Array.from({ length: 2 * pairs }, () => random() * 100 - 50);
        const high = Float64Array.from({ length: 2 * pairs }, () => random() * 1e6);
        const f = 0.3718;
        const [lowBuf, highBuf, outBuf, aBuf, lanesBuf] = await Promise.all(
          [low.byteLength, high.byteLength, low.byteLength, 24, 36].map((bytes) => device.alloc(bytes)),
        );
        const q = device.queue();
        q.write(lowBuf!, low);
        q.write(highBuf!, high);
        q.write(aBuf!, new Float64Array([3, 8, -2.25]));
        q.launch(lerp, { teams: 7 }, [pairs, f, lowBuf!, highBuf!, outBuf!]);
        q.launch(lanes, { teams: 1 }, [aBuf!, lanesBuf!]);
        const out = new Float64Array(2 * pairs);
        const lanesOut = new ArrayBuffer(36);
        q.read(outBuf!, out);
        q.read(lanesBuf!, new Uint8Array(lanesOut));
        await q.finish();
        const expected = high.map((h, i) => h - f * (h - low[i]!));
        assert.deepEqual(out, expected);
        assert.deepEqual([...new Float64Array(lanesOut, 0, 4)], [-2.25, 2.5, 8, 0]);
        assert.equal(new Int32Array(lanesOut, 32, 1)[0], 7);
      } finally {
        await runtime.shutdown();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
