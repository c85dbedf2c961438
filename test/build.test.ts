import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { buildBundle, type BuildResult } from '../src/build/compile.js';
import { readWasmModuleInfo } from '../src/build/wasm-module-info.js';
import { decodeBundle, readBundleFile } from '../src/image/bundle.js';
import { MAX_PAGES, STATIC_WINDOW_END, STATIC_WINDOW_START, WASM_TRIPLE } from '../src/image/wasm-abi.js';
import { OffloadError, type ErrorCode } from '../src/errors.js';

const FIXTURES = path.join(import.meta.dirname, 'fixtures', 'kernels.ts');
const MiB = 1024 * 1024;

let dir: string;
let fixtures: BuildResult;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'offload-build-'));
  fixtures = await buildBundle({ sources: [FIXTURES], output: path.join(dir, 'out', 'fixtures') });
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Writes `text` as a kernel source file in the temp dir and returns its path. */
async function kernelSource(name: string, text: string): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, text);
  return file;
}

async function assertBuildFails(options: Parameters<typeof buildBundle>[0], code: ErrorCode, ...patterns: RegExp[]) {
  await assert.rejects(buildBundle(options), (error: unknown) => {
    assert.ok(OffloadError.is(error, code), `expected ${code}, got ${String(error)}`);
    for (const pattern of patterns) assert.match(error.message, pattern);
    return true;
  });
}

/** The grid position a stub device reports to the kernel. */
interface GridPosition {
  team: number;
  teams: number;
}

/** Instantiates the fixtures image on a fresh shared memory with stub device imports. */
function instantiateFixtures() {
  const memory = new WebAssembly.Memory({ initial: 32, maximum: 1024, shared: true });
  const grid: GridPosition = { team: 0, teams: 1 };
  const aborts: { message: number; file: number; line: number; column: number }[] = [];
  const imports = {
    env: {
      memory,
      abort: (message: number, file: number, line: number, column: number) => {
        aborts.push({ message, file, line, column });
        throw new Error('abort');
      },
      seed: () => 0,
      trace: () => {},
    },
    offload: {
      team_id: () => grid.team,
      num_teams: () => grid.teams,
      thread_id: () => 0,
      num_threads: () => 1,
      print: () => {},
      barrier: () => {},
      team_memory: () => 0,
      host_call: () => 0,
    },
  };
  const module = new WebAssembly.Module(decodeBundle(fixtures.bundle).images[0]!.bytes as Uint8Array<ArrayBuffer>);
  const instance = new WebAssembly.Instance(module, imports);
  return { memory, grid, aborts, kernels: instance.exports as Record<string, (...args: unknown[]) => void> };
}

/** Reads the AssemblyScript string at `pointer` (UTF-16, byte length stored just before it). */
function readString(memory: WebAssembly.Memory, pointer: number): string {
  const bytes = new DataView(memory.buffer).getUint32(pointer - 4, true);
  return Buffer.from(new Uint8Array(memory.buffer, pointer, bytes)).toString('utf16le');
}

test('the fixtures build lists every exported kernel with its parameter names and types', { timeout: 120_000 }, () => {
  const { manifest } = fixtures;
  assert.equal(manifest.name, 'fixtures');
  assert.deepEqual(
    manifest.entries.map((entry) => entry.name),
    [
      'empty',
      'fill_f32',
      'saxpy',
      'iota_i32',
      'add_i32',
      'scale_f64',
      'sum_i64',
      'record_grid',
      'trap_oob',
      'trap_abort',
      'trap_unreachable',
      'busy',
      'mixed',
      'wait_flag',
      'count_team',
      'scan_memory',
      'spin',
      'say',
      'grid3d',
      'team_scan',
      'call_host',
      'tally_teams',
      'tallies',
    ],
  );
  // Exported module-level data is a device global; every exported function a kernel.
  assert.deepEqual(
    manifest.entries.filter((entry) => entry.kind === 'global'),
    [{ name: 'tallies', kind: 'global', params: [] }],
  );
  assert.ok(manifest.entries.filter((entry) => entry.name !== 'tallies').every((entry) => entry.kind === 'kernel'));
  const params = (name: string) => manifest.entries.find((entry) => entry.name === name)?.params;
  assert.deepEqual(params('saxpy'), [
    { name: 'n', type: 'i32' },
    { name: 'a', type: 'f32' },
    { name: 'x', type: 'ptr' },
    { name: 'y', type: 'ptr' },
  ]);
  assert.deepEqual(params('sum_i64'), [
    { name: 'a', type: 'i64' },
    { name: 'b', type: 'i64' },
    { name: 'out', type: 'ptr' },
  ]);
  assert.deepEqual(params('mixed'), [
    { name: 'a', type: 'i32' },
    { name: 'b', type: 'i64' },
    { name: 'c', type: 'f32' },
    { name: 'd', type: 'f64' },
    { name: 'e', type: 'ptr' },
  ]);
  assert.deepEqual(params('empty'), []);
});

