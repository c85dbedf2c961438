/**
 * Kernels written like TypeScript (docs/kernels.md): `ptr<T>` parameters indexed in elements, and
 * per-item kernels (`i: item` first) launched with `{ items }`, on the host device, the WebGPU
 * device (Dawn on lavapipe) and both behind a real proxy over TCP; the wasm a typed access
 * compiles to; and the bad inputs, each a coded error that says what to write instead.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildBundle } from '../src/build/compile.js';
import { decodeBundle } from '../src/image/bundle.js';
import { Offload, OffloadError, type Device, type Library, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';
import { typeCheck } from './helpers/typecheck.js';
import { webgpuSkipReason } from './helpers/webgpu.js';
import { webgpuOptionsFromEnv } from '../src/plugins/webgpu/adapter.js';

const gpuSkip = await webgpuSkipReason();
const SOURCE = 'test/fixtures/item-kernels.ts';

/** Runs every per-item fixture kernel on `device` and checks each element. */
async function checkItemKernels(device: Device, library: Library): Promise<void> {
  const q = device.queue();
  // saxpy over a count that is no multiple of a GPU team (the tail is guarded).
  const saxpy = await device.kernel(library, 'saxpy');
  const n = 1000;
  const x = await device.alloc(n * 4);
  const y = await device.alloc(n * 4);
  q.write(
    x,
    Float32Array.from({ length: n }, (_, i) => i),
  );
  q.write(y, new Float32Array(n).fill(1));
  q.launch(saxpy, { items: n }, [2, x, y]);
  const ys = new Float32Array(n);
  q.read(y, ys);
  await q.finish();
  ys.forEach((value, i) => assert.equal(value, 2 * i + 1, `saxpy y[${i}] on ${device.info.name}`));
  // Every item of 1-, 2- and 3-D ranges once, with its coordinates.
  const coordinates = await device.kernel(library, 'coordinates');
  for (const items of [[37], [70, 3], [3, 5, 7]] as const) {
    const total = items.reduce((a, b) => a * b, 1);
    const out = await device.alloc(total * 4);
    q.fill(out, new Int32Array([-1]));
    q.launch(coordinates, { items: items.length === 1 ? items[0] : items }, [out]);
    const got = new Int32Array(total);
    q.read(out, got);
    await q.finish();
    const [nx, ny = 1] = items;
    got.forEach((value, k) => {
      const [ix, iy, iz] = [k % nx, Math.floor(k / nx) % ny, Math.floor(k / (nx * ny))];
      assert.equal(value, ix + 100 * iy + 10000 * iz, `item ${k} of ${items.join(' x ')} on ${device.info.name}`);
    });
    await out.free();
  }
  // An early return ends that item only.
  const evens = await device.kernel(library, 'evens');
  const out = await device.alloc(n * 4);
  q.fill(out, new Uint32Array([7]));
  q.launch(evens, { items: n }, [out]);
  const got = new Uint32Array(n);
  q.read(out, got);
  await q.finish();
  got.forEach((value, i) => assert.equal(value, i % 2 === 0 ? 3 * i : 7, `evens[${i}] on ${device.info.name}`));
  // A kernel written for teams takes a ptr<i32> too.
  const iota = await device.kernel(library, 'iota');
  q.launch(iota, { teams: 4, threads: device.info.kind === 'gpu' ? 64 : 1 }, [n, 5, out]);
  const iotas = new Int32Array(n);
  q.read(out, iotas);
  await q.finish();
  iotas.forEach((value, i) => assert.equal(value, i + 5, `iota[${i}] on ${device.info.name}`));
  await Promise.all([x.free(), y.free(), out.free()]);
}

