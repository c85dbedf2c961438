/**
 * The WGSL translation of `offload build` (src/build/wgsl-translate.ts): what it makes of the
 * subset (bindings, uniforms, atomics, names WGSL reserves), the note it gives each kernel it
 * cannot translate (file:line and why), `wgsl: 'require'` and `'off'`, and a hand-written WGSL
 * kernel that overrides the translation. The translated kernels' results are checked against the
 * host device in wgsl-differential.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildBundle, formatNote, type BuildOptions } from '../src/build/compile.js';
import { SUPPORT_CALLS, SUPPORT_FUNCTIONS, type SupportName } from '../src/build/wgsl-builtins.js';
import { decodeBundle } from '../src/image/bundle.js';
import { Offload } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { webgpuSkipReason } from './helpers/webgpu.js';

const HEADER = 'import { numTeams, print, teamId, threadId } from "offload-ts/device";\n';

/** Kernels that stay wasm-only, each with the reason its note must give; the line is where the marker comment is. */
const REFUSED: [kernel: string, source: string, reason: RegExp][] = [
  [
    'takes_i64',
    'export function takes_i64(a: i64, out: usize): void { store<i64>(out, a); } // HERE',
    /parameter 'a' of type i64 \(WGSL has no i64\)/,
  ],
  [
    'f64_literal',
    'export function f64_literal(out: usize): void {\n  let x = 1.5; // HERE\n  store<f32>(out, <f32>x);\n}',
    /float literal 1\.5 where AssemblyScript computes in f64/,
  ],
  [
    'f64_math',
    'export function f64_math(x: f32, out: usize): void {\n  store<f32>(out, <f32>Math.sqrt(x)); // HERE\n}',
    /Math\.sqrt, which computes in f64.*use Mathf\.sqrt/,
  ],
  [
    'raw_address',
    'export function raw_address(at: u32): void {\n  store<i32>(<usize>at, 1); // HERE\n}',
    /cannot be traced back to one pointer parameter/,
  ],
  [
    'address_value',
    'export function address_value(out: usize): void {\n  store<i32>(out, <i32>out); // HERE\n}',
    /converts an address to i32/,
  ],
  [
    'two_pointers',
    'export function two_pointers(a: usize, b: usize): void {\n  if (a < b) store<i32>(a, 1); // HERE\n}',
    /compares an address with a number or with another pointer's address/,
  ],
  [
    'prints',
    'export function prints(): void {\n  print("hello"); // HERE\n}',
    /calls print\(\): print\(\) writes to the host/,
  ],
  ['traps', 'export function traps(): void {\n  unreachable(); // HERE\n}', /calls unreachable\(\), which traps/],
  [
    'calls_f64',
    'function half(x: f64): f64 { return x / 2; } // HERE\nexport function calls_f64(out: usize): void {\n  store<f32>(out, <f32>half(3));\n}',
    /calls 'half', which at .*\.ts:\d+ has a result of type f64/,
  ],
  [
    'recursive',
    'function fact(n: i32): i32 { return n <= 1 ? 1 : n * fact(n - 1); }\nexport function recursive(out: usize): void {\n  store<i32>(out, fact(5));\n} // HERE',
    /recursively \(WGSL has no recursion\)/,
  ],
  [
    'switches',
    'export function switches(n: i32, out: usize): void {\n  switch (n) { case 1: store<i32>(out, 1); } // HERE\n}',
    /switch statement/,
  ],
  [
    'mutable_global',
    'let counter = 0;\nexport function mutable_global(out: usize): void {\n  store<i32>(out, counter); // HERE\n}',
    /reads 'counter', which is not a local variable, a parameter or a top-level constant/,
  ],
  [
    'small_local',
    'export function small_local(out: usize): void {\n  let b: u8 = 3; // HERE\n  store<u8>(out, b);\n}',
    /gives variable 'b' the type u8/,
  ],
  [
    'pointer_to_helper',
    'function first(p: usize): i32 { return 0; }\nexport function pointer_to_helper(out: usize): void {\n  store<i32>(out, first(out)); // HERE\n}',
    /passes an address to 'first'/,
  ],
  [
    'increment_in_expression',
    'export function increment_in_expression(out: usize): void {\n  let i = 0;\n  store<i32>(out, i++); // HERE\n}',
    /\+\+ inside an expression/,
  ],
  [
    'nested',
    `export function nested(out: usize): void {\n  store<i32>(out, ${'('.repeat(100)}1${' + 1)'.repeat(100)}); // HERE\n}`,
    /nests expressions and statements deeper than 64/,
  ],
  [
    'i64_load',
    'export function i64_load(out: usize): void {\n  store<i32>(out, <i32>load<i64>(out)); // HERE\n}',
    /loads a i64, which WGSL has no type for/,
  ],
  [
    'simd_f32x4',
    'export function simd_f32x4(a: usize, out: usize): void {\n  v128.store(out, f32x4.add(v128.load(a), v128.load(a, 16))); // HERE\n}',
    /calls v128\.store, which the WGSL translation of 128-bit SIMD does not cover \(a kernel using it stays wasm-only\)/,
  ],
  [
    'simd_local',
    'export function simd_local(a: usize, out: usize): void {\n  const v: v128 = v128.load(a); // HERE\n  v128.store(out, v);\n}',
    /calls v128\.load, which the WGSL translation of 128-bit SIMD does not cover \(a kernel using it stays wasm-only\)/,
  ],
];