test(
  'the bundle file holds a wasm image and the WGSL translation of its kernels, and decodes to the returned manifest',
  { timeout: 120_000 },
  async () => {
    assert.equal(fixtures.path, path.join(dir, 'out', 'fixtures.offload'));
    const { manifest, images } = await readBundleFile(fixtures.path);
    assert.deepEqual(manifest, fixtures.manifest);
    assert.equal(images.length, 2);
    assert.equal(manifest.images[0]!.format, 'wasm');
    assert.equal(manifest.images[0]!.triple, WASM_TRIPLE);
    assert.equal(manifest.images[1]!.format, 'wgsl');
    assert.equal(manifest.images[1]!.source, 'kernels.translated.wgsl');
    const translated = [
      'empty',
      'fill_f32',
      'saxpy',
      'iota_i32',
      'add_i32',
      'record_grid',
      'busy',
      'wait_flag',
      'count_team',
      'spin',
      'grid3d',
      'team_scan',
    ];
    assert.deepEqual(
      manifest.images[1]!.kernels!.map((kernel) => kernel.name),
      translated,
    );
    // Every other kernel has a note, in source order, naming its line.
    const notes = fixtures.notes.map((note) => [note.kernel, note.file, note.line]);
    assert.deepEqual(
      notes.map(([kernel]) => kernel),
      [
        'scale_f64',
        'sum_i64',
        'trap_oob',
        'trap_abort',
        'trap_unreachable',
        'mixed',
        'scan_memory',
        'say',
        'call_host',
        'tally_teams',
      ],
    );
    for (const [, file, line] of notes)
      assert.ok(file === path.relative(process.cwd(), FIXTURES) && Number(line) > 1, `${file}:${line}`);
  },
);

test(
  'the image imports a shared env.memory with the ABI maximum, and only device imports',
  { timeout: 120_000 },
  () => {
    const image = decodeBundle(fixtures.bundle).images[0]!;
    const info = readWasmModuleInfo(image.bytes);
    const memory = info.imports.find((i) => i.module === 'env' && i.name === 'memory');
    assert.deepEqual(memory?.memory, { minimum: image.info.minPages, maximum: MAX_PAGES, shared: true });
    assert.ok(!info.exports.some((e) => e.kind === 'memory'), 'the memory is not exported');
    const allowed = [
      'env.memory',
      'env.abort',
      'env.seed',
      'env.trace',
      'offload.team_id',
      'offload.num_teams',
      'offload.thread_id',
      'offload.num_threads',
      'offload.print',
      'offload.barrier',
      'offload.team_memory',
      'offload.host_call',
    ];
    for (const { module, name } of info.imports) assert.ok(allowed.includes(`${module}.${name}`), `${module}.${name}`);
  },
);

test('the image has no start function, and its static data is what the manifest says', { timeout: 120_000 }, () => {
  const image = decodeBundle(fixtures.bundle).images[0]!;
  const info = readWasmModuleInfo(image.bytes);
  assert.equal(info.hasStart, false);
  // Devices read the range from the module; the manifest's copy must agree with it.
  const start = Math.min(...info.dataSegments.map((s) => s.offset));
  const end = Math.max(...info.dataSegments.map((s) => s.offset + s.size));
  assert.ok(
    start >= image.info.staticBase && end <= image.info.staticBase + image.info.staticSize,
    `[${start}, ${end})`,
  );
});