describe('per-item kernels and typed pointers', { timeout: 180_000 }, () => {
  let runtime: Runtime;
  let library: Library;
  let bundlePath: string;

  before(async () => {
    bundlePath = await fixtureBundle(SOURCE);
    runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 32 * 1024 * 1024 },
      webgpu: gpuSkip === undefined ? { fallback: true } : false,
      proxies: [],
    });
    library = await runtime.register(bundlePath);
  });

  after(async () => {
    await runtime?.shutdown();
  });

  it('translates every fixture kernel to WGSL, a ptr<T> only read as x[i] as an array of T', async () => {
    const { readFile } = await import('node:fs/promises');
    const bundle = decodeBundle(new Uint8Array(await readFile(bundlePath)));
    assert.equal(bundle.manifest.notes, undefined, 'no kernel stays wasm-only');
    const wgsl = new TextDecoder().decode(bundle.images.find((image) => image.info.format === 'wgsl')!.bytes);
    assert.match(wgsl, /var<storage, read> saxpy__p_x: array<f32>;/);
    assert.match(wgsl, /var<storage, read_write> saxpy__p_y: array<f32>;/);
    assert.match(wgsl, /saxpy__p_y\[u32\(.*\)\] = /);
    const saxpy = bundle.manifest.entries.find((entry) => entry.name === 'saxpy')!;
    assert.deepEqual(
      saxpy.params.map((param) => `${param.name}: ${param.type}`),
      ['a: f32', 'x: ptr', 'y: ptr', 'offload_items_x: i32', 'offload_items_y: i32', 'offload_items_z: i32'],
    );
  });

  it('runs on the host device with the right result', async () => {
    const host = runtime.devices.find((device) => device.info.plugin === 'host')!;
    await checkItemKernels(host, library);
  });

  it('runs on the WebGPU device with the right result', { skip: gpuSkip }, async () => {
    const gpu = runtime.devices.find((device) => device.info.plugin === 'webgpu')!;
    await checkItemKernels(gpu, library);
  });

  it('refuses bad launches with coded errors that say what to write instead', async () => {
    const host = runtime.devices[0]!;
    const saxpy = await host.kernel(library, 'saxpy');
    const iota = await host.kernel(library, 'iota');
    const x = await host.alloc(64);
    // A queue per launch: a queue that failed reports that failure until it is finished.
    const refused = (kernel: typeof saxpy, grid: unknown, args: unknown[], message: RegExp) =>
      rejectsWith(host.queue().launch(kernel, grid as never, args as never).done, 'INVALID_ARGUMENT', message);
    await refused(saxpy, { teams: 4 }, [1, x, x], /per-item kernel.*\{ items: n \}.*\[a, x, y\]/);
    await refused(saxpy, { items: 0 }, [1, x, x], /grid.items is 0.*skip the launch/);
    await refused(
      saxpy,
      { items: 2 ** 31 },
      [1, x, x],
      /grid.items must be an integer from 1 to 2\^31 - 1, got number 2147483648/,
    );
    await refused(saxpy, { items: [4, 0] }, [1, x, x], /grid.items\[1\] \(y\) is 0/);
    await refused(saxpy, { items: [4, 1, 2 ** 31] }, [1, x, x], /grid.items\[2\] \(z\) must be/);
    await refused(saxpy, { items: [65536, 65536] }, [1, x, x], /more than 2\^31 - 1.*split/);
    await refused(saxpy, { items: [1, 2, 3, 4] }, [1, x, x], /1 to 3 dimensions/);
    await refused(saxpy, { items: 4, teams: 2 }, [1, x, x], /grid.teams with grid.items.*\{ items \} alone/);
    await refused(
      iota,
      { items: 4 },
      [4, 0, x],
      /'iota' is not one: launch it with \{ teams, threads \}, or write it as 'export function iota\(i: item, \.\.\.\)'/,
    );
    await x.free();
  });
});

