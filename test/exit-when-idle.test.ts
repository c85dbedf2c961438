// A program ends when its work ends: one that never calls shutdown exits within a second of its
// last await on the host device, with TCP proxies connected, under `offload launch` and over MPI;
// work still in flight (not awaited) keeps it running until it is done. The program is
// test/fixtures/forgotten-shutdown.ts; it reports how long its event loop ran after its last await.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { mpiUnavailable } from '../src/transport/mpi/addon.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';

const program = fileURLToPath(new URL('./fixtures/forgotten-shutdown.ts', import.meta.url));
const cli = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const node = [process.execPath, '--import', 'tsx'];
/** A program stuck on an open handle would run until this kills it (and fails its test). */
const KILL_AFTER_MS = 60_000;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  lines: Record<string, unknown>[];
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve) => {
    const { NODE_TEST_CONTEXT: _context, ...base } = process.env;
    const child = spawn(command, args, {
      env: { ...base, OFFLOAD_HOST_THREADS: '1', OFFLOAD_WEBGPU: 'off', OFFLOAD_PROXIES: '', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), KILL_AFTER_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      const lines = stdout
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      resolve({ code, signal, stdout, stderr, lines });
    });
  });
}

/** The program ran on `plugins`, got the right sums, and its loop emptied within a second of its last await. */
function assertEndedByItself(result: Run, plugins: string[]): void {
  const context = `exit ${result.code} ${result.signal}\nstdout:\n${result.stdout}\nstderr:\n${result.stderr}`;
  assert.equal(result.signal, null, `killed: it did not end by itself\n${context}`);
  assert.equal(result.code, 0, context);
  const report = result.lines.find((line) => 'plugins' in line);
  assert.deepEqual(report?.plugins, plugins, context);
  assert.equal(report?.sum, plugins.length * (1 + 2 + 3 + 4 + 4 * 10), context);
  const exit = result.lines.find((line) => 'exitAfterMs' in line);
  assert.ok(exit, `no exit line\n${context}`);
  assert.ok(
    (exit.exitAfterMs as number) < 1000,
    `the event loop ran ${String(exit.exitAfterMs)} ms after the last await\n${context}`,
  );
}

describe('a program that never calls shutdown', { timeout: 300_000 }, () => {
  let proxy: ProxyProcess;
  before(async () => {
    await fixtureBundle();
    proxy = await startProxy({ threads: 1 });
  });
  after(() => proxy?.kill());

  it('exits when its work ends on the host device', async () => {
    assertEndedByItself(await run(node[0]!, [...node.slice(1), program]), ['host']);
  });

  it('exits when its work ends with a TCP proxy connected', async () => {
    const result = await run(node[0]!, [...node.slice(1), program], {
      OFFLOAD_PROXIES: proxy.address,
      OFFLOAD_TOKEN: proxy.token,
    });
    assertEndedByItself(result, ['host', 'remote']);
  });

  it('is kept alive by a request in flight that nothing awaits, then exits', async () => {
    const result = await run(node[0]!, [...node.slice(1), program, 'in-flight'], {
      OFFLOAD_PROXIES: proxy.address,
      OFFLOAD_TOKEN: proxy.token,
    });
    assertEndedByItself(result, ['host', 'remote']);
    assert.deepEqual(
      result.lines.find((line) => 'inFlightDone' in line),
      { inFlightDone: 0x07070707 },
    );
  });

  it('exits when its work ends under offload launch, and the launch with it', async () => {
    const result = await run(node[0]!, [...node.slice(1), cli, 'launch', '-np', '2', program]);
    assertEndedByItself(result, ['host', 'remote', 'remote']);
  });

  const mpiMissing = (() => {
    try {
      execFileSync('mpirun', ['--version'], { stdio: 'ignore' });
    } catch {
      return 'mpirun is not installed (Debian: openmpi-bin libopenmpi-dev)';
    }
    return mpiUnavailable();
  })();
  const skip = mpiMissing !== undefined && process.env.OFFLOAD_REQUIRE_MPI !== '1' ? mpiMissing : false;

  it('exits when its work ends over MPI, and the job with it', { skip }, async () => {
    if (mpiMissing) throw new Error(`MPI is required here (OFFLOAD_REQUIRE_MPI=1) but unavailable: ${mpiMissing}`);
    const result = await run(
      'mpirun',
      ['--oversubscribe', '-np', '1', ...node, cli, 'proxy', '--mpi', ':', '-np', '1', ...node, program],
      { OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' },
    );
    assertEndedByItself(result, ['host', 'remote']);
  });
});
