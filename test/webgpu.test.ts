/**
 * The WebGPU device beyond the conformance suite: the WGSL kernel ABI (scalars of every type,
 * several buffers, offsets, workgroup sizes), build and shader errors, grid limits, a bundle with
 * both image kinds used on both devices in one program, device loss, and a WebGPU device served
 * through a real proxy. Skipped, with the reason, where there is no adapter (never in CI).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildBundle } from '../src/build/compile.js';
import { Offload, type Device, type Library, type Runtime } from '../src/index.js';
import type { WebGpuDevice } from '../src/plugins/webgpu/device.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

const skip = await webgpuSkipReason();

const init = (): Promise<Runtime> =>
  Offload.init({ host: { threads: 2, memoryBytes: 64 * 1024 * 1024 }, webgpu: { fallback: true }, proxies: [] });
const gpuOf = (runtime: Runtime): Device => runtime.devices.find((device) => device.info.plugin === 'webgpu')!;

/** Builds `files` (name -> text) in a temporary directory; returns the bundle path. */
async function buildFiles(dir: string, files: Record<string, string>): Promise<string> {
  for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  const result = await buildBundle({
    sources: Object.keys(files).map((name) => join(dir, name)),
    output: join(dir, 'out'),
  });
  return result.path;
}

describe('WebGPU device', { skip, timeout: 120_000 }, () => {
  let runtime: Runtime;
  let gpu: Device;
  let abi: Library;
  let dir: string;

  before(async () => {
    runtime = await init();
    gpu = gpuOf(runtime);
    abi = await runtime.register(await fixtureBundle('test/fixtures/webgpu/abi.wgsl'));
    dir = await mkdtemp(join(tmpdir(), 'offload-webgpu-'));
  });

  after(async () => {
    await runtime?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('describes itself with the adapter limits behind its figures', () => {
    const { info } = gpu;
    assert.equal(info.kind, 'gpu');
    assert.deepEqual(info.imageFormats, ['wgsl']);
    assert.deepEqual(info.memoryKinds, ['device']);
    assert.deepEqual(
      info.maxTeamDims,
      [1, 1, 1].map(() => info.limits!.maxComputeWorkgroupsPerDimension),
    );
    assert.equal(info.maxTeams, info.limits!.maxComputeWorkgroupsPerDimension);
    assert.equal(info.maxTeamMemoryBytes, info.limits!.maxComputeWorkgroupStorageSize);
    assert.ok(info.maxThreadsPerTeam <= info.limits!.maxComputeInvocationsPerWorkgroup!);
    assert.ok(info.limits!.minStorageBufferOffsetAlignment! > 0);
  });

  it('makes no buffer larger than a kernel binds whole, and holds all buffers within its memory budget', async () => {
    const { info } = gpu;
    const largest = Math.min(info.limits!.maxStorageBufferBindingSize!, info.limits!.maxBufferSize!) & ~3;
    await rejectsWith(
      gpu.alloc(largest + 4),
      'OUT_OF_MEMORY',
      /more than one buffer of this WebGPU device holds.*maxStorageBufferBindingSize/,
    );
    // The budget: buffers of the largest size until it is full, then OUT_OF_MEMORY naming it.
    const held = [];
    for (let bytes = 0; bytes + largest <= info.memoryBytes; bytes += largest) held.push(await gpu.alloc(largest));
    await rejectsWith(gpu.alloc(largest), 'OUT_OF_MEMORY', /memory budget.*OFFLOAD_WEBGPU_MEMORY/);
    await held.pop()!.free();
    held.push(await gpu.alloc(largest));
    for (const buffer of held) await buffer.free();
  });

  it('passes scalars of every WGSL type through the uniform buffer, by their bits', async () => {
    const scalars = await gpu.kernel(abi, 'scalars');
    assert.deepEqual(
      scalars.params.map((p) => `${p.name}: ${p.type}`),
      ['i: i32', 'u: i32', 'f: f32', 'scalars_out: ptr'],
    );
    const out = await gpu.alloc(16);
    const q = gpu.queue();
    q.launch(scalars, { teams: 1 }, [-123456, 0xfffffffe, 1.25, out]);
    const words = new DataView(new ArrayBuffer(12));
    q.read(out, words);
    await q.finish();
    assert.equal(words.getInt32(0, true), -123456);
    assert.equal(words.getUint32(4, true), 0xfffffffe);
    assert.equal(words.getFloat32(8, true), 1.25);
    await out.free();
  });

  it('binds several buffers in binding order, with the scalars where the uniform sits, at pointer offsets', async () => {
    const combine = await gpu.kernel(abi, 'combine');
    assert.deepEqual(
      combine.params.map((p) => p.type),
      ['ptr', 'i32', 'f32', 'ptr', 'ptr'],
    );
    const n = 1000;
    const offset = 256;
    const a = await gpu.alloc(offset + n * 4);
    const b = await gpu.alloc(n * 4);
    const c = await gpu.alloc(n * 4);
    const q = gpu.queue();
    const av = Float32Array.from({ length: n }, (_, i) => i);
    const bv = Float32Array.from({ length: n }, (_, i) => 2 * i + 1);
    q.write(a, av, { offset });
    q.write(b, bv);
    q.launch(combine, { teams: 3, threads: 32 }, [a.at(offset), n, 0.5, b, c]);
    const cv = new Float32Array(n);
    q.read(c, cv);
    await q.finish();
    for (let i = 0; i < n; i++) assert.equal(cv[i], av[i]! + 0.5 * bv[i]!, `c[${i}]`);

    const alignment = gpu.info.limits!.minStorageBufferOffsetAlignment!;
    if (alignment > 4) {
      await rejectsWith(
        q.launch(combine, { teams: 1 }, [a.at(4), n, 1, b, c]).done,
        'INVALID_ARGUMENT',
        new RegExp(`'combine_a'.*offset 4.*minStorageBufferOffsetAlignment \\(${alignment}\\)`),
      );
      await rejectsWith(q.finish(), 'INVALID_ARGUMENT');
    }
    // A buffer bound writable may not be bound again in the same dispatch: refused, and the device goes on.
    await rejectsWith(
      q.launch(combine, { teams: 1 }, [c, n, 1, b, c]).done,
      'INVALID_ARGUMENT',
      /launch of 'combine': pointers 'combine_a' and 'combine_c' are into the same buffer/,
    );
    await rejectsWith(q.finish(), 'INVALID_ARGUMENT');
    q.launch(combine, { teams: 1 }, [a.at(offset), n, 0, b, c]);
    q.read(c, cv);
    await q.finish();
    assert.deepEqual(cv, av);
    await Promise.all([a.free(), b.free(), c.free()]);
  });

  it('runs teams of the launch threads with an override workgroup size, and of the fixed size otherwise', async () => {
    const fixed = await gpu.kernel(abi, 'fixed_size');
    const out = await gpu.alloc(8 * 4);
    const q = gpu.queue();
    q.launch(fixed, { teams: 2, threads: 100 }, [out]);
    const ids = new Uint32Array(8);
    q.read(out, ids);
    await q.finish();
    assert.deepEqual([...ids], [0, 1, 2, 3, 0, 1, 2, 3]);
    await out.free();
  });

  it('refuses a grid beyond the adapter limits with INVALID_ARGUMENT naming the limit', async () => {
    const fixed = await gpu.kernel(abi, 'fixed_size');
    const out = await gpu.alloc(16);
    const q = gpu.queue();
    const teams = gpu.info.maxTeams + 1;
    await rejectsWith(
      q.launch(fixed, { teams }, [out]).done,
      'INVALID_ARGUMENT',
      new RegExp(`grid.teams ${teams}: .*maxComputeWorkgroupsPerDimension`),
    );
    await rejectsWith(q.finish(), 'INVALID_ARGUMENT');
    await rejectsWith(
      q.launch(fixed, { teams: [2, teams] }, [out]).done,
      'INVALID_ARGUMENT',
      new RegExp(`grid.teams 2 x ${teams}: y = ${teams} .*maxTeamDims.*maxComputeWorkgroupsPerDimension`),
    );
    await rejectsWith(q.finish(), 'INVALID_ARGUMENT');
    await out.free();
  });

  it('reports shader compilation errors at load time as INCOMPATIBLE_IMAGE with file, line and column', async () => {
    const bundle = await buildFiles(dir, {
      'bad.wgsl': [
        '@group(0) @binding(0) var<storage, read_write> out: array<i32>;',
        '@compute @workgroup_size(1)',
        'fn broken() {',
        '  out[0] = 1.5;',
        '}',
      ].join('\n'),
    });
    const library = await runtime.register(bundle);
    const error = await rejectsWith(gpu.kernel(library, 'broken'), 'INCOMPATIBLE_IMAGE', /WGSL compilation failed/);
    assert.match(error.message, /bad\.wgsl:4:\d+: error: .*'f32'.*'i32'|bad\.wgsl:4:\d+: error/);
    await library.unregister();
  });

  it('refuses WGSL the ABI cannot call, at build time, naming the file and kernel', async () => {
    const wgsl = (body: string) => ({ 'k.wgsl': body });
    await rejectsWith(
      buildFiles(dir, wgsl('@compute @workgroup_size(1) fn k( {}')),
      'INVALID_ARGUMENT',
      /WGSL parse error: k\.wgsl:1/,
    );
    await rejectsWith(
      buildFiles(
        dir,
        wgsl(
          '@group(1) @binding(0) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1) fn k() { o[0] = 1.0; }',
        ),
      ),
      'INVALID_ARGUMENT',
      /k\.wgsl: kernel 'k': 'o' \(@group\(1\) @binding\(0\)\).*group 0/,
    );
    await rejectsWith(
      buildFiles(
        dir,
        wgsl(
          '@group(0) @binding(0) var<uniform> v: vec4f;\n@group(0) @binding(1) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1) fn k() { o[0] = v.x; }',
        ),
      ),
      'INVALID_ARGUMENT',
      /scalar parameter 'v' has type vec4.*i32, u32 and f32/,
    );
    await rejectsWith(
      buildFiles(dir, wgsl('@compute @workgroup_size(8, 2.5) fn k() {}')),
      'INVALID_ARGUMENT',
      /@workgroup_size\(8, 2.5\): each size must be a number or the name of an override constant/,
    );
    // A kernel in both images must take the same parameters.
    await rejectsWith(
      buildFiles(dir, {
        'k.ts': 'export function k(n: i32, out: usize): void { store<i32>(out, n); }',
        'k.wgsl':
          '@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1) fn k() { o[0] = 1.0; }',
      }),
      'INVALID_ARGUMENT',
      /kernel 'k' \(o: ptr\) does not match its wasm image \(n: i32, out: ptr\)/,
    );
  });

  it('runs one bundle with both image kinds on the host device and the GPU in one program', async () => {
    const library = await runtime.register(await fixtureBundle());
    const host = runtime.devices[0]!;
    assert.equal(host.info.plugin, 'host');
    const n = 4096;
    const x = Float32Array.from({ length: n }, (_, i) => i / 8);
    const results: Float32Array[] = [];
    for (const device of [host, gpu]) {
      const saxpy = await device.kernel(library, 'saxpy');
      assert.deepEqual(
        saxpy.params.map((p) => p.name),
        ['n', 'a', 'x', 'y'],
      );
      const xb = await device.alloc(n * 4);
      const yb = await device.alloc(n * 4);
      const q = device.queue();
      q.write(xb, x);
      q.write(yb, new Float32Array(n).fill(1));
      q.launch(saxpy, { teams: 16, threads: 64 }, [n, 3, xb, yb]);
      const y = new Float32Array(n);
      q.read(yb, y);
      await q.finish();
      results.push(y);
      await Promise.all([xb.free(), yb.free()]);
    }
    assert.deepEqual(results[1], results[0]);
    assert.equal(results[0]![8], 4);
    // A kernel the build did not translate (no f64 in WGSL) fails on the GPU quoting the build's note; it runs on the host.
    await rejectsWith(
      gpu.kernel(library, 'scale_f64'),
      'INCOMPATIBLE_IMAGE',
      /device \d+ can run \(it runs \[wgsl\]\): test\/fixtures\/kernels\.ts:\d+: kernel 'scale_f64' is not translated to WGSL .*it has parameter 'a' of type f64 \(WGSL has no f64\)/,
    );
    await rejectsWith(gpu.kernel(library, 'no_such_kernel'), 'NOT_FOUND', /no_such_kernel/);
    await host.kernel(library, 'scale_f64');
    await library.unregister();
  });

  it("fails a kernel of a bundle with no WGSL image with INCOMPATIBLE_IMAGE quoting the build's note", async () => {
    const bundle = await buildFiles(dir, {
      'only_f64.ts': 'export function halve(x: usize): void {\n  store<f64>(x, load<f64>(x) / 2);\n}\n',
    });
    const library = await runtime.register(bundle);
    await rejectsWith(
      gpu.kernel(library, 'halve'),
      'INCOMPATIBLE_IMAGE',
      /only_f64\.ts:2: kernel 'halve' is not translated to WGSL .*: it stores a f64, which WGSL has no type for/,
    );
    await rejectsWith(
      gpu.kernel(library, 'other'),
      'INCOMPATIBLE_IMAGE',
      /has no image device \d+ can run: it has \[wasm\]/,
    );
    await library.unregister();
  });

  it('turns a lost GPU device into DEVICE_LOST for every later operation', async () => {
    const own = await init();
    const device = gpuOf(own);
    const buffer = await device.alloc(64);
    const q = device.queue();
    q.write(buffer, new Uint8Array(64).fill(3));
    await q.finish();
    await (device as unknown as { plugin: WebGpuDevice }).plugin.simulateLoss();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await rejectsWith(q.read(buffer, new Uint8Array(64)).done, 'DEVICE_LOST', /WebGPU device was lost/);
    await rejectsWith(device.alloc(16), 'DEVICE_LOST');
    // The host device of the same runtime goes on.
    const hostBuffer = await own.devices[0]!.alloc(16);
    await hostBuffer.free();
    await own.shutdown();
  });
});

describe('WebGPU device behind a proxy', { skip, timeout: 120_000 }, () => {
  let proxy: ProxyProcess;
  let runtime: Runtime;

  before(async () => {
    proxy = await startProxy({ threads: 1, memory: '64M', webgpu: 'fallback' });
    runtime = await Offload.init({
      host: { threads: 1, memoryBytes: 16 * 1024 * 1024 },
      webgpu: false,
      proxies: [proxy.address],
      token: proxy.token,
    });
  });

  after(async () => {
    await runtime?.shutdown();
    await proxy?.stop();
  });

  it('serves the proxy machine GPU as a remote device that runs the wgsl image', async () => {
    const remoteGpu = runtime.devices.find((device) => device.info.plugin === 'remote' && device.info.kind === 'gpu');
    assert.ok(remoteGpu, `a remote GPU among ${runtime.devices.map((d) => d.info.name).join(', ')}`);
    assert.deepEqual(remoteGpu.info.imageFormats, ['wgsl']);
    const library = await runtime.register(await fixtureBundle());
    const saxpy = await remoteGpu.kernel(library, 'saxpy');
    const n = 10_000;
    const x = await remoteGpu.alloc(n * 4);
    const y = await remoteGpu.alloc(n * 4);
    const q = remoteGpu.queue();
    q.write(
      x,
      Float32Array.from({ length: n }, (_, i) => i),
    );
    q.write(y, new Float32Array(n).fill(2));
    q.launch(saxpy, { teams: 40, threads: 64 }, [n, 0.5, x, y]);
    // Device to device across the wire: the remote GPU's result lands on the local host device.
    const local = runtime.devices[0]!;
    const landed = await local.alloc(n * 4);
    q.copy(landed, y);
    await q.finish();
    const out = new Float32Array(n);
    const lq = local.queue();
    lq.read(landed, out);
    await lq.finish();
    for (const i of [0, 1, 4999, 9999]) assert.equal(out[i], 0.5 * i + 2);
    // The proxy's errors keep their codes: a pointer WebGPU cannot bind.
    const alignment = remoteGpu.info.limits!.minStorageBufferOffsetAlignment!;
    if (alignment > 4)
      await rejectsWith(
        q.launch(saxpy, { teams: 1 }, [4, 1, x.at(4), y]).done,
        'INVALID_ARGUMENT',
        /minStorageBufferOffsetAlignment/,
      );
    await q.finish().catch(() => {});
    // Beyond the eager size: streamed in chunks both ways, at an unaligned offset.
    const big = await remoteGpu.alloc(3 * 1024 * 1024 + 8);
    const data = Uint8Array.from({ length: 3 * 1024 * 1024 }, (_, i) => (i * 31) & 0xff);
    q.write(big, data, { offset: 3 });
    const back = new Uint8Array(data.length);
    q.read(big, back, { offset: 3 });
    await q.finish();
    assert.ok(
      back.every((value, i) => value === data[i]),
      'a streamed write and read round-trip',
    );
    await Promise.all([x.free(), y.free(), landed.free(), big.free()]);
  });
});
