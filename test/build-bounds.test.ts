/**
 * `offload build` against hostile kernel sources: deep nesting is refused before the compiler
 * runs, a tree too deep to send back is left untranslated rather than lost, a compile has a time
 * limit, and every failure says why.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildBundle } from '../src/build/compile.js';
import { checkSourceNesting, MAX_SOURCE_NESTING } from '../src/build/source-nesting.js';
import { OffloadError } from '../src/errors.js';

const root = fileURLToPath(new URL('..', import.meta.url));

/** A kernel whose body is `depth` nested `if` blocks. */
function nestedIfs(depth: number): string {
  return `export function k(n: i32, out: usize): void {\n${'  if (n > 0) {\n'.repeat(depth)}    n++;\n${'  }\n'.repeat(depth)}  store<i32>(out, n);\n}\n`;
}

async function rejection(promise: Promise<unknown>): Promise<OffloadError> {
  const error = await promise.then(
    () => assert.fail('expected a rejection'),
    (error: unknown) => error,
  );
  assert.ok(error instanceof OffloadError, `an uncoded ${String(error)}`);
  return error;
}

describe('building hostile kernel sources', { timeout: 400_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-build-bounds-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses 3,000 nested ifs before compiling, naming the file, the line and what to do; the command says so too', async () => {
    const source = path.join(dir, 'deep.ts');
    await writeFile(source, nestedIfs(3000));
    const error = await rejection(buildBundle({ sources: [source], output: path.join(dir, 'deep') }));
    assert.equal(error.code, 'INVALID_ARGUMENT');
    assert.match(
      error.message,
      new RegExp(
        `deep\\.ts:${MAX_SOURCE_NESTING + 1}: the source nests deeper than ${MAX_SOURCE_NESTING} levels .*flatten`,
      ),
    );
    const { code, stderr } = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(
        process.execPath,
        ['--import', 'tsx', path.join(root, 'src/cli/main.ts'), 'build', source, '-o', path.join(dir, 'deep')],
        { cwd: root, timeout: 120_000 },
        (failure, _stdout, stderr) =>
          resolve({ code: failure ? ((failure.code as number | undefined) ?? 1) : 0, stderr }),
      ),
    );
    assert.notEqual(code, 0);
    assert.match(stderr, /nests deeper than 128 levels of brackets \(MAX_SOURCE_NESTING\)/);
  });

  it('counts brackets of code only: not in comments, strings or template text, but in a template expression', () => {
    const deep = '('.repeat(MAX_SOURCE_NESTING + 1);
    checkSourceNesting(`// ${deep}\n/* ${deep} */\nconst a = "${deep}", b = '${deep}', c = \`${deep}\`;\n`, 'ok.ts');
    assert.throws(
      () => checkSourceNesting(`const c = \`\${${deep}\`;\n`, 'template.ts'),
      (error: unknown) => error instanceof OffloadError && /^template\.ts:1: /.test(error.message),
    );
    checkSourceNesting(nestedIfs(MAX_SOURCE_NESTING - 1), 'fits.ts');
  });

  it('builds a 1,200-long else-if chain, whose tree is too deep to send back, as wasm and says it is not translated', async () => {
    const chain = Array.from({ length: 1200 }, (_, i) => `  else if (n == ${i}) { n = ${i + 7}; }`).join('\n');
    const source = path.join(dir, 'chain.ts');
    await writeFile(
      source,
      `export function k(n: i32, out: usize): void {\n  if (n < 0) { n = 0; }\n${chain}\n  store<i32>(out, n);\n}\n`,
    );
    const built = await buildBundle({ sources: [source], output: path.join(dir, 'chain') });
    assert.deepEqual(
      built.manifest.entries.map((entry) => entry.name),
      ['k'],
    );
    assert.ok(
      built.notes.some((note) => note.kernel === 'k' && /nests too deeply to translate/.test(note.reason)),
      JSON.stringify(built.notes),
    );
  });

  it("stops a compile at the build's time limit with TIMEOUT naming the file, and refuses a bad limit", async () => {
    const source = path.join(dir, 'slow.ts');
    await writeFile(source, nestedIfs(8));
    const error = await rejection(buildBundle({ sources: [source], output: path.join(dir, 'slow'), timeoutMs: 1 }));
    assert.equal(error.code, 'TIMEOUT');
    assert.match(error.message, /compiling slow\.ts took more than 1 ms \(the build's time limit, timeoutMs\)/);
    const bad = await rejection(buildBundle({ sources: [source], output: path.join(dir, 'slow'), timeoutMs: -5 }));
    assert.equal(bad.code, 'INVALID_ARGUMENT');
    assert.match(bad.message, /options\.timeoutMs must be a positive integer/);
  });
});