test('a kernel file with top-level code fails, naming the file and the way out', { timeout: 120_000 }, async () => {
  const source = await kernelSource(
    'toplevel.ts',
    'let total: i32 = 0;\nfor (let i = 0; i < 8; i++) total += i;\nexport function k(p: usize): void { store<i32>(p, total); }\n',
  );
  await assertBuildFails(
    { sources: [source], output: path.join(dir, 'toplevel') },
    'INVALID_ARGUMENT',
    /toplevel\.ts: top-level code/,
    /into a kernel/,
  );
});

test('kernels import the device library as offload-ts/device', { timeout: 120_000 }, () => {
  const info = readWasmModuleInfo(decodeBundle(fixtures.bundle).images[0]!.bytes);
  const device = info.imports.filter((i) => i.module === 'offload').map((i) => i.name);
  assert.deepEqual(device.sort(), [
    'barrier',
    'host_call',
    'num_teams',
    'num_threads',
    'print',
    'team_id',
    'team_memory',
    'thread_id',
  ]);
});

test('saxpy computes y = a * x + y over a grid of teams, on data above 1 MiB', { timeout: 120_000 }, () => {
  const { memory, grid, kernels } = instantiateFixtures();
  const n = 100;
  const x = 1 * MiB;
  const y = 1 * MiB + 4096;
  const xs = new Float32Array(memory.buffer, x, n);
  const ys = new Float32Array(memory.buffer, y, n);
  for (let i = 0; i < n; i++) {
    xs[i] = i;
    ys[i] = 1000 + i;
  }
  grid.teams = 3;
  for (grid.team = 0; grid.team < grid.teams; grid.team++) kernels.saxpy!(n, 2, x, y);
  for (let i = 0; i < n; i++) assert.equal(ys[i], 2 * i + 1000 + i);
});

test('i64, f32 and f64 arguments arrive whole', { timeout: 120_000 }, () => {
  const { memory, kernels } = instantiateFixtures();
  const out = 1 * MiB;
  kernels.sum_i64!(2n ** 40n, -(2n ** 33n), out);
  assert.equal(new DataView(memory.buffer).getBigInt64(out, true), 2n ** 40n - 2n ** 33n);
  kernels.mixed!(-7, 2n ** 62n + 5n, 1.5, Math.PI, out);
  const view = new DataView(memory.buffer);
  assert.equal(view.getInt32(out, true), -7);
  assert.equal(view.getBigInt64(out + 8, true), 2n ** 62n + 5n);
  assert.equal(view.getFloat32(out + 16, true), 1.5);
  assert.equal(view.getFloat64(out + 24, true), Math.PI);
});

test("trap_abort's message lies in the image's static data, inside the static window", { timeout: 120_000 }, () => {
  const { memory, aborts, kernels } = instantiateFixtures();
  const { staticBase, staticSize } = fixtures.manifest.images[0]!;
  assert.ok(staticBase >= STATIC_WINDOW_START && staticBase + staticSize <= STATIC_WINDOW_END);
  assert.ok(staticSize > 0 && staticSize % 16 === 0);
  kernels.trap_abort!(0);
  assert.throws(() => kernels.trap_abort!(1), /abort/);
  const { message } = aborts[0]!;
  assert.equal(readString(memory, message), 'flag must be zero');
  assert.ok(message >= staticBase && message < staticBase + staticSize, `message at ${message}`);
});

test('out-of-bounds and unreachable kernels trap', { timeout: 120_000 }, () => {
  const { memory, kernels } = instantiateFixtures();
  kernels.trap_oob!(1 * MiB);
  assert.throws(() => kernels.trap_oob!(memory.buffer.byteLength), WebAssembly.RuntimeError);
  assert.throws(() => kernels.trap_unreachable!(), WebAssembly.RuntimeError);
});

