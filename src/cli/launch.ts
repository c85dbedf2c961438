/**
 * `offload launch -np N app.js`: N local proxies plus the app wired to them, the
 * `mpirun -np N proxy : -np 1 app` of LLVM's MPI plugin. The proxies get a fresh random token
 * and free ports; the app gets OFFLOAD_PROXIES and OFFLOAD_TOKEN; the proxies stop when the app
 * exits, and the command exits with the app's status.
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { constants } from 'node:os';
import { parseArgs } from 'node:util';
import { errors } from '../errors.js';
import { mpiUnavailable } from '../transport/mpi/addon.js';
import { usageError, wrapHelp } from './format.js';
import { startLocalProxies } from './local-proxies.js';

export const summary = 'Start N local proxies and run a program wired to them';

const HELP = wrapHelp(`Usage: offload launch [--mpi] -np <N> <app.js|app.ts> [app arguments...]

${summary}. The program sees
its local devices first, then the proxies' devices. The proxies stop when it exits, or
when this command ends by any signal. A TypeScript program runs through tsx when its
project has tsx, else through Node's own type stripping (Node >= 22.6).

Options:
  -np, --np <N>  Number of proxies (1 to 64)
  --mpi          Run proxies and program as one MPI job instead:
                 mpirun --oversubscribe --enable-recovery -np N offload proxy --mpi
                   : -np 1 node app.js
                 (a proxy rank that dies is DEVICE_LOST for the program, not the
                 end of the job)
  -h, --help     Show this help`);

export async function run(args: string[]): Promise<number> {
  // `-np` is MPI's spelling; parseArgs knows only --np.
  const normalized = args.map((arg) => (arg === '-np' ? '--np' : arg));
  const appAt = normalized.findIndex((arg, i) => !arg.startsWith('-') && normalized[i - 1] !== '--np');
  const own = appAt < 0 ? normalized : normalized.slice(0, appAt);
  const { values } = parseArgs({
    args: own,
    options: { np: { type: 'string' }, mpi: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  });
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
  const nodeArgs = await typeScriptLoader(app!);
  if (typeof nodeArgs === 'string') return usageError('launch', nodeArgs);
  if (values.mpi) return mpiJob(count, [...nodeArgs, app!, ...appArgs]);

  const local = (await startLocalProxies(count, { announce: false }))!;
  try {
    const addresses = local.proxies.map((proxy) => proxy.address);
    const appProcess = spawn(process.execPath, [...process.execArgv, ...nodeArgs, app!, ...appArgs], {
      stdio: 'inherit',
      env: { ...process.env, OFFLOAD_PROXIES: addresses.join(','), OFFLOAD_TOKEN: local.token },
    });
    const forward = (signal: NodeJS.Signals) => appProcess.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    const status = await new Promise<number>((resolve) => {
      appProcess.once('error', (error) => {
        console.error(`offload launch: cannot start ${app}: ${error.message}`);
        resolve(1);
      });
      // A signal death becomes 128 + its number, as shells report it.
      appProcess.once('exit', (code, signal) => resolve(code ?? 128 + (signal ? constants.signals[signal] : 0)));
    });
    process.off('SIGINT', forward);
    process.off('SIGTERM', forward);
    return status;
  } finally {
    await local.stop();
  }
}

/**
 * The node flags a TypeScript program (.ts, .mts, .cts) needs: tsx's loader where the program's
 * project has tsx, else Node's own type stripping where this Node has it; none for JavaScript
 * or when this command already runs with a loader. A string says why it cannot run.
 */
export async function typeScriptLoader(
  app: string,
  execArgv: readonly string[] = process.execArgv,
): Promise<string[] | string> {
  if (!/\.[cm]?ts$/.test(app)) return [];
  if (execArgv.some((arg) => /^--(import|loader|experimental-loader|experimental-strip-types)\b/.test(arg))) return [];
  const absolute = path.resolve(app);
  try {
    const manifestPath = createRequire(absolute).resolve('tsx/package.json');
    const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as { exports?: Record<string, unknown> };
    const entry = manifest.exports?.['.'];
    const file =
      typeof entry === 'string'
        ? entry
        : ((entry as Record<string, unknown> | undefined)?.import ??
          (entry as Record<string, unknown> | undefined)?.default);
    if (typeof file === 'string') return ['--import', pathToFileURL(path.join(path.dirname(manifestPath), file)).href];
  } catch {
    // No tsx in the program's project: Node's own type stripping, if it has it.
  }
  if ((process.features as { typescript?: unknown }).typescript) return ['--experimental-strip-types'];
  return `${app} is TypeScript, and neither tsx (npm install --save-dev tsx, in its project) nor Node's own type stripping (Node >= 22.6) is there to run it; or compile it and launch the .js`;
}

/**
 * The MPI form: one `mpirun` job of N proxy ranks and the program's rank (`program` run by this
 * node, with its flags), which finds the proxies by itself; the proxies finish when the program
 * has. The job's status is ours.
 */
export function mpiJob(count: number, program: string[]): Promise<number> {
  const unavailable = mpiUnavailable();
  if (unavailable) throw errors.unsupported(`offload --mpi: ${unavailable}`);
  const node = [process.execPath, ...process.execArgv];
  // --enable-recovery: a rank that dies does not end the job; the program gets DEVICE_LOST for
  // that rank's devices (see MpiHub's liveness) and goes on with the others.
  const args = [
    '--oversubscribe',
    '--enable-recovery',
    '-np',
    String(count),
    ...node,
    process.argv[1]!,
    'proxy',
    '--mpi',
    ':',
    '-np',
    '1',
    ...node,
    ...program,
  ];
  // mpirun refuses root unless told; containers and CI often run as root.
  const env = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' };
  return new Promise((resolve) => {
    const job = spawn('mpirun', args, { stdio: 'inherit', env });
    job.once('error', (error) => {
      console.error(`offload --mpi: cannot start mpirun: ${error.message}`);
      resolve(1);
    });
    job.once('exit', (code, signal) => resolve(code ?? 128 + (signal ? constants.signals[signal] : 0)));
  });
}
