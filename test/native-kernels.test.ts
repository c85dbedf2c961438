// Kernels in C and Rust: `offload build` through the system's clang-16 and rustc (Debian's, with
// the wasm32 standard library), run for real on the host device, a TCP proxy and an MPI proxy
// rank, refused by a WebGPU device with the build's note; and every bad input a coded error that
// names the file, the function and what to write instead. Without the compilers the tests say
// why and skip, unless OFFLOAD_REQUIRE_NATIVE_KERNELS=1 (CI installs them) makes that a failure.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildBundle, type BuildResult } from '../src/build/compile.js';
import { findClang, findRust } from '../src/build/native-toolchain.js';
import { readCodeShapes } from '../src/build/wasm-code-shape.js';
import { decodeBundle } from '../src/image/bundle.js';
import { Offload, OffloadError, type Device, type Library } from '../src/index.js';
import { mpiUnavailable } from '../src/transport/mpi/addon.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

const fixtures = fileURLToPath(new URL('./fixtures/native/', import.meta.url));
const cli = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const mpiApp = fileURLToPath(new URL('./fixtures/native/mpi-app.ts', import.meta.url));

async function compilersMissing(): Promise<string | undefined> {
  try {
    await findClang();
    await findRust();
    return undefined;
  } catch (error) {
    if (process.env.OFFLOAD_REQUIRE_NATIVE_KERNELS === '1') throw error;
    return (error as Error).message;
  }
}
const skip = (await compilersMissing()) ?? false;

let dir = '';
let c: BuildResult;
let rust: BuildResult;

/** Runs saxpy of `library` on `device` over n elements and returns y. */
async function saxpy(device: Device, library: Library, teams: number): Promise<Float32Array> {
  const n = 1000;
  const kernel = await device.kernel(library, 'saxpy');
  await using x = await device.alloc(n * 4);
  await using y = await device.alloc(n * 4);
  const q = device.queue();
  q.write(
    x,
    Float32Array.from({ length: n }, (_, i) => i),
  );
  q.write(y, new Float32Array(n).fill(2));
  q.launch(kernel, { teams }, [n, 3, x, y]);
  const out = new Float32Array(n);
  q.read(y, out);
  await q.finish();
  return out;
}

const cExpected = (i: number) => 3 * i + 2 + [0.5, 1.5, 2.5, 3.5][i & 3]!;
const rustExpected = (i: number) => 3 * i + 2 + 1;

function assertSaxpy(out: Float32Array, expected: (i: number) => number, where: string): void {
  const wrong = out.findIndex((v, i) => v !== expected(i));
  assert.equal(wrong, -1, `${where}: y[${wrong}] = ${out[wrong]}, expected ${expected(wrong)}`);
}