// One proxy (serving its host device and, where there is an adapter, its GPU) for the per-item
// kernels behind a proxy and the checked builds on every device.
describe('behind a proxy, and bounds-checked builds (offload build --checked)', { timeout: 300_000 }, () => {
  let dir: string;
  let checkedPath: string;
  let runtime: Runtime;
  let proxy: ProxyProcess;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'offload-checked-'));
    checkedPath = (await buildBundle({ sources: [SOURCE], output: join(dir, 'checked'), checked: true })).path;
    proxy = await startProxy({ threads: 1, memory: '64M', webgpu: gpuSkip === undefined ? 'fallback' : 'off' });
    runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 16 * 1024 * 1024 },
      webgpu: gpuSkip === undefined ? { fallback: true } : false,
      proxies: [proxy.address],
      token: proxy.token,
    });
  });

  after(async () => {
    await runtime?.shutdown();
    await proxy?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("runs { items } launches on the proxy's host device and, where there is an adapter, its GPU", async () => {
    const library = await runtime.register(await fixtureBundle(SOURCE));
    const remote = runtime.devices.filter((device) => device.info.plugin === 'remote');
    assert.ok(remote.some((device) => device.info.kind === 'cpu'));
    if (gpuSkip === undefined) assert.ok(remote.some((device) => device.info.kind === 'gpu'));
    for (const device of remote) await checkItemKernels(device, library);
  });

  it('adds a byte length per ptr<T> parameter that the launch passes, hidden from the program', async () => {
    const { readFile } = await import('node:fs/promises');
    const { manifest } = decodeBundle(new Uint8Array(await readFile(checkedPath)));
    const saxpy = manifest.entries.find((entry) => entry.name === 'saxpy')!;
    assert.deepEqual(
      saxpy.params.map((param) => param.name),
      ['a', 'x', 'y', 'offload_bytes_x', 'offload_bytes_y', 'offload_items_x', 'offload_items_y', 'offload_items_z'],
    );
    assert.equal(manifest.notes, undefined, 'every kernel still translates to WGSL');
  });

  it('runs correct kernels as before, on every device, remote ones included', async () => {
    const library = await runtime.register(checkedPath);
    for (const device of runtime.devices) await checkItemKernels(device, library);
  });

  it("fails an off-by-one store with KERNEL_TRAP naming the kernel, the parameter, the index and the buffer's length", async () => {
    const library = await runtime.register(checkedPath);
    const gpus = runtime.devices.filter((candidate) => candidate.info.imageFormats.includes('wgsl'));
    if (gpuSkip === undefined) assert.equal(gpus.length, 2, 'WebGPU here and behind the proxy');
    for (const device of runtime.devices) {
      const y = await device.alloc(100 * 4);
      const shifted = await device.kernel(library, 'shifted');
      await rejectsWith(
        device.queue().launch(shifted, { items: 100 }, [y]).done,
        'KERNEL_TRAP',
        /kernel 'shifted': parameter 'y' \(ptr<f32>\): index 100 is outside its buffer of 100 elements/,
      );
      const iota = await device.kernel(library, 'iota');
      if (device.info.imageFormats.includes('wasm')) {
        // A pointer into a buffer has the bytes from it; a kernel written for teams is checked too.
        await rejectsWith(
          device.queue().launch(iota, { teams: 1 }, [100, 0, y.at(8)]).done,
          'KERNEL_TRAP',
          /kernel 'iota': parameter 'out' \(ptr<i32>\): index 98 is outside its buffer of 98 elements/,
        );
      } else {
        // On a GPU the kernel records the first fault in a word the device reads after the dispatch.
        const q = device.queue();
        q.fill(y, new Int32Array([-1]));
        await q.finish();
        await rejectsWith(
          q.launch(iota, { teams: 2, threads: 64 }, [101, 0, y]).done,
          'KERNEL_TRAP',
          /kernel 'iota': parameter 'out' \(ptr<i32>\): index 100 is outside its buffer of 100 elements/,
        );
        // The store outside was skipped: nothing past the buffer, and the buffer holds what the others wrote.
        const fresh = device.queue();
        const got = new Int32Array(100);
        fresh.read(y, got);
        await fresh.finish();
        got.forEach((value, k) => assert.equal(value, k, `out[${k}] on ${device.info.name}`));
      }
      // The device goes on.
      const q = device.queue();
      q.launch(iota, { teams: 2 }, [98, 1, y]);
      const got = new Int32Array(98);
      q.read(y, got);
      await q.finish();
      assert.equal(got[97], 98);
      await y.free();
    }
  });
});