test('an explicit static base is used as given', { timeout: 120_000 }, async () => {
  const staticBase = 512 * 1024;
  const { manifest } = await buildBundle({ sources: [FIXTURES], output: path.join(dir, 'based'), staticBase });
  assert.equal(manifest.images[0]!.staticBase, staticBase);
  assert.equal(manifest.images[0]!.staticSize, fixtures.manifest.images[0]!.staticSize);
  assert.equal(manifest.images[0]!.minPages, Math.ceil((staticBase + manifest.images[0]!.staticSize) / 65536));
});

test('a static base outside the window or off the alignment is INVALID_ARGUMENT', { timeout: 120_000 }, async () => {
  for (const staticBase of [0, STATIC_WINDOW_END, STATIC_WINDOW_START + 16]) {
    await assertBuildFails(
      { sources: [FIXTURES], output: path.join(dir, 'x'), staticBase },
      'INVALID_ARGUMENT',
      /options\.staticBase/,
    );
  }
});

test('a kernel that allocates fails, naming the file and the way out', { timeout: 120_000 }, async () => {
  const source = await kernelSource(
    'alloc.ts',
    `import { teamId } from "offload-ts/device";
export function make(n: i32, out: usize): void {
  const values = new Float32Array(4);
  values[0] = <f32>n;
  store<f32>(out, values[teamId()]);
}
`,
  );
  await assertBuildFails(
    { sources: [source], output: path.join(dir, 'alloc') },
    'INVALID_ARGUMENT',
    /alloc\.ts \(function 'make'\)/,
    /allocates managed memory/,
    /load<T>\/store<T>/,
  );
});

test(
  'a mutable module-level variable fails, naming it, unless its file declares it private per team',
  { timeout: 120_000 },
  async () => {
    const text = (declaration: string) => `import { teamId } from "offload-ts/device";
${declaration}
let counter: i32 = 0;
let scratch: f64 = 0;
const limit: i32 = 7;
@inline function half(x: f64): void { scratch = x / 2; }
export function bump(out: usize): void {
  counter += 1;
  half(<f64>teamId());
  store<i32>(out + (<usize>teamId() << 2), counter + limit + <i32>scratch);
}
`;
    const shared = await kernelSource('counter.ts', text(''));
    await assertBuildFails(
      { sources: [shared], output: path.join(dir, 'counter') },
      'INVALID_ARGUMENT',
      /counter\.ts \(variable 'counter'\), .*counter\.ts \(variable 'scratch'\)/,
      /each worker of the host device would hold its own copy/,
      /offload: private/,
    );
    // Declaring the scratch private leaves only the counter; a const is never a variable.
    const partly = await kernelSource('partly.ts', text('// offload: private scratch'));
    await assertBuildFails(
      { sources: [partly], output: path.join(dir, 'partly') },
      'INVALID_ARGUMENT',
      /partly\.ts \(variable 'counter'\): each/,
    );
    const both = await kernelSource('both.ts', text('// offload: private scratch, counter'));
    const built = await buildBundle({ sources: [both], output: path.join(dir, 'both') });
    assert.deepEqual(
      built.manifest.entries.map((entry) => entry.name),
      ['bump'],
    );
  },
);

test('a kernel with a string parameter fails, naming the kernel and the parameter', { timeout: 120_000 }, async () => {
  const source = await kernelSource('strings.ts', 'export function greet(n: i32, who: string): void {}\n');
  await assertBuildFails(
    { sources: [source], output: path.join(dir, 'strings') },
    'INVALID_ARGUMENT',
    /kernel 'greet'/,
    /parameter 'who' has type 'string'/,
  );
});

test('a syntax error reports file:line:column', { timeout: 120_000 }, async () => {
  const source = await kernelSource('syntax.ts', 'export function ok(n: i32): void {\n  let x = ;\n}\n');
  await assertBuildFails(
    { sources: [source], output: path.join(dir, 'syntax') },
    'INVALID_ARGUMENT',
    /syntax\.ts:2:\d+: error TS\d+/,
  );
});

test('a missing source file is NOT_FOUND naming it', { timeout: 120_000 }, async () => {
  const missing = path.join(dir, 'missing.ts');
  await assertBuildFails({ sources: [missing], output: path.join(dir, 'missing') }, 'NOT_FOUND', /missing\.ts/);
});
