/**
 * Wasm images are untrusted input (a proxy loads what its clients send): the host device reads
 * what it relies on from the module, never from the manifest, refuses start functions and data
 * outside the static window, and bounds what a kernel makes it print (abort, trace).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { buildBundle } from '../src/build/compile.js';
import { readWasmModuleInfo } from '../src/build/wasm-module-info.js';
import { OffloadError } from '../src/errors.js';
import { decodeBundle } from '../src/image/bundle.js';
import { STATIC_WINDOW_END, STATIC_WINDOW_START } from '../src/image/wasm-abi.js';
import { Offload, type Runtime, type RuntimeOptions } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { hostileBundle, hostileModule } from './helpers/hostile-images.js';

const MiB = 1024 * 1024;
const options: RuntimeOptions = { host: { threads: 2, memoryBytes: 16 * MiB }, webgpu: false, proxies: [] };

async function withRuntime<T>(body: (runtime: Runtime) => Promise<T>): Promise<T> {
  const runtime = await Offload.init(options);
  try {
    return await body(runtime);
  } finally {
    await runtime.shutdown();
  }
}

/** Runs a kernel that does nothing: the device still loads and launches. */
async function runsKernels(runtime: Runtime): Promise<void> {
  const device = runtime.devices[0]!;
  const lib = await runtime.register(hostileBundle('fine', {}));
  const q = device.queue();
  await q.launch(await device.kernel(lib, 'k'), { teams: 4 }, []).done;
  await q.finish();
  await lib.unregister();
}

