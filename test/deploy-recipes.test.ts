// The deployment recipes of docs/deploy, exercised where this machine can: the Slurm batch
// script under `bash -n` and run for real with mpirun standing in for Slurm's launcher (two
// proxy ranks and the program rank on this machine); the proxy options of the Dockerfiles, the
// systemd unit and the Kubernetes manifest started as a real proxy (addresses moved to loopback,
// certificates to the test ones) that answers the probes the recipes name; the unit through
// `systemd-analyze verify` where it is installed; the Dockerfile built only where a Docker
// daemon answers and OFFLOAD_DOCKER_BUILD=1 (its build fetches packages from npm).
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { mpiUnavailable } from '../src/transport/mpi/addon.js';
import { metricsUrl } from './helpers/metrics.js';
import { startProxy } from './helpers/proxy.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const deploy = path.join(root, 'docs/deploy');
const cli = path.join(root, 'src/cli/main.ts');
const certs = path.join(root, 'test/fixtures/tls');

function run(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
  timeout = 120_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) =>
    execFile(command, args, { cwd: root, env: { ...process.env, ...env }, timeout }, (error, stdout, stderr) =>
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1, stdout, stderr }),
    ),
  );
}

function installed(command: string, args: string[] = ['--version']): boolean {
  try {
    execFileSync(command, args, { stdio: 'ignore', timeout: 20_000 });
    return true;
  } catch {
    return false;
  }
}

/** Every `--option` the `offload proxy` help lists. */
async function proxyOptions(): Promise<Set<string>> {
  const help = await run(process.execPath, ['--import', 'tsx', cli, 'proxy', '--help']);
  return new Set(help.stdout.match(/--[a-z][a-z-]+/g));
}

/**
 * A recipe's proxy arguments made runnable here: addresses on loopback, port 0, the test
 * certificates; then a real proxy started with them, and its probes asked.
 */
async function serveRecipeArgs(args: string[]): Promise<{ health: number; ready: number; metrics: boolean }> {
  const local = args
    .filter((arg, i) => arg !== '--listen' && args[i - 1] !== '--listen' && !arg.startsWith('--listen='))
    .map((arg) =>
      arg
        .replace(/0\.0\.0\.0:\d+|127\.0\.0\.1:\d+/, '127.0.0.1:0')
        .replace(/\/tls\/(tls\.crt|cert\.pem)|\/etc\/offload\/cert\.pem/, path.join(certs, 'cert.pem'))
        .replace(/\/tls\/(tls\.key|key\.pem)|\/etc\/offload\/key\.pem/, path.join(certs, 'key.pem')),
    );
  const proxy = await startProxy({ args: local });
  try {
    const url = metricsUrl(proxy.output());
    const [health, ready, metrics] = await Promise.all(
      ['/healthz', '/readyz', '/metrics'].map((page) => fetch(`${url}${page}`)),
    );
    return {
      health: health!.status,
      ready: ready!.status,
      metrics: (await metrics!.text()).includes('# TYPE offload_'),
    };
  } finally {
    await proxy.stop();
  }
}

/** The `offload proxy` arguments of a Dockerfile's CMD (a JSON array over continued lines). */
function dockerCmd(text: string): string[] {
  const match = /^CMD (\[[^\]]*\])/m.exec(text.replace(/\\\n\s*/g, ''));
  assert.ok(match, 'no CMD');
  return JSON.parse(match[1]!) as string[];
}

