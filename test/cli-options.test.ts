/**
 * The `offload` command as a user meets it: --version, --json on demo and bench, each command's
 * options in its --help, and a bench that cannot fit says so before making its data.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import { HELP_WIDTH, wrapHelp } from '../src/cli/format.js';
import { typeScriptLoader } from '../src/cli/launch.js';
import { progressBar } from '../src/cli/progress.js';
import { generateXsbench } from '../src/apps/xsbench.js';
import { formatBytes } from '../src/units.js';
import { nativeCompilers } from './helpers/native-compilers.js';

const root = path.join(import.meta.dirname, '..');
const main = path.join(root, 'src/cli/main.ts');

function offload(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', main, ...args],
      {
        cwd: root,
        env: { ...process.env, OFFLOAD_WEBGPU: 'off', OFFLOAD_PROXIES: '', OFFLOAD_HOST_THREADS: '1', ...env },
        timeout: 120_000,
      },
      (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr, ms: performance.now() - started }),
    );
  });
}

describe('the offload command', { timeout: 240_000 }, () => {
  it('writes sizes one way everywhere: binary units, one decimal at most', () => {
    assert.deepEqual([0, 1023, 1024, 1536, 64 * 1024 * 1024, 1023 * 1024 ** 2, 1.5 * 1024 ** 3].map(formatBytes), [
      '0 B',
      '1023 B',
      '1 KiB',
      '1.5 KiB',
      '64 MiB',
      '1023 MiB',
      '1.5 GiB',
    ]);
  });

  it('prints its version with --version', async () => {
    const { version } = JSON.parse(await readFile(path.join(root, 'package.json'), 'utf8')) as { version: string };
    const { code, stdout } = await offload(['--version']);
    assert.equal(code, 0);
    assert.equal(stdout.trim(), `offload-ts ${version}`);
  });

  it('lists the options of every command in its --help', async () => {
    for (const [command, options] of [
      ['demo', ['--size', '--proxies', '--json']],
      ['bench', ['--size', '--grid', '--devices', '--proxies', '--kernel', '--peers', '--repeat', '--json']],
      ['launch', ['-np', '--mpi']],
      ['proxy', ['--listen', '--exit-with-parent']],
      ['serve', ['--port', '--host', '--size', '--no-proxy']],
    ] as const) {
      const { code, stdout } = await offload([command, '--help']);
      assert.equal(code, 0);
      for (const option of options)
        assert.match(stdout, new RegExp(`^\\s+${option}\\b`, 'm'), `${command} --help lists ${option}`);
    }
  });

  it('wraps every help text to 80 columns and lists each option its usage lines show and its parser takes', async () => {
    // The commands as `offload --help` lists them, so that a new one is covered too.
    const top = await offload(['--help']);
    const commands = [...top.stdout.matchAll(/^ {2}([a-z]+) {2,}/gm)].map((match) => match[1]!);
    assert.ok(
      ['init', 'devices', 'build', 'demo', 'serve', 'proxy', 'launch', 'bench'].every((name) =>
        commands.includes(name),
      ),
    );
    for (const command of ['', ...commands]) {
      const { code, stdout } = command === '' ? top : await offload([command, '--help']);
      assert.equal(code, 0);
      for (const line of stdout.trimEnd().split('\n'))
        assert.ok(line.length <= HELP_WIDTH, `offload ${command} --help: ${line.length} columns: ${line}`);
      const usage = stdout.slice(0, stdout.indexOf('\n\n'));
      for (const option of usage.match(/(?<![\w-])--?[a-z][\w-]*/g) ?? [])
        assert.match(
          stdout,
          new RegExp(`^\\s+(-\\w, )?${option}\\b`, 'm'),
          `offload ${command} --help lists ${option}`,
        );
      if (command === '') continue;
      // Every option the command's parser accepts (src/cli/<command>.ts) is in its help.
      const source = await readFile(path.join(root, 'src/cli', `${command}.ts`), 'utf8');
      const parsed = [...source.matchAll(/(?:[{,]\s*|^\s+)'?([a-z][\w-]*)'?: \{ type: '(?:string|boolean)'/gm)].map(
        (match) => match[1]!,
      );
      assert.ok(parsed.includes('help'), `no options found in src/cli/${command}.ts`);
      for (const option of parsed)
        assert.match(
          stdout,
          new RegExp(`^\\s+(-\\w, )?--?${option}\\b`, 'm'),
          `offload ${command} --help lists --${option}, which it accepts`,
        );
    }
    // Continuations line up with the option's description, and the paragraph is reflowed, not cut.
    assert.equal(
      wrapHelp(
        '  --long <ms> A description that runs well past the end of a line of forty columns\n              and goes on\n  --next      Short',
        40,
      ),
      [
        '  --long <ms> A description that runs',
        '              well past the end of a',
        '              line of forty columns and',
        '              goes on',
        '  --next      Short',
      ].join('\n'),
    );
    assert.equal(
      wrapHelp('Usage: offload devices [--json] [--proxies <host:port,...>] [--token-file <file>]', 60),
      'Usage: offload devices [--json] [--proxies <host:port,...>]\n       [--token-file <file>]',
    );
  });

  it("runs a TypeScript program under launch through its project's tsx, and says what is missing when nothing can run it", async () => {
    assert.deepEqual(await typeScriptLoader('app.js', []), []);
    assert.deepEqual(await typeScriptLoader('app.ts', ['--import', 'tsx']), []);
    const [flag, url] = (await typeScriptLoader(path.join(root, 'test', 'app.ts'), [])) as string[];
    assert.equal(flag, '--import');
    assert.match(url!, /^file:.*node_modules\/tsx\/dist\/loader\.mjs$/);
    const elsewhere = await typeScriptLoader('/nonexistent-project/app.mts', []);
    if ((process.features as { typescript?: unknown }).typescript)
      assert.deepEqual(elsewhere, ['--experimental-strip-types']);
    else assert.match(elsewhere as string, /is TypeScript, and neither tsx .* nor Node's own type stripping/);
  });

  it("draws bench's progress bar on a terminal only, and the data's making reports its progress to the end", () => {
    let written = '';
    const terminal = { isTTY: true, write: (text: string) => ((written += text), true) };
    const fractions: number[] = [];
    const bar = progressBar('data', terminal, 0);
    generateXsbench('small', 'hash', (fraction) => {
      fractions.push(fraction);
      bar.update(fraction);
    });
    bar.done();
    assert.ok(fractions.length > 10 && fractions.at(-1) === 1, `${fractions.length} reports`);
    assert.ok(
      fractions.every((f, i) => i === 0 || f >= fractions[i - 1]!),
      'never goes back',
    );
    assert.match(written, /\r {2}data \[\.{30}\] 0%/);
    // eslint-disable-next-line no-control-regex -- the terminal's erase-line escape (ESC [K) is what is checked
    assert.match(written, /\r {2}data \[#{30}\] 100%\r\x1b\[K$/);
    let piped = '';
    const pipe = { isTTY: false, write: (text: string) => ((piped += text), true) };
    const quiet = progressBar('data', pipe, 0);
    quiet.update(0.5);
    quiet.done();
    assert.equal(piped, '');
  });

  it('prints the demo as one JSON object with --json', async () => {
    const { code, stdout } = await offload(['demo', '--size', '1000', '--json']);
    assert.equal(code, 0);
    const report = JSON.parse(stdout) as {
      ok: boolean;
      results: { kernel: string; ok: boolean; device: number }[];
      proxies: string[];
    };
    assert.equal(report.ok, true);
    assert.deepEqual(
      report.results.map((r) => r.kernel),
      ['saxpy', 'dot_partial', 'mandelbrot', 'transpose'].concat(
        (await nativeCompilers()) ? ['saxpy (Rust)', 'mandelbrot (C)'] : [],
      ),
    );
    assert.ok(report.results.every((r) => r.ok && r.device === 0));
  });

  it("runs XSBench's and RSBench's lookups from the native peers' C sources with --kernel c: the published smoke checksums, both grids", async (t) => {
    if (!(await nativeCompilers())) return t.skip('no clang with wasm-ld here (Debian: clang-16 lld-16)');
    for (const grid of ['unionized', 'hash']) {
      const { code, stdout, stderr } = await offload(
        ['bench', 'xsbench', '--kernel', 'c', '--grid', grid, '--lookups', '1000', '--json'],
        {},
      );
      assert.equal(code, 0, stderr);
      const report = JSON.parse(stdout) as { checksum: number; valid: boolean | null };
      assert.equal(report.checksum, 3044);
      assert.equal(report.valid, true);
    }
    // RSBench's kernel calls sin, cos and atan: the device library's (offload_math.h) give the published checksum too.
    const rsbench = await offload(['bench', 'rsbench', '--kernel', 'c', '--lookups', '1000', '--json'], {});
    assert.equal(rsbench.code, 0, rsbench.stderr);
    const report = JSON.parse(rsbench.stdout) as { checksum: number; valid: boolean | null };
    assert.equal(report.checksum, 3533);
    assert.equal(report.valid, true);
    const bad = await offload(['bench', 'xsbench', '--kernel', 'fortran']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--kernel must be as or c, got 'fortran'/);
  });

  it('prints the bench as one JSON object with --json', async () => {
    const { code, stdout } = await offload([
      'bench',
      'xsbench',
      '--grid',
      'hash',
      '--lookups',
      '1000',
      '--repeat',
      '3',
      '--json',
    ]);
    assert.equal(code, 0);
    const report = JSON.parse(stdout) as {
      app: string;
      checksum: number;
      valid: boolean | null;
      devices: { lookups: number }[];
      lookupsPerSecond: number;
      runs: number[];
    };
    assert.equal(report.app, 'xsbench');
    // The median of three runs is the middle one.
    assert.equal(report.runs.length, 3);
    assert.equal(report.lookupsPerSecond, [...report.runs].sort((a, b) => a - b)[1]);
    assert.equal(
      report.devices.reduce((sum, d) => sum + d.lookups, 0),
      1000,
    );
    assert.notEqual(report.valid, false);
  });

  it('fails a bench that cannot fit on its devices at once, saying what would', async () => {
    const { code, stderr, ms } = await offload(['bench', 'xsbench', '--size', 'large'], {
      OFFLOAD_HOST_MEMORY: '512M',
    });
    assert.equal(code, 1);
    assert.match(
      stderr,
      /OUT_OF_MEMORY.*needs 5\.5 GiB on every device.*device 0 .* has 51\d MiB.*more proxies do not help.*--grid hash needs 197\.\d MiB/,
    );
    // The data (5.9 GB, some 30 s to make) was never made.
    assert.ok(ms < 30_000, `it took ${ms.toFixed(0)} ms`);
  });
});