/** Lays the refused kernels out in one file and returns it with the line of each marker. */
function refusedSource(): { text: string; lines: Map<string, number> } {
  let text = HEADER;
  const lines = new Map<string, number>();
  for (const [kernel, source] of REFUSED) {
    const start = text.split('\n').length;
    source.split('\n').forEach((line, i) => {
      if (line.includes('// HERE')) lines.set(kernel, start + i);
    });
    text += `${source}\n`;
  }
  return { text, lines };
}

it(
  'declares every support function that a support function calls (the module emits those too)',
  { timeout: 60_000 },
  () => {
    const names = Object.keys(SUPPORT_FUNCTIONS) as SupportName[];
    for (const name of names) {
      const body = SUPPORT_FUNCTIONS[name].slice(SUPPORT_FUNCTIONS[name].indexOf('{'));
      const calls = names.filter((callee) => body.includes(`${callee}(`));
      assert.deepEqual([...(SUPPORT_CALLS[name] ?? [])].sort(), calls.sort(), name);
    }
  },
);

describe('WGSL translation in offload build', { timeout: 300_000 }, () => {
  let dir: string;
  const build = async (files: Record<string, string>, options: Partial<BuildOptions> = {}) => {
    for (const [name, text] of Object.entries(files)) await writeFile(path.join(dir, name), text);
    return buildBundle({
      sources: Object.keys(files).map((name) => path.join(dir, name)),
      output: path.join(dir, 'out', 'k'),
      ...options,
    });
  };
  const wgslOf = (bundle: Uint8Array) => {
    const image = decodeBundle(bundle).images.find((candidate) => candidate.info.format === 'wgsl');
    return image && { info: image.info, text: new TextDecoder().decode(image.bytes) };
  };

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'offload-wgsl-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('maps pointers to word bindings (read-only unless written, atomic where atomics or byte stores touch them) and scalars to the uniform', async () => {
    const built = await build({
      'k.ts':
        HEADER +
        'export function k(n: i32, a: f32, flag: bool, src: usize, dst: usize, counts: usize, bytes: usize): void {\n' +
        '  for (let i = teamId(); i < n; i += numTeams()) {\n' +
        '    const at = <usize>i << 2;\n' +
        '    if (flag) store<f32>(dst + at, a * load<f32>(src + at));\n' +
        '    atomic.add<i32>(counts, 1);\n' +
        '    store<u8>(bytes + <usize>i, <u8>i);\n' +
        '  }\n' +
        '}\n',
    });
    assert.deepEqual(built.notes, []);
    const wgsl = wgslOf(built.bundle)!;
    assert.equal(wgsl.info.source, 'k.translated.wgsl');
    const [kernel] = wgsl.info.kernels!;
    assert.deepEqual(kernel!.params, [
      { name: 'n', type: 'i32', offset: 0 },
      { name: 'a', type: 'f32', offset: 4 },
      { name: 'flag', type: 'i32', offset: 8 },
      { name: 'src', type: 'ptr', binding: 1, readOnly: true },
      { name: 'dst', type: 'ptr', binding: 2, readOnly: false },
      { name: 'counts', type: 'ptr', binding: 3, readOnly: false },
      { name: 'bytes', type: 'ptr', binding: 4, readOnly: false },
    ]);
    assert.deepEqual(kernel!.workgroupSize, ['offload_threads', 'offload_threads_y', 'offload_threads_z']);
    assert.match(wgsl.text, /var<storage, read> k__p_src: array<u32>;/);
    assert.match(wgsl.text, /var<storage, read_write> k__p_counts: array<atomic<u32>>;/);
    assert.match(wgsl.text, /var<storage, read_write> k__p_bytes: array<atomic<u32>>;/);
    assert.match(wgsl.text, /atomicAnd\(&k__p_bytes\[/);
  });

  it('notes each kernel it cannot translate, with its file, line and why, and builds the wasm image of every kernel', async () => {
    const { text, lines } = refusedSource();
    const built = await build({
      'refused.ts': `${text}export function fine(n: i32, out: usize): void { store<i32>(out, n + threadId()); }\n`,
    });
    assert.deepEqual(
      built.notes.map((note) => note.kernel),
      REFUSED.map(([kernel]) => kernel),
    );
    for (const [kernel, , reason] of REFUSED) {
      const note = built.notes.find((candidate) => candidate.kernel === kernel)!;
      assert.match(note.reason, reason, kernel);
      // Shown as the build shows paths: relative to the working directory when inside it.
      const file = path.join(dir, 'refused.ts');
      assert.equal(
        note.file,
        path.relative(process.cwd(), file).startsWith('..') ? file : path.relative(process.cwd(), file),
      );
      if (kernel !== 'recursive') assert.equal(note.line, lines.get(kernel), `${kernel}: ${formatNote(note)}`);
      assert.match(
        formatNote(note),
        new RegExp(
          `refused\\.ts:${note.line}: kernel '${kernel}' is not translated to WGSL \\(it runs on wasm devices only\\): it `,
        ),
      );
    }
    // Every kernel is in the wasm image; only 'fine' in the wgsl one.
    assert.equal(built.manifest.entries.length, REFUSED.length + 1);
    assert.deepEqual(
      wgslOf(built.bundle)!.info.kernels!.map((kernel) => kernel.name),
      ['fine'],
    );
  });

  it("translates a new user's kernels.ts (saxpy, dot, stencil, mandelbrot) and notes exactly the kernels that cannot be", async () => {
    const source = path.join(import.meta.dirname, 'fixtures', 'webgpu', 'user-kernels.ts');
    const built = await buildBundle({ sources: [source], output: path.join(dir, 'out', 'user') });
    assert.deepEqual(
      wgslOf(built.bundle)!.info.kernels!.map((kernel) => kernel.name),
      ['saxpy', 'dot', 'stencil', 'mandelbrot'],
    );
    assert.deepEqual(
      built.notes.map((note) => [note.kernel, note.reason]),
      [
        [
          'norm_f64',
          'uses the float literal 0.0 where AssemblyScript computes in f64 (WGSL has no f64): give it an f32 context, as <f32>0.0',
        ],
        ['trace_values', 'calls print(): print() writes to the host, which WGSL kernels cannot reach'],
      ],
    );
  });

  it("fails with every note under wgsl: 'require', and translates nothing under 'off'", async () => {
    const { text } = refusedSource();
    const files = { 'refused.ts': text };
    const error = await rejectsWith(
      build(files, { wgsl: 'require' }),
      'INVALID_ARGUMENT',
      new RegExp(`--wgsl=require: ${REFUSED.length} kernel\\(s\\) cannot be translated`),
    );
    for (const [kernel] of REFUSED) assert.match(error.message, new RegExp(`kernel '${kernel}' is not translated`));
    const off = await build(
      { 'ok.ts': 'export function k(out: usize): void { store<i32>(out, 1); }\n' },
      { wgsl: 'off' },
    );
    assert.equal(wgslOf(off.bundle), undefined);
    assert.deepEqual(off.notes, []);
    await rejectsWith(
      build({ 'ok.ts': 'export function k(): void {}\n' }, { wgsl: 'maybe' as never }),
      'INVALID_ARGUMENT',
      /options\.wgsl must be 'auto', 'require' or 'off'/,
    );
  });

  it('lets a hand-written .wgsl kernel override the translation, checked against the same signature', async () => {
    const ts =
      'export function a(n: i32, out: usize): void { store<i32>(out, n); }\nexport function b(out: usize): void { store<i32>(out, 2); }\n';
    const hand =
      '@group(0) @binding(0) var<uniform> hand_n: i32;\n@group(0) @binding(1) var<storage, read_write> hand_out: array<i32>;\n@compute @workgroup_size(1) fn a() { hand_out[0] = hand_n + 100; }\n';
    const built = await build({ 'k.ts': ts, 'k.wgsl': hand });
    const wgsl = wgslOf(built.bundle)!;
    assert.equal(wgsl.info.source, 'k.wgsl');
    assert.deepEqual(
      wgsl.info.kernels!.map((kernel) => [kernel.name, kernel.workgroupSize]),
      [
        ['a', 1],
        ['b', ['offload_threads', 'offload_threads_y', 'offload_threads_z']],
      ],
    );
    assert.ok(wgsl.text.startsWith(hand), 'the hand-written kernels come first, unchanged');
    assert.doesNotMatch(wgsl.text, /fn a\(@builtin/);
    await rejectsWith(
      build({
        'k.ts': ts,
        'k.wgsl': hand
          .replace('var<uniform> hand_n: i32', 'var<uniform> hand_n: f32')
          .replace('hand_n + 100', 'i32(hand_n)'),
      }),
      'INVALID_ARGUMENT',
      /kernel 'a' \(hand_n: f32, hand_out: ptr\) does not match its wasm image \(n: i32, out: ptr\)/,
    );
  });

  it('renames variables WGSL reserves, keeps same-named functions of two files apart, and the WebGPU device compiles and runs the result', async (t) => {
    await writeFile(path.join(dir, 'more.ts'), 'export function helper(x: u32): u32 { return -x; }\n');
    const built = await build({
      'names.ts':
        HEADER +
        'import { helper as negate } from "./more";\n' +
        'const array: i32 = 3;\n' +
        'function select(block: i32): i32 { const loop = block * array; return loop; }\n' +
        'function helper(x: i32): i32 { return x + 1; }\n' +
        'export function names(out: usize): void {\n' +
        '  let target = 0, offload_team = 2, __x = 1, a__b = 4, ptr = 5, team = 6;\n' +
        '  for (let var_ = 0; var_ < 2; var_++) target += select(var_ + 1);\n' +
        '  store<i32>(out, target * 1000 + offload_team + __x + a__b + ptr + team + teamId() + helper(0) + <i32>negate(1) + 1);\n' +
        '}\n' +
        'export function loop(out: usize): void { store<i32>(out, 1); }\n',
    });
    assert.deepEqual(
      built.notes.map((note) => [note.kernel, note.reason]),
      [
        [
          'loop',
          "is named 'loop', which WGSL reserves or the translation uses (a WGSL entry point keeps the kernel's name)",
        ],
      ],
    );
    const skip = await webgpuSkipReason();
    if (skip) return t.skip(skip);
    const runtime = await Offload.init({
      host: { threads: 1, memoryBytes: 4 * 1024 * 1024 },
      webgpu: { fallback: true },
      proxies: [],
    });
    try {
      const library = await runtime.register(built.path);
      for (const device of runtime.devices) {
        const out = await device.alloc(4);
        const q = device.queue();
        q.launch(await device.kernel(library, 'names'), { teams: 1 }, [out]);
        const result = new Int32Array(1);
        q.read(out, result);
        await q.finish();
        assert.equal(result[0], 9 * 1000 + 2 + 1 + 4 + 5 + 6 + 0 + 1 - 1 + 1, device.info.name);
        await out.free();
      }
    } finally {
      await runtime.shutdown();
    }
  });
});