describe('deployment recipes (docs/deploy)', { timeout: 300_000 }, () => {
  it('the Dockerfiles: their proxy options exist, and a proxy started with them answers /healthz, /readyz and /metrics', async () => {
    const options = await proxyOptions();
    for (const file of ['Dockerfile', 'Dockerfile.mpi']) {
      const text = await readFile(path.join(deploy, file), 'utf8');
      assert.match(text, /^ENTRYPOINT \["offload", "proxy"\]$/m, file);
      assert.match(text, /^EXPOSE 7000 9464$/m, file);
      // `offload proxy` started by hand takes its young generation's size from NODE_OPTIONS (nursery.ts).
      assert.match(text, /^ENV NODE_OPTIONS=--max-semi-space-size=1$/m, file);
      const args = dockerCmd(text);
      for (const option of args.filter((arg) => arg.startsWith('--')))
        assert.ok(options.has(option), `${file}: ${option}`);
      assert.deepEqual(await serveRecipeArgs(args), { health: 200, ready: 200, metrics: true }, file);
    }
    assert.match(await readFile(path.join(deploy, 'Dockerfile.mpi'), 'utf8'), /openmpi-bin libopenmpi-dev/);
    if (process.env.OFFLOAD_DOCKER_BUILD === '1' && installed('docker', ['info'])) {
      const built = await run(
        'docker',
        ['build', '-t', 'offload-proxy-test', '-f', path.join(deploy, 'Dockerfile'), root],
        {},
        280_000,
      );
      assert.equal(built.code, 0, built.stderr.slice(-4000));
    }
  });

  it('the systemd unit: systemd-analyze verifies it, and its ExecStart options serve the probes', async () => {
    const unit = await readFile(path.join(deploy, 'offload-proxy.service'), 'utf8');
    const exec = /^ExecStart=\/usr\/bin\/env offload proxy ((?:.*\\\n)*.*)$/m.exec(unit);
    assert.ok(exec, 'no ExecStart');
    const args = exec[1]!.replace(/\\\n/g, ' ').trim().split(/\s+/);
    const options = await proxyOptions();
    for (const option of args.filter((arg) => arg.startsWith('--'))) assert.ok(options.has(option), option);
    assert.match(unit, /^KillSignal=SIGTERM$/m);
    assert.match(unit, /^LoadCredential=token:/m);
    assert.match(unit, /^Environment=NODE_OPTIONS=--max-semi-space-size=1$/m);
    // The token file is the credential's; here the test's proxy gets its own.
    const runnable = args.filter((arg, i) => arg !== '--token-file' && args[i - 1] !== '--token-file');
    assert.deepEqual(await serveRecipeArgs(runnable), { health: 200, ready: 200, metrics: true });
    if (installed('systemd-analyze')) {
      const verified = await run('systemd-analyze', ['verify', path.join(deploy, 'offload-proxy.service')]);
      assert.equal(verified.code, 0, verified.stderr);
    }
  });

  it('the Kubernetes manifest: probes on /healthz and /readyz, the scrape annotation on the metrics port, args that serve them', async () => {
    const manifest = await readFile(path.join(deploy, 'kubernetes.yaml'), 'utf8');
    assert.match(manifest, /prometheus\.io\/scrape: 'true'/);
    assert.match(manifest, /prometheus\.io\/port: '9464'/);
    assert.match(manifest, /prometheus\.io\/path: \/metrics/);
    assert.match(manifest, /livenessProbe:\n\s+httpGet: \{ path: \/healthz, port: metrics \}/);
    assert.match(manifest, /readinessProbe:.*\n\s+httpGet: \{ path: \/readyz, port: metrics \}/);
    assert.match(manifest, /\{ name: metrics, containerPort: 9464 \}/);
    const args = [...manifest.matchAll(/^\s+- (--[a-z-]+)(?:=(\S+))?/gm)].flatMap((m) =>
      m[2] ? [m[1]!, m[2]] : [m[1]!],
    );
    assert.ok(args.includes('--metrics') && args[args.indexOf('--metrics') + 1] === '0.0.0.0:9464', args.join(' '));
    const options = await proxyOptions();
    for (const option of args.filter((arg) => arg.startsWith('--'))) assert.ok(options.has(option), option);
    assert.deepEqual(await serveRecipeArgs(args), { health: 200, ready: 200, metrics: true });
  });

  const mpiMissing = installed('mpirun')
    ? mpiUnavailable()
    : 'mpirun is not installed (Debian: openmpi-bin libopenmpi-dev)';
  it('the Slurm batch script passes bash -n', async () => {
    const checked = await run('bash', ['-n', path.join(deploy, 'slurm-proxies.sbatch')]);
    assert.equal(checked.code, 0, checked.stderr);
    const script = await readFile(path.join(deploy, 'slurm-proxies.sbatch'), 'utf8');
    assert.match(script, /proxy_rank="NODE_OPTIONS=\\"--max-semi-space-size=1 \\\$\{NODE_OPTIONS:-\}\\" exec /);
  });

  it(
    'the Slurm batch script, with mpirun standing in for Slurm: a proxy rank per "node", the program served by both, their metrics up',
    { skip: mpiMissing !== undefined && process.env.OFFLOAD_REQUIRE_MPI !== '1' ? mpiMissing : false },
    async () => {
      const metricsPort = randomInt(20_000, 40_000);
      const { NODE_TEST_CONTEXT: _context, ...env } = process.env;
      const child = spawn('bash', [path.join(deploy, 'slurm-proxies.sbatch')], {
        cwd: root,
        env: {
          ...env,
          SLURM_JOB_NUM_NODES: '2',
          PROGRAM: `${process.execPath} --import tsx ${path.join(root, 'test/fixtures/deploy/slurm-app.ts')}`,
          OFFLOAD: `${process.execPath} --import tsx ${cli}`,
          METRICS_PORT: String(metricsPort),
          MPIRUN_ARGS: '--oversubscribe',
          OMPI_ALLOW_RUN_AS_ROOT: '1',
          OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1',
          OFFLOAD_HOST_THREADS: '1',
          OFFLOAD_WEBGPU: 'off',
        },
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 200_000);
      const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
      clearTimeout(timer);
      assert.equal(code, 0, `${stdout}\n${stderr.slice(-4000)}`);
      const line = stdout.split('\n').find((candidate) => candidate.startsWith('{"devices"'));
      assert.ok(line, stdout);
      const report = JSON.parse(line) as { devices: string[]; results: number[][]; launches: number[] };
      assert.equal(report.devices.length, 2, line);
      for (const values of report.results)
        assert.deepEqual(
          values,
          Array.from({ length: 16 }, (_, i) => i),
        );
      assert.deepEqual(report.launches, [1, 1], 'each proxy rank served its metrics on its own port');
      // The proxies' logs are JSON lines: each listened, and stopped when the program rank ended.
      const events = stderr
        .split('\n')
        .filter((candidate) => candidate.startsWith('{'))
        .map((candidate) => JSON.parse(candidate) as { event: string });
      assert.equal(events.filter((event) => event.event === 'listening').length, 2, stderr.slice(-4000));
      assert.equal(events.filter((event) => event.event === 'stopped').length, 2, stderr.slice(-4000));
    },
  );
});