let dir: string;
/** An AssemblyScript image named 'a' with static data at 0x80000, and its hostile kernels. */
let bundleA: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'offload-images-'));
  await writeFile(
    join(dir, 'a.ts'),
    `export function check(flag: i32): void { assert(flag == 0, "static data of image a"); }
export function fill(n: i32, out: usize): void { for (let i = 0; i < n; i++) store<i32>(out + (<usize>i << 2), i); }
/** Aborts with the string at p (its length word at p - 4, whatever was written there). */
export function forged(p: usize): void { abort(changetype<string>(p), changetype<string>(p), 7, 9); }
/** Aborts with a string whose length word is the last 4 bytes but 4 of memory. */
export function atEnd(): void {
  const end = <usize>memory.size() << 16;
  store<u32>(end - 8, 0x7ffffffe);
  abort(changetype<string>(end - 4), null, 1, 1);
}
/** Aborts with a string at an address beyond memory (from 2 GiB on, an i32 is negative). */
export function wild(at: u32): void { abort(changetype<string>(<usize>at), null, 1, 1); }
export function noisy(n: i32): void { for (let i = 0; i < n; i++) trace("noisy", 1, <f64>i); }
export function noisyForged(p: usize): void { trace(changetype<string>(p)); }
`,
  );
  bundleA = (await buildBundle({ sources: [join(dir, 'a.ts')], output: join(dir, 'a'), staticBase: 0x80000 })).path;
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('untrusted wasm images on the host device', { timeout: 180_000 }, () => {
  it('hand-assembled images look like built ones', async () => {
    const built = readWasmModuleInfo(decodeBundle(new Uint8Array(await readFile(bundleA))).images[0]!.bytes);
    const made = readWasmModuleInfo(hostileModule({}));
    const memoryOf = (info: typeof made) =>
      info.imports.find((i) => i.module === 'env' && i.name === 'memory')!.memory!;
    assert.deepEqual({ ...memoryOf(made), minimum: 0 }, { ...memoryOf(built), minimum: 0 });
    assert.equal(built.hasStart, false);
    assert.equal(made.hasStart, false);
    const info = readWasmModuleInfo(hostileModule({ data: [{ offset: 0x90000, size: 8 }], start: 'loops' }));
    assert.deepEqual(info.dataSegments, [{ offset: 0x90000, size: 8 }]);
    assert.equal(info.hasStart, true);
    await withRuntime(runsKernels);
  });

  it('refuses an image with static data outside the static window, writing nothing', async () => {
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      // The first buffer lies right above the window: an image must not write over it.
      const buffer = await device.alloc(64);
      const q = device.queue();
      q.write(buffer, new Uint8Array(64));
      await q.finish();
      const cases: [string, number, number][] = [
        ['over-buffers', STATIC_WINDOW_END, 16],
        ['null-page', 0, 16],
        ['straddles', STATIC_WINDOW_END - 8, 16],
        ['below', STATIC_WINDOW_START - 4, 8],
      ];
      for (const [bundleName, offset, size] of cases) {
        // The manifest claims a harmless range inside the window: it is not what counts.
        const lib = await runtime.register(
          hostileBundle(bundleName, { data: [{ offset, size }] }, { staticBase: 0xf0000, staticSize: 16 }),
        );
        const range = `\\[0x${offset.toString(16)}, 0x${(offset + size).toString(16)}\\)`;
        await rejectsWith(
          device.kernel(lib, 'k'),
          'INCOMPATIBLE_IMAGE',
          new RegExp(
            `image of '${bundleName}' has static data at ${range}, outside the static window \\[0x10000, 0x100000\\).*offload build.*--static-base`,
          ),
        );
        await lib.unregister();
      }
      const out = new Uint8Array(64);
      q.read(buffer, out);
      await q.finish();
      assert.ok(
        out.every((byte) => byte === 0),
        'a refused image wrote device memory',
      );
      await runsKernels(runtime);
    });
  });

  it('refuses a data segment whose address is not a constant, naming the image', async () => {
    await withRuntime(async (runtime) => {
      const lib = await runtime.register(hostileBundle('moving', { globalOffset: true }));
      await rejectsWith(
        runtime.devices[0]!.kernel(lib, 'k'),
        'INCOMPATIBLE_IMAGE',
        /image of 'moving' cannot be loaded: .*data segment offset is not an i32 constant.*offload build/,
      );
      await runsKernels(runtime);
    });
  });

  it('takes the static range from the module: a manifest that lies cannot overlap another image', async () => {
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      const a = await runtime.register(bundleA);
      const check = await device.kernel(a, 'check');
      const overlapping = { data: [{ offset: 0x80000, size: 32 }] };
      for (const claims of [
        { staticBase: STATIC_WINDOW_START, staticSize: 0 },
        { staticBase: 0xf0000, staticSize: 64 },
      ]) {
        const liar = await runtime.register(hostileBundle('liar', overlapping, claims));
        await rejectsWith(
          device.kernel(liar, 'k'),
          'INCOMPATIBLE_IMAGE',
          /image of 'liar' keeps static data at \[0x80000, 0x80020\), which overlaps image 'a' .*--static-base/,
        );
        await liar.unregister();
      }
      // Image a's static data is intact: its assertion message reads as built.
      const q = device.queue();
      await rejectsWith(q.launch(check, { teams: 1 }, [1]).done, 'KERNEL_TRAP', /abort: static data of image a at /);
      await q.finish().catch(() => {});
      // And a manifest that claims a's range for an image without data does not keep it out.
      const claimer = await runtime.register(hostileBundle('claimer', {}, { staticBase: 0x80000, staticSize: 4096 }));
      await q.launch(await device.kernel(claimer, 'k'), { teams: 1 }, []).done;
      await q.finish();
    });
  });

  it('refuses images with a start function, even one that loops forever, and goes on', async () => {
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      for (const start of ['returns', 'loops'] as const) {
        const lib = await runtime.register(hostileBundle(`start-${start}`, { start }));
        await rejectsWith(
          device.kernel(lib, 'k'),
          'INCOMPATIBLE_IMAGE',
          new RegExp(`image of 'start-${start}' has a start function .*offload build`),
        );
        await lib.unregister();
      }
      await runsKernels(runtime);
    });
  });

  it('refuses at build time a kernel file with top-level code, naming the file', async () => {
    const sources: [string, string][] = [
      [
        'call.ts',
        'function twice(x: i32): i32 { return load<i32>(x) * 2; }\nconst scale: i32 = twice(64);\nexport function k(p: usize): void { store<i32>(p, scale); }\n',
      ],
      [
        'loop.ts',
        'for (let i = 0; i < 4; i++) store<i32>(0x100000 + (<usize>i << 2), i);\nexport function k(p: usize): void { store<i32>(p, 1); }\n',
      ],
    ];
    for (const [file, text] of sources) {
      await writeFile(join(dir, file), text);
      for (const optimize of [true, false]) {
        await assert.rejects(
          buildBundle({ sources: [join(dir, file)], output: join(dir, 'top-level'), optimize }),
          (error: unknown) => {
            assert.ok(OffloadError.is(error, 'INVALID_ARGUMENT'), String(error));
            assert.match(error.message, new RegExp(`${file.replace('.', '\\.')}: top-level code`));
            assert.match(error.message, /move that code into a kernel, or make the value a constant/);
            return true;
          },
        );
      }
    }
  });

  it('cuts an abort message whose length word is forged, and reads nothing outside memory', async () => {
    await withRuntime(async (runtime) => {
      const device = runtime.devices[0]!;
      const lib = await runtime.register(bundleA);
      const text = await device.alloc(4 + 4096);
      const forged = new Uint8Array(4 + 4096);
      new DataView(forged.buffer).setUint32(0, 0x7ffffffe, true); // a 2 GiB string
      for (let i = 4; i < forged.length; i += 2) forged[i] = 0x41; // 'A' in UTF-16
      const q = device.queue();
      q.write(text, forged);
      await q.finish();
      // Offsets into a buffer are bytes: the string starts after its length word.
      const started = performance.now();
      const error = await rejectsWith(
        q.launch(await device.kernel(lib, 'forged'), { teams: 1 }, [text.at(4)]).done,
        'KERNEL_TRAP',
        new RegExp(`abort: A{512}\\.\\.\\. at A{256}\\.\\.\\.:7:9$`),
      );
      assert.ok(error.message.length < 1024, `message of ${error.message.length} characters`);
      assert.ok(performance.now() - started < 10_000);
      await q.finish().catch(() => {});
      await rejectsWith(
        q.launch(await device.kernel(lib, 'atEnd'), { teams: 1 }, []).done,
        'KERNEL_TRAP',
        // eslint-disable-next-line no-control-regex -- the NUL bytes at the end of memory are what is checked
        /abort: \u0000\u0000\.\.\.$/,
      );
      await q.finish().catch(() => {});
      await rejectsWith(
        q.launch(await device.kernel(lib, 'wild'), { teams: 1 }, [0xfffffff0]).done,
        'KERNEL_TRAP',
        /abort: <string at 0xfffffff0>$/,
      );
      await q.finish().catch(() => {});
      // The device goes on.
      const out = await device.alloc(64);
      q.launch(await device.kernel(lib, 'fill'), { teams: 1 }, [16, out]);
      const values = new Int32Array(16);
      q.read(out, values);
      await q.finish();
      assert.deepEqual(
        [...values],
        Array.from({ length: 16 }, (_, i) => i),
      );
    });
  });

  it('writes a bounded trace for a kernel that traces a million times, and goes on', async () => {
    const script = `
      import { Offload } from ${JSON.stringify(new URL('../src/index.ts', import.meta.url).href)};
      const runtime = await Offload.init(${JSON.stringify(options)});
      const device = runtime.devices[0];
      const lib = await runtime.register(${JSON.stringify(bundleA)});
      const q = device.queue();
      q.launch(await device.kernel(lib, 'noisy'), { teams: 2 }, [1000000]);
      const text = await device.alloc(4 + 4096);
      const forged = new Uint8Array(4 + 4096).fill(0x42);
      new DataView(forged.buffer).setUint32(0, 0x7ffffffe, true);
      q.write(text, forged);
      q.launch(await device.kernel(lib, 'noisyForged'), { teams: 1 }, [text.at(4)]);
      const out = await device.alloc(64);
      q.launch(await device.kernel(lib, 'fill'), { teams: 1 }, [16, out]);
      const values = new Int32Array(16);
      q.read(out, values);
      await q.finish();
      console.log('sum', values.reduce((a, b) => a + b));
      await runtime.shutdown();
    `;
    const run = promisify(execFile);
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      timeout: 60_000,
      maxBuffer: 64 * MiB,
    });
    assert.match(stdout, /sum 120/);
    assert.ok(stderr.length < 32 * 1024, `stderr has ${stderr.length} bytes`);
    const lines = stderr.split('\n');
    assert.equal(lines.filter((line) => /^offload trace: noisy \d+$/.test(line)).length, 2 * 64);
    assert.equal(
      lines.filter((line) =>
        /^offload trace: 999936 more trace lines of kernel 'noisy' \(team [01]\) dropped/.test(line),
      ).length,
      2,
    );
    const forgedLine = lines.find((line) => line.startsWith('offload trace: \u4242'));
    assert.ok(forgedLine !== undefined, stderr.slice(0, 2000));
    assert.equal(forgedLine, `offload trace: ${'\u4242'.repeat(256)}... `);
  });
});
