// `offload init` makes a project that builds: "type": "module" where the project has no code yet
// (npm init -y writes "commonjs"), the dev dependencies its scripts need (TypeScript held to the
// range whose tsc checks AssemblyScript's types, with the reason in kernels/tsconfig.json), and
// the project's own choices kept. `--no-install` keeps npm out of it (the package test and the
// end-to-end run install for real).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const cli = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

async function init(dir: string, ...args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', cli, 'init', dir, ...args]);
  return stdout;
}

async function manifest(dir: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(path.join(dir, 'package.json'), 'utf8')) as Record<string, unknown>;
}

describe('offload init', { timeout: 120_000 }, () => {
  let work: string;
  before(async () => {
    work = await mkdtemp(path.join(tmpdir(), 'offload-init-'));
  });
  after(async () => {
    await rm(work, { recursive: true, force: true });
  });

  it('in an empty folder: a module package with the scripts and the dev dependencies they need', async () => {
    const dir = path.join(work, 'empty');
    const out = await init(dir, '--no-install');
    const pkg = await manifest(dir);
    assert.equal(pkg.type, 'module');
    assert.deepEqual(pkg.devDependencies, { typescript: '~5.9.3', '@types/node': '^20.19.0', tsx: '^4.20.0' });
    assert.match(out, /devDeps +typescript@~5\.9\.3, @types\/node@\^20\.19\.0, tsx@\^4\.20\.0/);
    assert.match(out, /run npm install for the devDependencies added/);
    // Why TypeScript is pinned, where check:kernels reads it.
    assert.match(
      await readFile(path.join(dir, 'kernels/tsconfig.json'), 'utf8'),
      /^\/\/ TypeScript stays at ~5\.9.*TS2316/s,
    );
  });

  it('after npm init -y: "type" becomes "module", saying so', async () => {
    const dir = path.join(work, 'npm-init');
    await init(path.join(dir, 'x'), '--no-install'); // makes the folder; its project is another
    await writeFile(
      path.join(dir, 'package.json'),
      JSON.stringify({
        name: 'npm-init',
        version: '1.0.0',
        type: 'commonjs',
        devDependencies: { typescript: '5.8.3' },
      }),
    );
    const out = await init(dir, '--no-install');
    assert.match(out, /changed +package\.json "type": "commonjs" -> "module" \(the project has no code yet/);
    const pkg = await manifest(dir);
    assert.equal(pkg.type, 'module');
    // A dependency the project has already stays as it is.
    assert.deepEqual(pkg.devDependencies, { typescript: '5.8.3', '@types/node': '^20.19.0', tsx: '^4.20.0' });
  });

  it('keeps the module type of a project that has code, with a note', async () => {
    const dir = path.join(work, 'with-code');
    await init(dir, '--no-install');
    await writeFile(path.join(dir, 'package.json'), JSON.stringify({ name: 'with-code', type: 'commonjs' }));
    await writeFile(path.join(dir, 'index.js'), 'module.exports = 1;\n');
    const out = await init(dir, '--no-install');
    assert.equal((await manifest(dir)).type, 'commonjs');
    assert.match(out, /note +package\.json has no "type": "module"/);
    assert.doesNotMatch(out, /changed/);
  });

  it('lists --no-install in its help', async () => {
    assert.match(await init('.', '--help'), /--no-install +Only write the devDependencies/);
  });
});