describe('WGSL kernels that stop', { timeout: 120_000, skip: gpuSkip }, () => {
  it('ends an endless loop at its loop budget with TIMEOUT, and the device goes on', async () => {
    const runtime = await Offload.init({ host: false, webgpu: { fallback: true, loopBudget: 100_000 }, proxies: [] });
    try {
      const gpu = runtime.devices.find((device) => device.info.plugin === 'webgpu')!;
      const library = await runtime.register(await fixtureBundle(SOURCE));
      const spin = await gpu.kernel(library, 'spin');
      const out = await gpu.alloc(64 * 4);
      await rejectsWith(
        gpu.queue().launch(spin, { items: 64 }, [0, out]).done,
        'TIMEOUT',
        /launch of 'spin': an invocation ran past its budget of 100000 loop iterations .*OFFLOAD_WEBGPU_LOOP_BUDGET or Offload\.init\(\{ webgpu: \{ loopBudget \} \}\)/,
      );
      // The next launch runs, and a loop within the budget is not stopped.
      const q = gpu.queue();
      q.launch(spin, { items: 64 }, [1, out]);
      const saxpy = await gpu.kernel(library, 'saxpy');
      const x = await gpu.alloc(4 * 4);
      q.write(x, new Float32Array([1, 2, 3, 4]));
      q.write(out, new Float32Array([1, 1, 1, 1]));
      q.launch(saxpy, { items: 4 }, [2, x, out]);
      const ys = new Float32Array(4);
      q.read(out, ys);
      await q.finish();
      assert.deepEqual([...ys], [3, 5, 7, 9]);
      assert.throws(
        () => webgpuOptionsFromEnv('fallback', undefined, '0'),
        (error: unknown) =>
          error instanceof OffloadError &&
          error.code === 'INVALID_ARGUMENT' &&
          /OFFLOAD_WEBGPU_LOOP_BUDGET/.test(error.message),
      );
      assert.equal((webgpuOptionsFromEnv('fallback', undefined, '5000') as { loopBudget?: number }).loopBudget, 5000);
    } finally {
      await runtime.shutdown();
    }
  });
});

describe('grids chosen by the device', { timeout: 180_000 }, () => {
  it('suggestGrid gives the grid of a { items } launch, stated in OFFLOAD_INFO', async () => {
    const lines: string[] = [];
    const runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 16 * 1024 * 1024 },
      webgpu: gpuSkip === undefined ? { fallback: true } : false,
      proxies: [],
      info: (line) => lines.push(line),
    });
    try {
      const library = await runtime.register(await fixtureBundle(SOURCE));
      const host = runtime.devices.find((device) => device.info.plugin === 'host')!;
      const saxpy = await host.kernel(library, 'saxpy');
      assert.deepEqual(host.suggestGrid(saxpy, { items: 1_000_000 }), { teams: 32, threads: 1 });
      assert.deepEqual(host.suggestGrid(saxpy, { items: [5, 2] }), { teams: 10, threads: 1 });
      assert.ok(
        lines.some((line) => /suggestGrid 'saxpy' \(wasm\): 1000000 x 1 x 1 items -> teams 32, threads 1/.test(line)),
        lines.join('\n'),
      );
      assert.throws(
        () => host.suggestGrid(saxpy, { items: 0 }),
        (error: unknown) =>
          error instanceof OffloadError && error.code === 'INVALID_ARGUMENT' && /is 0/.test(error.message),
      );
      assert.throws(
        () => host.suggestGrid(saxpy, { items: 4, teamMemoryBytes: host.info.maxTeamMemoryBytes + 1 }),
        (error: unknown) => error instanceof OffloadError && /maxTeamMemoryBytes/.test(error.message),
      );
      const gpu = runtime.devices.find((device) => device.info.plugin === 'webgpu');
      if (gpu !== undefined) {
        const onGpu = await gpu.kernel(library, 'saxpy');
        assert.deepEqual(gpu.suggestGrid(onGpu, { items: 1000 }), { teams: 16, threads: 64 });
        const wide = gpu.info.maxTeamDims[0] * 64 + 1;
        assert.deepEqual(gpu.suggestGrid(onGpu, { items: wide }), {
          teams: [gpu.info.maxTeamDims[0], 2, 1],
          threads: 64,
        });
      }
    } finally {
      await runtime.shutdown();
    }
  });
});