/** Builds `text` as `file` in a fresh directory and returns the error it fails with. */
async function buildError(file: string, text: string, env: NodeJS.ProcessEnv = {}): Promise<OffloadError> {
  const source = path.join(dir, file);
  await writeFile(source, text);
  const saved = Object.fromEntries(Object.keys(env).map((key) => [key, process.env[key]]));
  Object.assign(process.env, env);
  try {
    await buildBundle({ sources: [source], output: path.join(dir, 'bad') });
  } catch (error) {
    assert.ok(error instanceof OffloadError, `not an OffloadError: ${String(error)}`);
    return error;
  } finally {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
  assert.fail(`${file} built`);
}

describe('kernels in C, C++ and Rust', { skip, timeout: 300_000 }, () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-native-'));
    c = await buildBundle({ sources: [path.join(fixtures, 'kernels.c')], output: path.join(dir, 'c') });
    rust = await buildBundle({ sources: [path.join(fixtures, 'kernels.rs')], output: path.join(dir, 'rust') });
  });
  after(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  it('builds C kernels with parameter types from the source, a wasm-only note each, and typed wrappers', async () => {
    const kernels = c.manifest.entries.map((entry) => [entry.name, entry.params.map((p) => `${p.name}:${p.type}`)]);
    assert.deepEqual(kernels, [
      ['saxpy', ['n:i32', 'a:f32', 'x:ptr', 'y:ptr']],
      ['store_team', ['out:ptr']],
      ['team_sum', ['in:ptr', 'out:ptr']],
      ['boom', ['when:i32', 'out:ptr']],
      ['widen', ['big:i64', 'half:f64', 'out:ptr']],
    ]);
    const [image] = c.manifest.images;
    assert.equal(c.manifest.images.length, 1);
    assert.equal(image!.format, 'wasm');
    assert.ok(image!.staticSize > 0, 'the bias table and the print literal are static data');
    assert.deepEqual(
      c.notes.map((note) => `${path.basename(note.file)}:${note.line} ${note.kernel}`),
      [
        'kernels.c:7 saxpy',
        'kernels.c:13 store_team',
        'kernels.c:16 team_sum',
        'kernels.c:28 boom',
        'kernels.c:34 widen',
      ],
    );
    for (const entry of c.manifest.entries)
      assert.match(entry.wasmOnly ?? '', /runs on wasm devices only.*written in C/);
    const wrappers = await readFile(c.wrappers.dts, 'utf8');
    assert.match(wrappers, /saxpy\(/);
    assert.match(wrappers, /widen\(/);
    // The module as the device gets it: memory imported shared, only the kernels exported.
    const module = new WebAssembly.Module(decodeBundle(c.bundle).images[0]!.bytes as Uint8Array<ArrayBuffer>);
    assert.deepEqual(
      WebAssembly.Module.exports(module).map((e) => e.name),
      ['saxpy', 'store_team', 'team_sum', 'boom', 'widen'].concat(
        WebAssembly.Module.exports(module)
          .map((e) => e.name)
          .filter((name) => name.startsWith('asyncify_')),
      ),
    );
    assert.equal(WebAssembly.Module.imports(module).find((i) => i.kind === 'memory')?.name, 'memory');
  });

  it('builds Rust kernels the same way', () => {
    assert.deepEqual(
      rust.manifest.entries.map((entry) => [entry.name, entry.params.map((p) => `${p.name}:${p.type}`)]),
      [
        ['saxpy', ['n:i32', 'a:f32', 'x:ptr', 'y:ptr']],
        ['boom', ['when:i32', 'out:ptr']],
        ['pick', ['n:i32', 'at:i32', 'x:ptr', 'out:ptr']],
      ],
    );
    assert.match(rust.manifest.entries[0]!.wasmOnly ?? '', /kernels\.rs:7: kernel 'saxpy' .*written in Rust/);
  });

  it('runs C and Rust kernels on the host device: results, print lines, team memory with a barrier, i64 and f64', async () => {
    const lines: string[] = [];
    await using runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 64 * 1024 * 1024 },
      proxies: [],
      webgpu: false,
      print: (line) => lines.push(line.text),
    });
    const device = runtime.devices[0]!;
    await using cLib = await runtime.register(c.path);
    await using rustLib = await runtime.register(rust.path);
    assertSaxpy(await saxpy(device, cLib, 8), cExpected, 'C on the host device');
    assertSaxpy(await saxpy(device, rustLib, 8), rustExpected, 'Rust on the host device');
    assert.deepEqual(lines, ['saxpy n, a: 1000, 3', 'saxpy n, a: 1000, 3']);

    const teams = 4;
    const threads = 8;
    await using input = await device.alloc(teams * threads * 4);
    await using sums = await device.alloc(teams * 4);
    const q = device.queue();
    q.write(
      input,
      Int32Array.from({ length: teams * threads }, (_, i) => i),
    );
    q.launch(await device.kernel(cLib, 'team_sum'), { teams, threads, teamMemoryBytes: threads * 4 }, [input, sums]);
    const got = new Int32Array(teams);
    q.read(sums, got);
    await q.finish();
    assert.deepEqual([...got], [28, 92, 156, 220]);

    await using wide = await device.alloc(8);
    q.launch(await device.kernel(cLib, 'widen'), { teams: 1 }, [2n ** 40n, 0.5, wide]);
    const value = new Float64Array(1);
    q.read(wide, value);
    await q.finish();
    assert.equal(value[0], 2 ** 40 + 0.5);
  });

  it("gives C kernels sin, cos and atan (offload_math.h): within 1 ulp of the program's Math, NaN where documented", async () => {
    const source = path.join(dir, 'trig.c');
    await writeFile(
      source,
      `#include "offload.h"
#include "offload_math.h"
OFFLOAD_KERNEL void trig(int n, offload_ptr(const double) x, offload_ptr(double) out) {
  for (int i = 0; i < n; i++) {
    out[3 * i] = offload_sin(x[i]);
    out[3 * i + 1] = offload_cos(x[i]);
    out[3 * i + 2] = offload_atan(x[i]);
  }
}
`,
    );
    const trig = await buildBundle({ sources: [source], output: path.join(dir, 'trig') });
    // Small, medium (reduced by pi/2 several times), near multiples of pi/2, large; then the edges.
    const xs = [
      ...Array.from({ length: 3000 }, (_, i) => Math.sin(i * 12.9898) * [1, 10, 2000, 1e6][i % 4]!),
      ...[1, 2, 3, 4, 100, 1e5].map((k) => (k * Math.PI) / 2),
      0,
      -0,
      1e-300,
      2.5,
      -7,
      1e20,
    ];
    await using runtime = await Offload.init({ host: { threads: 1 }, proxies: [], webgpu: false });
    const device = runtime.devices[0]!;
    await using library = await runtime.register(trig.path);
    await using x = await device.alloc(xs.length * 8);
    await using out = await device.alloc(xs.length * 24);
    const got = new Float64Array(xs.length * 3);
    const q = device.queue();
    q.write(x, Float64Array.from(xs));
    q.launch(await device.kernel(library, 'trig'), { teams: 1 }, [xs.length, x, out]);
    q.read(out, got);
    await q.finish();
    const bits = new BigInt64Array(2);
    const doubles = new Float64Array(bits.buffer);
    const ulps = (a: number, b: number): number => {
      doubles[0] = a;
      doubles[1] = b;
      const [p, r] = [...bits].map((v) => (v < 0n ? -(v & 0x7fffffffffffffffn) : v));
      return Math.abs(Number(p! - r!));
    };
    xs.forEach((value, i) => {
      const want =
        Math.abs(value) >= 2 ** 50
          ? [NaN, NaN, Math.atan(value)]
          : [Math.sin(value), Math.cos(value), Math.atan(value)];
      want.forEach((expected, k) => {
        const actual = got[3 * i + k]!;
        if (Number.isNaN(expected))
          assert.ok(Number.isNaN(actual), `${['sin', 'cos', 'atan'][k]}(${value}) = ${actual}`);
        else {
          const off = ulps(actual, expected);
          assert.ok(off <= 1, `${['sin', 'cos', 'atan'][k]}(${value}) = ${actual}, Math gives ${expected}`);
        }
      });
    });
    assert.ok(Object.is(got[3 * (xs.length - 5)], -0), 'sin(-0) is -0');
  });

  it('runs a loop-free C kernel on the calling thread (provably short), a looping one on the workers only', async () => {
    const bytes = decodeBundle(c.bundle).images[0]!.bytes;
    const shapes = readCodeShapes(bytes, ['store_team', 'saxpy']);
    assert.equal(shapes.get('store_team')!.bounded, true);
    assert.equal(shapes.get('saxpy')!.bounded, false);
    await using runtime = await Offload.init({
      host: { threads: 1, memoryBytes: 32 * 1024 * 1024 },
      proxies: [],
      webgpu: false,
    });
    const device = runtime.devices[0]!;
    await using library = await runtime.register(c.path);
    await using out = await device.alloc(16);
    const q = device.queue();
    q.launch(await device.kernel(library, 'store_team'), { teams: 4 }, [out]);
    const got = new Int32Array(4);
    q.read(out, got);
    await q.finish();
    assert.deepEqual([...got], [1, 11, 21, 31]);
  });

  it('reports a trap with the kernel name, in C (__builtin_trap) and in Rust (a panic)', async () => {
    await using runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 32 * 1024 * 1024 },
      proxies: [],
      webgpu: false,
    });
    const device = runtime.devices[0]!;
    for (const built of [c, rust]) {
      await using library = await runtime.register(built.path);
      await using out = await device.alloc(64);
      const launched = device.queue().launch(await device.kernel(library, 'boom'), { teams: 4 }, [2, out]);
      await assert.rejects(launched.done, (error: OffloadError) => {
        assert.equal(error.code, 'KERNEL_TRAP');
        assert.match(error.message, /kernel 'boom' trapped in team 2: unreachable/);
        return true;
      });
    }
    // A failed bounds check of a Rust slice: core's panic path (it may use the trap stack) traps.
    await using library = await runtime.register(rust.path);
    await using x = await device.alloc(16);
    const pick = await device.kernel(library, 'pick');
    const q = device.queue();
    q.write(x, Float32Array.of(1, 2, 3, 4));
    q.launch(pick, { teams: 1 }, [3, 2, x, x]);
    const back = new Float32Array(4);
    q.read(x, back);
    await q.finish();
    assert.equal(back[0], 3);
    await assert.rejects(q.launch(pick, { teams: 1 }, [3, 7, x, x]).done, (error: OffloadError) => {
      assert.equal(error.code, 'KERNEL_TRAP');
      assert.match(error.message, /kernel 'pick' trapped in team 0: unreachable/);
      return true;
    });
  });

  it('runs C and Rust kernels on a TCP proxy', async () => {
    const proxy: ProxyProcess = await startProxy();
    try {
      await using runtime = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
      const device = runtime.devices[0]!;
      await using cLib = await runtime.register(c.path);
      await using rustLib = await runtime.register(rust.path);
      assertSaxpy(await saxpy(device, cLib, 8), cExpected, 'C on a TCP proxy');
      assertSaxpy(await saxpy(device, rustLib, 8), rustExpected, 'Rust on a TCP proxy');
    } finally {
      await proxy.stop();
    }
  });

  it('runs C and Rust kernels on an MPI proxy rank', async (t) => {
    let missing: string | undefined;
    try {
      execFileSync('mpirun', ['--version'], { stdio: 'ignore' });
      missing = mpiUnavailable();
    } catch {
      missing = 'mpirun is not installed (Debian: openmpi-bin libopenmpi-dev)';
    }
    if (missing !== undefined) {
      if (process.env.OFFLOAD_REQUIRE_MPI === '1') assert.fail(`MPI is required here but unavailable: ${missing}`);
      t.skip(missing);
      return;
    }
    const node = [process.execPath, '--import', 'tsx'];
    const { NODE_TEST_CONTEXT: _context, ...env } = process.env;
    const child = spawn(
      'mpirun',
      [
        '--oversubscribe',
        '-np',
        '1',
        ...node,
        cli,
        'proxy',
        '--mpi',
        ':',
        '-np',
        '1',
        ...node,
        mpiApp,
        c.path,
        rust.path,
      ],
      { env: { ...env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1', OFFLOAD_HOST_THREADS: '1' } },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 200_000);
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    clearTimeout(timer);
    assert.equal(code, 0, `${stdout}\n${stderr}`);
    const report = JSON.parse(stdout.split('\n').find((line) => line.startsWith('{'))!) as {
      location: string;
      c: number[];
      rust: number[];
    };
    assert.equal(report.location, 'mpi:0');
    assert.deepEqual(report.c, [0, 1, 2, 999].map(cExpected));
    assert.deepEqual(report.rust, [0, 1, 2, 999].map(rustExpected));
  });

  it('is refused on a WebGPU device with INCOMPATIBLE_IMAGE quoting the build note', async (t) => {
    const reason = await webgpuSkipReason();
    if (reason !== undefined) {
      t.skip(reason);
      return;
    }
    await using runtime = await Offload.init({ host: false, proxies: [], webgpu: { fallback: true } });
    const device = runtime.devices.find((d) => d.info.kind === 'gpu')!;
    assert.ok(device, 'a WebGPU device');
    for (const [built, language] of [
      [c, 'C'],
      [rust, 'Rust'],
    ] as const) {
      await using library = await runtime.register(built.path);
      await assert.rejects(device.kernel(library, 'saxpy'), (error: OffloadError) => {
        assert.equal(error.code, 'INCOMPATIBLE_IMAGE');
        assert.match(
          error.message,
          new RegExp(
            `kernel 'saxpy' is not translated to WGSL \\(it runs on wasm devices only\\): it is written in ${language}`,
          ),
        );
        return true;
      });
    }
  });

  describe('bad input: a coded error naming the file, the function and what to write instead', () => {
    it('a kernel that calls malloc', async () => {
      const error = await buildError(
        'heap.c',
        '#include "offload.h"\nvoid *malloc(unsigned long);\nOFFLOAD_KERNEL void grab(int n, offload_ptr(float) out) {\n  float *t = malloc(n * 4);\n  out[0] = t[0];\n}\n',
      );
      assert.equal(error.code, 'INVALID_ARGUMENT');
      assert.match(error.message, /heap\.c \(function 'grab'\) calls malloc: a device has no heap/);
      assert.match(
        error.message,
        /allocate the memory in the program \(device\.alloc\) and pass it to the kernel as a pointer parameter/,
      );
    });

    it('a kernel that calls operator new in C++, or a C library function', async () => {
      const error = await buildError(
        'heap.cpp',
        '#include "offload.h"\nOFFLOAD_KERNEL void grab(int n, offload_ptr(float) out) {\n  float *t = new float[n];\n  out[0] = t[0];\n}\n',
      );
      assert.match(error.message, /heap\.cpp \(function 'grab'\) calls operator new\[\]: a device has no heap/);
      const libc = await buildError(
        'libc.c',
        '#include "offload.h"\nint printf(const char *, ...);\nOFFLOAD_KERNEL void say(int n) { printf("%d", n); }\n',
      );
      assert.match(
        libc.message,
        /libc\.c \(function 'say'\) calls 'printf', which a device does not provide.*use|libc\.c \(function 'say'\) calls 'printf', which a device does not provide/,
      );
    });

    it('a global with an initialiser that does not fit the static range', async () => {
      const error = await buildError(
        'big.c',
        '#include "offload.h"\nstatic const float table[400000] = {1};\nOFFLOAD_KERNEL void look(int i, offload_ptr(float) out) { out[0] = table[i]; }\n',
      );
      assert.equal(error.code, 'INVALID_ARGUMENT');
      assert.match(error.message, /does not fit in the static window/);
      assert.match(error.message, /big\.c \(variable 'table', 1600000 bytes\)/);
      assert.match(error.message, /keep a large table in device memory instead/);
    });

    it('a writable global (module state each worker would reset)', async () => {
      const error = await buildError(
        'state.c',
        '#include "offload.h"\nint calls = 3;\nOFFLOAD_KERNEL void count(offload_ptr(int) out) { out[0] = ++calls; }\n',
      );
      assert.match(error.message, /state\.c \(global 'calls'\) is writable module state/);
      assert.match(error.message, /make it const, or keep the state in device memory/);
    });

    it('a struct passed by value, in C and in Rust', async () => {
      const cError = await buildError(
        'byvalue.c',
        '#include "offload.h"\nstruct pair { float a, b; };\nOFFLOAD_KERNEL void add(struct pair p, offload_ptr(float) out) { out[0] = p.a + p.b; }\n',
      );
      assert.equal(cError.code, 'INVALID_ARGUMENT');
      assert.match(
        cError.message,
        /byvalue\.c:3: kernel 'add': parameter 1 \('p'\) takes struct pair by value; .*pass a pointer to it in device memory instead \(offload_ptr\(struct pair\) p\)/,
      );
      const rustError = await buildError(
        'byvalue.rs',
        '#![no_std]\n#[repr(C)]\npub struct Pair { a: f32, b: f32 }\n#[no_mangle]\npub unsafe extern "C" fn add(p: Pair, out: *mut f32) { *out = p.a + p.b; }\n',
      );
      assert.match(
        rustError.message,
        /byvalue\.rs:5: kernel 'add': parameter 'p' takes 'Pair' by value; .*\(p: \*const Pair\)/,
      );
    });

    it('a kernel that returns a value, in C and in Rust', async () => {
      const cError = await buildError(
        'returns.c',
        '#include "offload.h"\nOFFLOAD_KERNEL int twice(int x) { return 2 * x; }\n',
      );
      assert.equal(cError.code, 'INVALID_ARGUMENT');
      assert.match(
        cError.message,
        /returns\.c:2: kernel 'twice' returns 'int'; kernels return void: write the result through a pointer parameter instead \(OFFLOAD_KERNEL void twice\(\.\.\., offload_ptr\(int\) result\)\)/,
      );
      const rustError = await buildError(
        'returns.rs',
        '#![no_std]\n#[no_mangle]\npub extern "C" fn twice(x: i32) -> i32 {\n    2 * x\n}\n',
      );
      assert.match(rustError.message, /returns\.rs:3: kernel 'twice' returns 'i32'; .*\(result: \*mut i32\)/);
    });

    it('a local array kept in memory (a stack, which a device does not give)', async () => {
      const error = await buildError(
        'stack.c',
        '#include "offload.h"\nstatic void fill(int *a, int n) { for (int i = 0; i < n; i++) a[i] = i * i; }\n' +
          'OFFLOAD_KERNEL void squares(int n, int k, offload_ptr(int) out) {\n  int local[64];\n  fill(local, n);\n  out[0] = local[k & 63];\n}\n',
      );
      assert.match(error.message, /stack\.c \(function 'squares'\) keeps locals in memory/);
      assert.match(error.message, /keep the values in scalar locals, or the array in device memory/);
    });

    it('a missing compiler names the Debian packages', async () => {
      const clang = await buildError('any.c', '#include "offload.h"\nOFFLOAD_KERNEL void k(int n) {}\n', {
        OFFLOAD_CLANG: '/nonexistent/clang',
      });
      assert.equal(clang.code, 'UNSUPPORTED');
      assert.match(
        clang.message,
        /OFFLOAD_CLANG=\/nonexistent\/clang is not an executable: on Debian, apt-get install clang-16 lld-16/,
      );
      const rustc = await buildError('any.rs', '#![no_std]\n#[no_mangle]\npub extern "C" fn k(n: i32) {}\n', {
        OFFLOAD_RUSTC: '/nonexistent/rustc',
      });
      assert.equal(rustc.code, 'UNSUPPORTED');
      assert.match(rustc.message, /apt-get install rustc libstd-rust-dev-wasm32 lld-16/);
    });

    it('a file with no kernel, and a compiler error with its position', async () => {
      const none = await buildError('none.c', 'int helper(int x) { return x; }\n');
      assert.match(none.message, /none\.c declares no kernel: mark each kernel as OFFLOAD_KERNEL void name/);
      const broken = await buildError('broken.c', '#include "offload.h"\nOFFLOAD_KERNEL void k(int n) { n = ; }\n');
      assert.match(broken.message, /C compilation failed:\n.*broken\.c:2:\d+: error: expected expression/);
    });
  });
});
