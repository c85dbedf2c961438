/**
 * `offload launch -np N app.js`: N local proxies plus the app wired to them, the
 * `mpirun -np N proxy : -np 1 app` of LLVM's MPI plugin. The proxies get a fresh random token
 * and free ports; the app gets OFFLOAD_PROXIES and OFFLOAD_TOKEN; the proxies stop when the app
 * exits, and the command exits with the app's status.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { errors } from '../errors.js';
import { usageError } from './format.js';

export const summary = 'Start N local proxies and run a program wired to them';

const HELP = `Usage: offload launch -np <N> <app.js> [app arguments...]

${summary}. The program sees
its local devices first, then the proxies' devices. The proxies stop when it exits.

Options:
  -np, --np <N>  Number of proxies (1 to 64)
  -h, --help     Show this help`;

const START_TIMEOUT_MS = 30_000;

/** This command line again, for children: the same node flags (tsx when run from source) and script. */
function selfCommand(): string[] {
  return [...process.execArgv, process.argv[1]!];
}

/** Starts one proxy on a free port; resolves with its address once it listens. */
function startProxy(tokenFile: string, index: number): Promise<{ child: ChildProcess; address: string }> {
  const child = spawn(process.execPath, [...selfCommand(), 'proxy', '--listen', '127.0.0.1:0', '--token-file', tokenFile], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(errors.timeout(`proxy ${index} did not start within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(errors.deviceLost(`proxy ${index} exited before listening (${signal ?? `status ${code}`})`));
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const match = /^listening on (\S+)$/.exec(line);
      if (!match) return;
      clearTimeout(timer);
      resolve({ child, address: match[1]! });
    });
  });
}

export async function run(args: string[]): Promise<number> {
  // `-np` is MPI's spelling; parseArgs knows only --np.
  const normalized = args.map((arg) => (arg === '-np' ? '--np' : arg));
  const appAt = normalized.findIndex((arg, i) => !arg.startsWith('-') && normalized[i - 1] !== '--np');
  const own = appAt < 0 ? normalized : normalized.slice(0, appAt);
  const { values } = parseArgs({ args: own, options: { np: { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const count = Number(values.np);
  if (values.np === undefined || !Number.isInteger(count) || count < 1 || count > 64) {
    return usageError('launch', `-np must be a number of proxies from 1 to 64, got '${values.np ?? ''}'`);
  }
  if (appAt < 0) return usageError('launch', 'no program given (expected: offload launch -np N app.js)');
  const [app, ...appArgs] = normalized.slice(appAt);

  const dir = await mkdtemp(path.join(tmpdir(), 'offload-launch-'));
  const token = randomBytes(24).toString('hex');
  const tokenFile = path.join(dir, 'token');
  await writeFile(tokenFile, token, { mode: 0o600 });
  const proxies: ChildProcess[] = [];
  try {
    const started = await Promise.allSettled(Array.from({ length: count }, (_, i) => startProxy(tokenFile, i)));
    for (const result of started) if (result.status === 'fulfilled') proxies.push(result.value.child);
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    const addresses = started.map((result) => (result as PromiseFulfilledResult<{ address: string }>).value.address);
    const appProcess = spawn(process.execPath, [...process.execArgv, app!, ...appArgs], {
      stdio: 'inherit',
      env: { ...process.env, OFFLOAD_PROXIES: addresses.join(','), OFFLOAD_TOKEN: token },
    });
    const forward = (signal: NodeJS.Signals) => appProcess.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    const status = await new Promise<number>((resolve) => {
      appProcess.once('error', (error) => {
        console.error(`offload launch: cannot start ${app}: ${error.message}`);
        resolve(1);
      });
      appProcess.once('exit', (code, signal) => resolve(code ?? (signal ? 128 + 15 : 1)));
    });
    process.off('SIGINT', forward);
    process.off('SIGTERM', forward);
    return status;
  } finally {
    await Promise.all(proxies.map(stopProxy));
    await rm(dir, { recursive: true, force: true });
  }
}

/** SIGTERM (the proxy frees everything and exits), then SIGKILL if it takes too long. */
function stopProxy(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