describe('typed element access in wasm', { timeout: 300_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'offload-items-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('compiles x[i] and x[i] = v to the same optimised code as load<T>/store<T> at i * sizeof<T>()', async () => {
    await writeFile(
      join(dir, 'k.ts'),
      `import { item, ptr } from "offload-ts/device";
export function typedF32(i: item, a: f32, x: ptr<f32>, y: ptr<f32>): void { y[i] = a * x[i] + y[i]; }
export function bytesF32(i: item, a: f32, x: usize, y: usize): void {
  store<f32>(y + (<usize>i << 2), a * load<f32>(x + (<usize>i << 2)) + load<f32>(y + (<usize>i << 2)));
}
export function typedU16(i: item, x: ptr<u16>, y: ptr<i64>): void { y[i] = <i64>x[i]; }
export function bytesU16(i: item, x: usize, y: usize): void { store<i64>(y + (<usize>i << 3), <i64>load<u16>(x + (<usize>i << 1))); }
`,
    );
    const { bundle } = await buildBundle({
      sources: [join(dir, 'k.ts')],
      output: join(dir, 'out'),
      wgsl: 'off',
      debug: true,
    });
    const { default: binaryen } = await import('binaryen');
    const image = decodeBundle(bundle).images.find((entry) => entry.info.format === 'wasm')!;
    const module = binaryen.readBinary(image.bytes);
    try {
      const body = (name: string): string => {
        const exported = module.getExportByIndex(
          [...Array(module.getNumExports()).keys()].find(
            (k) => binaryen.getExportInfo(module.getExportByIndex(k)).name === name,
          )!,
        );
        const fn = module.getFunction(binaryen.getExportInfo(exported).value);
        return binaryen.emitText(binaryen.getFunctionInfo(fn).body);
      };
      for (const type of ['F32', 'U16']) {
        const typed = body(`typed${type}`);
        assert.ok(typed.length > 0);
        assert.equal(typed, body(`bytes${type}`), `typed${type} and bytes${type} compile to one body`);
      }
    } finally {
      module.dispose();
    }
  });

  it('types the wrapper of a per-item kernel with { items } and without the item counts', async () => {
    // The wrappers of the previous test's build, out.js and out.d.ts.
    await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
    await writeFile(
      join(dir, 'use.ts'),
      `import { Offload } from 'offload-ts';
import { load } from './out.js';
const runtime = await Offload.init();
const k = await load(runtime);
const device = runtime.device(0);
const x = await device.alloc(16);
await k.typedF32(device, { items: 4 }, 2, x, x);
await k.typedF32(device, { items: [2, 2] }, 2, x, x);
await k.typedF32(device, { teams: 4 }, 2, x, x);
await k.typedF32(device, { items: 4 }, 2, x, x, 4, 1, 1);
`,
    );
    const errors = await typeCheck(dir, 'use.ts');
    assert.deepEqual(
      errors.map((line) => /^use\.ts\((\d+),\d+\): error (TS\d+)/.exec(line)?.slice(1, 3).join(' ') ?? line),
      ['9 TS2561', '10 TS2554'],
      errors.join('\n'),
    );
  });

  it('refuses ptr<T> of a type a kernel cannot load or store, naming what to write', async () => {
    await writeFile(
      join(dir, 'bad.ts'),
      `import { ptr } from "offload-ts/device";\nexport function k(flags: ptr<bool>, x: ptr<v128>): void {}\n`,
    );
    await rejectsWith(
      buildBundle({ sources: [join(dir, 'bad.ts')], output: join(dir, 'bad') }),
      'INVALID_ARGUMENT',
      /parameter 'flags' has type 'ptr<bool>'.*write ptr<T> with T one of i8, u8, i16, u16, i32, u32, i64, u64, f32, f64, or usize[\s\S]*parameter 'x' has type 'ptr<v128>'/,
    );
  });
});
