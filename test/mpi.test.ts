// The MPI transport under a real `mpirun` (OpenMPI): the conformance suite on a proxy rank's
// device, a proxy-to-proxy copy between two proxy ranks, two application ranks sharing a proxy,
// and `offload launch --mpi`. Without mpirun or the addon the tests say why and skip, unless
// OFFLOAD_REQUIRE_MPI=1 (CI sets it), which makes them fail instead.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { mpiUnavailable } from '../src/transport/mpi/addon.js';
import { hugePagesFromEnv, progressFromEnv } from '../src/transport/mpi/hub.js';
import { startCpuHog } from './helpers/cpu-hog.js';

const cli = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const app = fileURLToPath(new URL('./mpi/app.ts', import.meta.url));
const node = [process.execPath, '--import', 'tsx'];

function unavailable(): string | undefined {
  try {
    execFileSync('mpirun', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'mpirun is not installed (Debian: openmpi-bin libopenmpi-dev)';
  }
  return mpiUnavailable();
}

const missing = unavailable();
const skip = missing !== undefined && process.env.OFFLOAD_REQUIRE_MPI !== '1' ? missing : false;

/** Runs one mpirun job: `proxies` proxy ranks and `apps` ranks of the test application. */
function job(
  proxies: number,
  apps: number,
  scenario: string,
  appFirst = false,
  options: { mpirun?: string[]; env?: NodeJS.ProcessEnv; onStdout?: (stdout: string) => void } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  if (missing) throw new Error(`MPI is required here (OFFLOAD_REQUIRE_MPI=1) but unavailable: ${missing}`);
  const proxyPart = ['-np', String(proxies), ...node, cli, 'proxy', '--mpi'];
  const appPart = ['-np', String(apps), ...node, app, scenario];
  const args = [
    '--oversubscribe',
    ...(options.mpirun ?? []),
    ...(appFirst ? [...appPart, ':', ...proxyPart] : [...proxyPart, ':', ...appPart]),
  ];
  return new Promise((resolve) => {
    // Without NODE_TEST_CONTEXT the application's node:test prints its own report, not the runner's protocol.
    const { NODE_TEST_CONTEXT: _context, ...env } = process.env;
    const child = spawn('mpirun', args, {
      env: {
        ...env,
        OMPI_ALLOW_RUN_AS_ROOT: '1',
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1',
        OFFLOAD_HOST_THREADS: '1',
        ...options.env,
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      options.onStdout?.(stdout);
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 240_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Sends `signal` to `pid`; false when there is no such process (any more). */
function kill(pid: number, signal: NodeJS.Signals | 0 = 'SIGKILL'): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** 'ended' once none of `pids` runs any more (mpirun reaps its ranks), 'running' after `ms`. */
async function survivorsEnd(pids: number[], ms: number): Promise<string> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100)))
    if (!pids.some((pid) => kill(pid, 0))) return 'ended';
  return 'running';
}

const lines = (stdout: string) =>
  stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);

/**
 * Whether this kernel collapses anonymous memory into huge pages on request: MADV_COLLAPSE came
 * with Linux 6.1, and THP set to 'never' turns it off. The mode, for what else gets huge pages.
 */
function hugePageSupport(): { collapses: boolean; mode: string } {
  const [major = 0, minor = 0] = release().split('.').map(Number);
  let mode = 'unknown';
  try {
    mode = /\[(\w+)\]/.exec(readFileSync('/sys/kernel/mm/transparent_hugepage/enabled', 'utf8'))?.[1] ?? mode;
  } catch {
    // no THP in this kernel
  }
  return { collapses: (major > 6 || (major === 6 && minor >= 1)) && (mode === 'always' || mode === 'madvise'), mode };
}

describe('OFFLOAD_MPI_HUGE_PAGES', { timeout: 10_000 }, () => {
  it('takes on and off, and refuses anything else with INVALID_ARGUMENT naming the variable, briefly', () => {
    assert.equal(hugePagesFromEnv({}), true);
    assert.equal(hugePagesFromEnv({ OFFLOAD_MPI_HUGE_PAGES: 'on' }), true);
    assert.equal(hugePagesFromEnv({ OFFLOAD_MPI_HUGE_PAGES: 'off' }), false);
    for (const bad of ['yes', '1', 'ON', ' off', 'x'.repeat(100_000), '\u0000']) {
      assert.throws(
        () => hugePagesFromEnv({ OFFLOAD_MPI_HUGE_PAGES: bad }),
        (error: { code?: string; message: string }) =>
          error.code === 'INVALID_ARGUMENT' &&
          error.message.includes("OFFLOAD_MPI_HUGE_PAGES must be 'on' or 'off'") &&
          error.message.length < 300,
      );
    }
  });
});

describe('OFFLOAD_MPI_PROGRESS', { timeout: 10_000 }, () => {
  it('takes thread and poll, and refuses anything else with INVALID_ARGUMENT naming the variable, briefly', () => {
    assert.equal(progressFromEnv({}), 'thread');
    assert.equal(progressFromEnv({ OFFLOAD_MPI_PROGRESS: '' }), 'thread');
    assert.equal(progressFromEnv({ OFFLOAD_MPI_PROGRESS: 'thread' }), 'thread');
    assert.equal(progressFromEnv({ OFFLOAD_MPI_PROGRESS: 'poll' }), 'poll');
    for (const bad of ['threads', 'Poll', ' poll', 'on', 'z'.repeat(100_000), '\u0000']) {
      assert.throws(
        () => progressFromEnv({ OFFLOAD_MPI_PROGRESS: bad }),
        (error: { code?: string; message: string }) =>
          error.code === 'INVALID_ARGUMENT' &&
          error.message.includes("OFFLOAD_MPI_PROGRESS must be 'thread' or 'poll'") &&
          error.message.length < 400,
      );
    }
  });
});

describe('MPI transport', { skip, timeout: 300_000 }, () => {
  it('passes the conformance suite on a proxy rank, and the job ends cleanly', async () => {
    const { code, stdout, stderr } = await job(1, 1, 'conformance');
    assert.match(stdout, /^(ℹ|#) fail 0$/m, `${stdout}\n${stderr}`);
    const passed = Number(/^(?:ℹ|#) pass (\d+)$/m.exec(stdout)?.[1]);
    assert.ok(passed >= 37, `${passed} conformance tests passed`);
    assert.equal(code, 0, stderr);
  });

  it('copies between two proxy ranks without the bytes passing through the application', async () => {
    const { code, stdout, stderr } = await job(2, 1, 'p2p');
    assert.equal(code, 0, `${stdout}\n${stderr}`);
    const [report] = lines(stdout);
    assert.deepEqual(report!.locations, ['mpi:0', 'mpi:1']);
    assert.ok(
      (report!.carried as number) < 64 * 1024,
      `the application's channels carried ${report!.carried as number} bytes of a 16 MiB copy`,
    );
  });

  it('lets two application ranks share one proxy, each with its own buffers', async () => {
    const { code, stdout, stderr } = await job(1, 2, 'shared');
    assert.equal(code, 0, `${stdout}\n${stderr}`);
    assert.deepEqual(
      lines(stdout)
        .map((r) => r.rank)
        .sort(),
      [1, 2],
    );
  });

  it('lets the application be rank 0 (any rank may host it)', async () => {
    const { code, stdout, stderr } = await job(2, 1, 'p2p', true);
    assert.equal(code, 0, `${stdout}\n${stderr}`);
    assert.deepEqual(lines(stdout)[0]!.locations, ['mpi:1', 'mpi:2']);
  });

  it('ends the job with the failure of the application, without hanging', async () => {
    const { code, stderr } = await job(1, 1, 'fail');
    assert.notEqual(code, 0, stderr);
  });

  it('gives DEVICE_LOST for a killed proxy rank within the peer timeout, and goes on with the other (mpirun --enable-recovery)', async () => {
    const { code, stdout, stderr } = await job(2, 1, 'killed-proxy', false, {
      mpirun: ['--enable-recovery'],
      env: { OFFLOAD_PEER_TIMEOUT: '3000' },
    });
    const [report] = lines(stdout);
    assert.ok(report, `${stdout}\n${stderr}`);
    assert.deepEqual(
      [report.lost, report.later, report.other],
      ['DEVICE_LOST', 'DEVICE_LOST', true],
      JSON.stringify(report),
    );
    assert.ok((report.seconds as number) < 3 + 2, `DEVICE_LOST after ${report.seconds as number} s`);
    assert.equal(code, 0, `the job did not end by itself after the rank was killed\n${stderr}`);
  });

  it('ends the job without a rank that stopped: the others finalize without waiting for it and end it, so mpirun ends (mpirun --enable-recovery)', async () => {
    // MPI_Finalize's closing fence waits for every rank; a stopped one never comes (a dead one,
    // under load, sometimes never counts as gone either). The survivors must end by themselves,
    // and end the stopped rank too: mpirun waits for every rank's process.
    // Filled in from the job's output while it runs (a holder: TypeScript does not follow the callback).
    type Report = { lost: string; stopped: number; survivors: number[] };
    const seen: { report?: Report; ended?: Promise<string> } = {};
    const { stdout, stderr } = await job(2, 1, 'stopped-proxy', false, {
      mpirun: ['--enable-recovery'],
      env: { OFFLOAD_PEER_TIMEOUT: '3000' },
      onStdout: (out) => {
        if (seen.report) return;
        const report = lines(out.slice(0, out.lastIndexOf('\n') + 1))[0] as Report | undefined;
        if (!report) return;
        seen.report = report;
        // The test kills the stopped rank only after looking: had it been left running, so would mpirun.
        seen.ended = survivorsEnd([...report.survivors, report.stopped], 30_000).finally(() => kill(report.stopped));
      },
    });
    assert.ok(seen.report && seen.ended, `${stdout}\n${stderr}`);
    assert.equal(seen.report.lost, 'DEVICE_LOST');
    assert.equal(
      await seen.ended,
      'ended',
      'the living ranks waited in MPI_Finalize for the stopped one, or left it running (and mpirun with it)',
    );
  });

  it('ends the job when the program rank is killed: the proxies take it as gone (mpirun --enable-recovery)', async () => {
    const started = Date.now();
    const { stdout, stderr } = await job(1, 1, 'killed-app', false, {
      mpirun: ['--enable-recovery'],
      env: { OFFLOAD_PEER_TIMEOUT: '3000' },
    });
    assert.ok(lines(stdout)[0]?.killing, `${stdout}\n${stderr}`);
    assert.ok(Date.now() - started < 60_000, 'the proxies finished instead of waiting for a bye that never comes');
  });

  it('sends an array written again and again from huge pages, every byte as it is at each write', async () => {
    const { collapses, mode } = hugePageSupport();
    const on = await job(1, 1, 'huge-pages');
    assert.equal(on.code, 0, `${on.stdout}\n${on.stderr}`);
    const [withPages] = lines(on.stdout);
    assert.equal(withPages!.intact, true, 'a write or read after the collapse changed bytes');
    const off = await job(1, 1, 'huge-pages', false, { env: { OFFLOAD_MPI_HUGE_PAGES: 'off' } });
    assert.equal(off.code, 0, `${off.stdout}\n${off.stderr}`);
    const [without] = lines(off.stdout);
    assert.equal(without!.intact, true);
    if (collapses) {
      assert.ok((withPages!.hugeKiB as number) >= 2048, `no huge page after 4 writes: ${JSON.stringify(withPages)}`);
      // Under 'madvise' nothing else in the rank asks for huge pages: off means none.
      if (mode === 'madvise') assert.equal(without!.hugeKiB, 0, 'huge pages with OFFLOAD_MPI_HUGE_PAGES=off');
    } else {
      // The kernel cannot collapse (before 6.1, or THP 'never'): the advice changes nothing.
      assert.equal(withPages!.hugeKiB, without!.hugeKiB, `kernel ${release()}, THP ${mode}`);
    }
  });

  it('refuses a bad OFFLOAD_MPI_HUGE_PAGES before MPI starts, naming it without echoing the value', async () => {
    const { code, stderr } = await job(1, 1, 'fail', false, { env: { OFFLOAD_MPI_HUGE_PAGES: 'y'.repeat(50_000) } });
    assert.notEqual(code, 0);
    assert.match(stderr, /OFFLOAD_MPI_HUGE_PAGES must be 'on' or 'off'/);
    assert.ok(!stderr.includes('y'.repeat(100)), 'the value was echoed unbounded');
  });

  it('answers after pauses: a quiet rank is woken by its progress thread, or by its timer under OFFLOAD_MPI_PROGRESS=poll', async () => {
    for (const mode of ['thread', 'poll']) {
      const { code, stdout, stderr } = await job(1, 1, 'pauses', false, { env: { OFFLOAD_MPI_PROGRESS: mode } });
      assert.equal(code, 0, `${mode}: ${stdout}\n${stderr}`);
      const [report] = lines(stdout);
      // Every launch ran once: each of the 16 counters holds the number of launches.
      assert.deepEqual(report!.counts, [report!.expected], `${mode}: ${JSON.stringify(report)}`);
      assert.equal(report!.progress, mode);
      // The long kernel's answer came while the application rank was quiet: under 'thread' no
      // timer polls then, so only the progress thread can have woken it (a heartbeat may add one).
      if (mode === 'thread') assert.ok((report!.wokenByAnswer as number) >= 1, JSON.stringify(report));
      else assert.equal(report!.wokenByAnswer, 0);
    }
  });

  it('polls MPI for an awaited reply as it comes (OFFLOAD_POLL_US), and not at all with 0; refuses a bad value', async () => {
    for (const window of ['20000', '0']) {
      const { code, stdout, stderr } = await job(1, 1, 'round-trips', false, { env: { OFFLOAD_POLL_US: window } });
      assert.equal(code, 0, `${window}: ${stdout}\n${stderr}`);
      const [report] = lines(stdout);
      assert.deepEqual(report!.counts, [report!.expected], `${window}: ${JSON.stringify(report)}`);
      // Each reply is expected: most of the 300 come within a 20 ms window, however busy the
      // machine (through tsx a round trip here takes 70-200 us); without a window none is.
      if (window === '0') assert.equal(report!.arrivalsExpected, 0, JSON.stringify(report));
      else assert.ok((report!.arrivalsExpected as number) >= 150, JSON.stringify(report));
    }
    const { code, stderr } = await job(1, 1, 'fail', false, { env: { OFFLOAD_POLL_US: 'u'.repeat(50_000) } });
    assert.notEqual(code, 0);
    assert.match(stderr, /OFFLOAD_POLL_US must be a number of microseconds/);
    assert.ok(!stderr.includes('u'.repeat(100)), 'the value was echoed unbounded');
  });

  it("weighs the job's ranks on this host against the machine's cores, not other programs' load", async () => {
    // Bound to a core, a rank's availableParallelism() is 1: against it the other rank looked
    // like a crowd. And with other programs' load counted as a crowd, a rank beside a busy
    // process per core slept through its progress thread for every frame: 600-900 us a round
    // trip against 65-75 us spinning (bench/README.md).
    const cores = cpus().length;
    const hog = await startCpuHog(60_000);
    try {
      const { code, stdout, stderr } = await job(1, 1, 'round-trips', false, {
        mpirun: ['--bind-to', 'core'],
        env: { OFFLOAD_DEBUG: '1' },
      });
      assert.equal(code, 0, `${stdout}\n${stderr}`.slice(-2000));
      const first = new Map<string, string>();
      for (const [, rank, report] of stderr.matchAll(/(client|proxy) polling: MPI: (.*)/g))
        if (!first.has(rank!)) first.set(rank!, report!);
      // Each rank's first report: two ranks fit in two cores or more, whatever else runs.
      const expected =
        cores >= 2
          ? `spins up to 50 us for every frame expected (1 other rank of this job on this host, ${cores} cores)`
          : 'sleeps: 1 other rank of this job on this host does not fit in the other 0 of 1 cores';
      assert.deepEqual(Object.fromEntries(first), { client: expected, proxy: expected }, stderr.slice(-600));
    } finally {
      await hog.stop();
    }
  });

  it('runs every launch once while arming, disarming and wakes race (random pauses around the 2 ms quiet mark)', async () => {
    for (let round = 0; round < 3; round++) {
      const { code, stdout, stderr } = await job(1, 1, 'pause-storm');
      assert.equal(code, 0, `${stdout}\n${stderr}`);
      const [report] = lines(stdout);
      assert.deepEqual(report!.counts, [[report!.expected], [report!.expected]], JSON.stringify(report));
      assert.ok(
        (report!.wakes as number) >= 1,
        `the progress thread never woke the application: ${JSON.stringify(report)}`,
      );
    }
  });

  it('refuses a bad OFFLOAD_MPI_PROGRESS before MPI starts, naming it without echoing the value', async () => {
    const { code, stderr } = await job(1, 1, 'fail', false, { env: { OFFLOAD_MPI_PROGRESS: 'w'.repeat(50_000) } });
    assert.notEqual(code, 0);
    assert.match(stderr, /OFFLOAD_MPI_PROGRESS must be 'thread' or 'poll'/);
    assert.ok(!stderr.includes('w'.repeat(100)), 'the value was echoed unbounded');
  });

  it('runs a program with offload launch --mpi and returns its status', async () => {
    const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', cli, 'launch', '--mpi', '-np', '2', app, 'p2p'], {
        env: { ...process.env, OFFLOAD_HOST_THREADS: '1' },
      });
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.once('exit', (exitCode) => resolve({ code: exitCode, stdout: out }));
    });
    assert.equal(code, 0, stdout);
    assert.deepEqual(lines(stdout)[0]!.locations, ['mpi:0', 'mpi:1']);
  });

  it('runs XSBench over MPI proxy ranks (offload bench --mpi) with the published checksum', async () => {
    const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          cli,
          'bench',
          'xsbench',
          '--grid',
          'hash',
          '--lookups',
          '1000',
          '--devices',
          'remote',
          '--mpi',
          '2',
        ],
        {
          env: { ...process.env, OFFLOAD_HOST_THREADS: '1' },
        },
      );
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.once('exit', (exitCode) => resolve({ code: exitCode, stdout: out }));
    });
    assert.equal(code, 0, stdout);
    // The lookups are spread by measured throughput: each rank does some, and together all 1,000.
    const lookups = [0, 1].map((rank) => {
      const line = new RegExp(`@ mpi:${rank} +([\\d,]+) lookups`).exec(stdout);
      assert.ok(line, `rank ${rank} did no lookups:\n${stdout}`);
      return Number(line[1]!.replaceAll(',', ''));
    });
    assert.ok(
      lookups.every((count) => count > 0),
      stdout,
    );
    assert.equal(lookups[0]! + lookups[1]!, 1000, stdout);
    assert.match(stdout, /^checksum 3044: VALID$/m);
  });
});
