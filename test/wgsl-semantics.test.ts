/**
 * The semantics table of docs/wgsl-abi.md ("What wasm computes and what the WGSL computes"), row
 * by row, on both devices: each row's kernel runs on the host device (wasm) and on the WebGPU
 * device (its WGSL translation, Dawn on lavapipe), and the test states what each gives: the same
 * value where the translation makes WGSL compute what wasm does (lazy conditionals, shift counts,
 * saturating conversions, min/max with NaN, wrapping constants), and, where wasm traps (a
 * division by zero, an out-of-bounds access), KERNEL_TRAP on the host device and the value a
 * device without traps (`info.capabilities.traps` false) gives.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildBundle } from '../src/build/compile.js';
import { Offload, type Device, type Library, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

const KERNELS = `
// ? : evaluates one arm: the atomic runs only when flag != 0.
export function lazy_ternary(flag: i32, out: usize): void {
  const r = flag != 0 ? atomic.add<i32>(out, 1) : 0;
  store<i32>(out, r + 10, 4);
}
// && and || evaluate their right operand only when needed.
export function lazy_and_or(flag: i32, out: usize): void {
  if (flag != 0 && atomic.add<i32>(out, 1) == 0) store<i32>(out, 7, 4);
  if (flag != 0 || atomic.add<i32>(out, 100) == 0) store<i32>(out, 9, 8);
}
// A conditional whose arm stores, inside a loop condition: evaluated once per check.
export function lazy_loop(n: i32, out: usize): void {
  let i = 0;
  while (i < n && atomic.add<i32>(out, 1) < 3) i++;
  store<i32>(out, i, 4);
}
// wasm masks a shift count to its low 5 bits, constant or computed.
export function shifts(x: i32, k: i32, out: usize): void {
  store<i32>(out, x << 33);
  store<i32>(out, x >> k, 4);
  store<u32>(out, <u32>x >>> (k + 32), 8);
  store<i32>(out, x << (numThreads(1) + 40), 12);
}
// i32 and u32 wrap; an operation on two constants too (WGSL would refuse it when compiling).
export function overflow(x: i32, out: usize): void {
  store<i32>(out, x + 1);
  store<i32>(out, i32.MAX_VALUE + 1, 4);
  store<u32>(out, u32.MAX_VALUE * <u32>3, 8);
  store<i32>(out, -i32.MIN_VALUE, 12);
  store<i32>(out, x * 65536 * 65536, 16);
}
// Unsigned comparisons and conversions: the bits carry over, compares are unsigned.
export function unsigned(x: i32, out: usize): void {
  store<u32>(out, <u32>x);
  store<i32>(out, <u32>x > <u32>1 ? 1 : 0, 4);
  store<i32>(out, x > 1 ? 1 : 0, 8);
  store<u32>(out, <u32>x / <u32>3, 12);
  store<u32>(out, <u32>x % <u32>7, 16);
}
// f32 to int: wasm's conversions saturate (NaN is 0, out of range clamps).
export function float_to_int(x: f32, out: usize): void {
  store<i32>(out, <i32>x);
  store<u32>(out, <u32>x, 4);
  store<i32>(out, <i32>(x * <f32>1e10), 8);
  store<u32>(out, <u32>(-x), 12);
}
// min/max of f32: NaN when either is NaN; -0 is below +0.
export function min_max(x: f32, y: f32, out: usize): void {
  store<f32>(out, min(x, y));
  store<f32>(out, max(x, y), 4);
  store<f32>(out, Mathf.min(x, y), 8);
  store<f32>(out, Mathf.max(x, y), 12);
}
// f32 arithmetic is IEEE on both; a denormal result may be flushed to 0 by WGSL.
export function float_round(x: f32, y: f32, out: usize): void {
  store<f32>(out, x + y);
  store<f32>(out, x * y, 4);
  store<f32>(out, x / y, 8);
}
// Truthiness of an f32 (neither 0 nor NaN), int to f32, and a transcendental.
export function float_misc(x: f32, i: i32, out: usize): void {
  store<i32>(out, x ? 1 : 2);
  store<f32>(out, <f32>i, 4);
  store<f32>(out, Mathf.sin(x), 8);
}
// Integer division: wasm traps on a zero divisor and on i32.MIN_VALUE / -1.
export function divide(x: i32, y: i32, out: usize): void {
  store<i32>(out, x / y);
  store<i32>(out, x % y, 4);
}
// Out of bounds: wasm traps; WGSL keeps accesses inside the binding.
export function out_of_bounds(at: i32, src: usize, out: usize): void {
  store<i32>(out, load<i32>(src + (<usize>at << 2)));
}
// An f32 remainder is exact in AssemblyScript (fmod), rounded in WGSL: the kernel stays wasm-only.
export function float_rem(x: f32, y: f32, out: usize): void {
  store<f32>(out, x % y);
}
`;

const skip = await webgpuSkipReason();

describe('WGSL semantics: what wasm and the translation compute, row by row', { skip, timeout: 300_000 }, () => {
  let runtime: Runtime;
  let host: Device;
  let gpu: Device;
  let library: Library;
  let dir: string;
  let notes: { kernel: string; reason: string }[];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'offload-semantics-'));
    await writeFile(join(dir, 'semantics.ts'), `import { numThreads } from "offload-ts/device";\n${KERNELS}`);
    const built = await buildBundle({ sources: [join(dir, 'semantics.ts')], output: join(dir, 'semantics') });
    notes = built.notes;
    runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 16 * 1024 * 1024 },
      webgpu: { fallback: true },
      proxies: [],
    });
    host = runtime.devices.find((device) => device.info.plugin === 'host')!;
    gpu = runtime.devices.find((device) => device.info.plugin === 'webgpu')!;
    library = await runtime.register(built.path);
  });

  after(async () => {
    await runtime?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Runs `name` on one team of one thread with `scalars`, then `out` (int words); returns out's words after. */
  async function run(device: Device, name: string, scalars: number[], out: Int32Array, src?: Int32Array) {
    const kernel = await device.kernel(library, name);
    const q = device.queue();
    const buffers = [...(src ? [await device.alloc(src.byteLength)] : []), await device.alloc(out.byteLength)];
    try {
      if (src) q.write(buffers[0]!, src);
      q.write(buffers.at(-1)!, out);
      q.launch(kernel, { teams: 1, threads: 1 }, [...scalars, ...buffers]);
      const result = new Int32Array(out.length);
      q.read(buffers.at(-1)!, result);
      await q.finish();
      return [...result];
    } finally {
      await Promise.all(buffers.map(async (buffer) => buffer.free()));
      await q.destroy();
    }
  }
  const both = async (name: string, scalars: number[], words: number, src?: Int32Array) => {
    const expected = await run(host, name, scalars, new Int32Array(words), src);
    const got = await run(gpu, name, scalars, new Int32Array(words), src);
    return { expected, got };
  };
  const f32Bits = (value: number): number => new Int32Array(Float32Array.of(value).buffer)[0]!;
  const asF32 = (bits: number): number => new Float32Array(Int32Array.of(bits).buffer)[0]!;

  it('declares the devices: the host device traps, the WebGPU device does not', () => {
    assert.equal(host.info.capabilities.traps, true);
    assert.equal(gpu.info.capabilities.traps, false);
  });

  it('? : evaluates only the arm AssemblyScript evaluates (an atomic in the other arm does not run)', async () => {
    for (const flag of [0, 1]) {
      const { expected, got } = await both('lazy_ternary', [flag], 2);
      assert.deepEqual(expected, flag ? [1, 10] : [0, 10]);
      assert.deepEqual(got, expected, `flag = ${flag}`);
    }
  });

  it('&& and || evaluate their right operand only when AssemblyScript does', async () => {
    for (const flag of [0, 1]) {
      const { expected, got } = await both('lazy_and_or', [flag], 3);
      assert.deepEqual(expected, flag ? [1, 7, 9] : [100, 0, 9]);
      assert.deepEqual(got, expected, `flag = ${flag}`);
    }
  });

  it('a loop condition with an atomic behind && runs it once per check', async () => {
    for (const n of [0, 2, 10]) {
      const { expected, got } = await both('lazy_loop', [n], 2);
      assert.deepEqual(got, expected, `n = ${n}`);
    }
    assert.deepEqual((await both('lazy_loop', [10], 2)).expected, [4, 3]);
  });

  it('masks shift counts of 32 or more, constant or computed, as wasm does', async () => {
    const { expected, got } = await both('shifts', [-12345, 37], 4);
    assert.deepEqual(expected, [-12345 << 1, -12345 >> 5, (-12345 >>> 5) | 0, -12345 << 9]);
    assert.deepEqual(got, expected);
  });

  it('wraps i32 and u32 overflow, of constants too', async () => {
    const { expected, got } = await both('overflow', [2147483647], 5);
    assert.deepEqual(expected, [-2147483648, -2147483648, (4294967295 * 3) | 0, -2147483648, 0]);
    assert.deepEqual(got, expected);
  });

  it('compares and converts unsigned values as wasm does', async () => {
    for (const x of [-1, 5, -2147483648]) {
      const { expected, got } = await both('unsigned', [x], 5);
      assert.deepEqual(got, expected, `x = ${x}`);
    }
  });

  it('converts f32 to integers saturating (NaN is 0, out of range clamps), as wasm does', async () => {
    for (const x of [Number.NaN, 3e9, -3e9, 1.75, -1.75, Infinity, 4294967040]) {
      const { expected, got } = await both('float_to_int', [x], 4);
      assert.deepEqual(got, expected, `x = ${x}`);
    }
    assert.deepEqual((await both('float_to_int', [Number.NaN], 4)).got, [0, 0, 0, 0]);
  });

  it('gives NaN for min/max of a NaN, and orders -0 below +0, as wasm does', async () => {
    for (const [x, y] of [
      [Number.NaN, 1],
      [1, Number.NaN],
      [-0, 0],
      [0, -0],
      [2, -3],
    ] as const) {
      const { expected, got } = await both('min_max', [x, y], 4);
      const shown = (bits: number[]) =>
        bits.map((b) => (Number.isNaN(asF32(b)) ? 'NaN' : Object.is(asF32(b), -0) ? '-0' : asF32(b)));
      assert.deepEqual(shown(got), shown(expected), `min/max(${x}, ${y})`);
    }
  });

  it('rounds f32 arithmetic as IEEE does; a denormal result may be 0 on the WebGPU device', async () => {
    const { expected, got } = await both('float_round', [1.1, 3.3], 3);
    assert.deepEqual(got, expected);
    // 2^-130 is a denormal: wasm keeps it, WGSL may flush it to zero (docs/wgsl-abi.md).
    const tiny = await both('float_round', [2 ** -65, 2 ** -65], 3);
    assert.equal(asF32(tiny.expected[1]!), 2 ** -130);
    assert.ok([0, 2 ** -130].includes(asF32(tiny.got[1]!)), `got ${asF32(tiny.got[1]!)}`);
    assert.equal(f32Bits(2 ** -130), tiny.expected[1]);
  });

  it('tests an f32 for truth as AssemblyScript does, converts ints to f32 and computes Mathf within rounding', async () => {
    for (const x of [Number.NaN, 0, -0, 1.5, -2]) {
      const { expected, got } = await both('float_misc', [x, 5], 3);
      assert.equal(got[0], expected[0], `truthiness of ${x}`);
      assert.equal(expected[0], x && !Number.isNaN(x) ? 1 : 2);
      assert.equal(asF32(got[1]!), 5);
      if (!Number.isNaN(x)) assert.ok(Math.abs(asF32(got[2]!) - asF32(expected[2]!)) <= 1e-6, `sin(${x})`);
    }
    // Above 2^24 an int rounds to an f32 neighbour: to nearest even in wasm, either one in WGSL.
    const { expected, got } = await both('float_misc', [1, 16777217], 3);
    assert.equal(asF32(expected[1]!), 16777216);
    assert.ok([16777216, 16777218].includes(asF32(got[1]!)));
  });

  it('traps on an integer division by zero or of i32.MIN_VALUE by -1; the WebGPU device gives x / 0 = x, x % 0 = 0', async () => {
    await rejectsWith(run(host, 'divide', [7, 0], new Int32Array(2)), 'KERNEL_TRAP', /divide by zero/);
    await rejectsWith(run(host, 'divide', [-2147483648, -1], new Int32Array(2)), 'KERNEL_TRAP', /unrepresentable/);
    assert.deepEqual(await run(gpu, 'divide', [7, 0], new Int32Array(2)), [7, 0]);
    assert.deepEqual(await run(gpu, 'divide', [-2147483648, -1], new Int32Array(2)), [-2147483648, 0]);
    const { expected, got } = await both('divide', [-7, 2], 2);
    assert.deepEqual(expected, [-3, -1]);
    assert.deepEqual(got, expected);
  });

  it('traps on an out-of-bounds access; the WebGPU device reads inside the binding instead', async () => {
    const src = Int32Array.of(11, 22, 33, 44);
    await rejectsWith(run(host, 'out_of_bounds', [1 << 28], new Int32Array(1), src), 'KERNEL_TRAP', /out of bounds/);
    const [value] = await run(gpu, 'out_of_bounds', [1 << 28], new Int32Array(1), src);
    assert.ok([0, 11, 22, 33, 44].includes(value!), `read ${value}`);
    assert.deepEqual(await run(gpu, 'out_of_bounds', [2], new Int32Array(1), src), [33]);
  });

  it('leaves an f32 remainder wasm-only, with a note naming why', async () => {
    const note = notes.find((candidate) => candidate.kernel === 'float_rem');
    assert.match(
      note?.reason ?? '',
      /f32 remainder: AssemblyScript's is exact \(fmod\), WGSL's is x - y \* trunc\(x \/ y\)/,
    );
    await rejectsWith(gpu.kernel(library, 'float_rem'), 'INCOMPATIBLE_IMAGE', /semantics\.ts:\d+.*f32 remainder/);
    assert.deepEqual(await run(host, 'float_rem', [7.5, 2], new Int32Array(1)), [f32Bits(1.5)]);
  });
});
