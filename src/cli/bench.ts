/**
 * `offload bench xsbench|rsbench`: the proxy apps of LLVM's MPI plugin paper on any set of
 * devices, with their published checksums as the check. Lookups are spread over the devices
 * (runtime.spread: chunks to whichever device is ready, sized by its measured throughput), and
 * the figure of merit is lookups per second over the lookups alone.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import type { Device } from '../api/device.js';
import { Offload, type Runtime } from '../api/runtime.js';
import type { LookupResult, ProblemSize } from '../apps/proxy-apps.js';
import { generateRsbench, RSBENCH, rsbenchKernelsSource, runRsbench } from '../apps/rsbench.js';
import {
  generateXsbench,
  runXsbench,
  XSBENCH,
  xsbenchBytes,
  xsbenchKernelsSource,
  type XsGrid,
} from '../apps/xsbench.js';
import { errors } from '../errors.js';
import { formatDuration, table, usageError, wrapHelp } from './format.js';
import { formatBytes } from '../units.js';
import { cachedBundle } from './kernel-cache.js';
import { mpiJob } from './launch.js';
import { startLocalProxies } from './local-proxies.js';
import { progressBar } from './progress.js';

export const summary = 'Run a proxy app (xsbench, rsbench) on any devices and verify its checksum';

const HELP = wrapHelp(`Usage: offload bench <xsbench|rsbench> [options]

${summary}.

Options:
  --size <small|large>          Problem size (default small; large needs ~6 GB with --grid unionized)
  --grid <unionized|hash>       XSBench's acceleration grid (default unionized)
  --lookups <N>                 Lookups (default: the published run, ${XSBENCH.lookups.toLocaleString('en-US')} for
                                xsbench, ${RSBENCH.lookups.toLocaleString('en-US')} for rsbench)
  --devices <all|local|remote|ids>
                                Devices to split the lookups over (default all; ids: 0,2,...)
  --proxies <N>                 Start N local proxies first and include their devices
  --mpi <N>                     Run as one mpirun job with N proxy ranks (OpenMPI)
  --kernel <as|c>               The lookup kernels: as, the AssemblyScript port
                                (examples/, default); c, the native peers' own C source
                                (bench/peers/<app>.c, built by clang for wasm32; a checkout
                                of the repository only)
  --peers                       Then run the native peers (LLVM OpenMP offload and plain
                                OpenMP, built by bench/peers/build.sh) with the same lookups
                                and thread count, and print the ratios
  --repeat <N>                  Run the lookups N times (1 to 20, default 1) and report the
                                median; with --peers, each peer runs after each of ours, so a
                                slow minute of a shared machine hits all of them alike
  --json                        Print the result as one JSON object (and nothing else) on stdout
  -h, --help                    Show this help`);

/** Devices named by --devices. */
function pickDevices(runtime: Runtime, spec: string): Device[] {
  if (spec === 'all') return [...runtime.devices];
  if (spec === 'local') return runtime.devices.filter((d) => d.info.location === 'local');
  if (spec === 'remote') return runtime.devices.filter((d) => d.info.location !== 'local');
  return spec.split(',').map((id) => {
    if (!/^\d+$/.test(id))
      throw errors.invalidArgument(
        `--devices: '${id}' is not a device id (expected all, local, remote or ids like 0,2)`,
      );
    return runtime.device(Number(id));
  });
}

/**
 * OUT_OF_MEMORY before anything is made when a device cannot hold XSBench's data, saying what
 * would fit: every device holds all the data, so more proxies of the same size do not help.
 */
function checkFits(devices: readonly Device[], size: ProblemSize, grid: XsGrid): void {
  const need = xsbenchBytes(size, grid);
  const small = devices.filter((device) => device.info.memoryBytes < need);
  if (small.length === 0) return;
  const named = small
    .map((device) => `device ${device.id} ${device.info.name} has ${formatBytes(device.info.memoryBytes)}`)
    .join(', ');
  const hash = grid === 'unionized' ? `; --grid hash needs ${formatBytes(xsbenchBytes(size, 'hash'))}` : '';
  throw errors.outOfMemory(
    `xsbench --size ${size} --grid ${grid} needs ${formatBytes(need)} on every device it runs on (each holds all the data), and ${named}: ` +
      `more proxies do not help (a host device holds at most 4 GiB), leave the small devices out with --devices${hash}`,
  );
}

/** The peers' sources: also the C kernels of `--kernel c` (only in a checkout of the repository). */
const PEERS_SOURCES = fileURLToPath(new URL('../../bench/peers/', import.meta.url));

/** The C source of `app`'s peer, which `offload build` compiles into its lookup kernels. */
function cKernelSource(app: 'xsbench' | 'rsbench'): string {
  return path.join(PEERS_SOURCES, `${app}.c`);
}

/** The peers' binaries, built by bench/peers/build.sh (only in a checkout of the repository). */
const PEERS_DIR = fileURLToPath(new URL('../../bench/peers/build/', import.meta.url));

interface PeerResult {
  variant: string;
  checksum: number;
  lookups_per_s: number;
  threads: number;
}

/** The native peers: `<app>_<variant>` in PEERS_DIR, run with `env` beside OMP_NUM_THREADS. */
const PEERS = [
  {
    variant: 'offload',
    label: 'LLVM 16 OpenMP offload (libomptarget x86_64 plugin)',
    env: { LD_LIBRARY_PATH: '/usr/lib/llvm-16/lib', OMP_TARGET_OFFLOAD: 'MANDATORY' },
  },
  { variant: 'host', label: 'gcc -O3 OpenMP host loop', env: {} },
] as const;

type Peer = (typeof PEERS)[number];

/** Runs one peer with `threads` OpenMP threads: its result, or why it has none. */
function runPeer(app: string, peer: Peer, args: string[], threads: number): PeerResult | string {
  const binary = path.join(PEERS_DIR, `${app}_${peer.variant}`);
  if (!existsSync(binary)) return `${binary} is missing: build the peers with bench/peers/build.sh`;
  const run = spawnSync(binary, args, {
    encoding: 'utf8',
    env: { ...process.env, ...peer.env, OMP_NUM_THREADS: String(threads) },
  });
  const line = run.stdout.split('\n').find((l) => l.startsWith('{'));
  if (!line) return `${binary} failed: ${run.stderr.trim() || `status ${run.status}`}`;
  return JSON.parse(line) as PeerResult;
}

/** The median of `values` (at least one). */
function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** A rate, and with more than one run the range of them: `1,520,698 (1,506,345-1,632,260)`. */
function formatRate(rates: readonly number[]): string {
  const round = (rate: number): string => Math.round(rate).toLocaleString('en-US');
  if (rates.length === 1) return round(rates[0]!);
  return `${round(median(rates))} (${round(Math.min(...rates))}-${round(Math.max(...rates))})`;
}

/** Prints the peers' median rates beside offload-ts's, and offload-ts's median over each. */
function printPeers(ours: readonly number[], checksum: number, peers: Map<Peer, PeerResult[]>): void {
  const header = ['  implementation', 'lookups/s', 'offload-ts / it', 'checksum'];
  const rows = [['  offload-ts', formatRate(ours), '1.00', String(checksum)]];
  for (const [peer, results] of peers) {
    const rates = results.map((result) => result.lookups_per_s);
    const checksums = [...new Set(results.map((result) => result.checksum))];
    rows.push([
      `  ${peer.label}, ${results[0]!.threads} threads`,
      formatRate(rates),
      (median(ours) / median(rates)).toFixed(2),
      `${checksums.join(', ')}${checksums.length === 1 && checksums[0] === checksum ? '' : ' (differs!)'}`,
    ]);
  }
  console.log('');
  if (ours.length > 1) console.log(`medians of ${ours.length} runs each, alternating (min-max in brackets)`);
  for (const line of table([header, ...rows])) console.log(line);
}

export async function run(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      size: { type: 'string', default: 'small' },
      grid: { type: 'string', default: 'unionized' },
      lookups: { type: 'string' },
      devices: { type: 'string', default: 'all' },
      proxies: { type: 'string' },
      peers: { type: 'boolean' },
      kernel: { type: 'string', default: 'as' },
      repeat: { type: 'string' },
      mpi: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const app = positionals[0];
  if (positionals.length !== 1 || (app !== 'xsbench' && app !== 'rsbench')) {
    return usageError(
      'bench',
      `expected the app to run: xsbench or rsbench${positionals.length ? `, got '${positionals.join(' ')}'` : ''}`,
    );
  }
  if (values.size !== 'small' && values.size !== 'large')
    return usageError('bench', `--size must be small or large, got '${values.size}'`);
  if (values.grid !== 'unionized' && values.grid !== 'hash')
    return usageError('bench', `--grid must be unionized or hash, got '${values.grid}'`);
  const lookups =
    values.lookups === undefined ? (app === 'xsbench' ? XSBENCH.lookups : RSBENCH.lookups) : Number(values.lookups);
  if (!/^\d+$/.test(values.lookups ?? '1') || lookups < 1 || lookups > 2 ** 31 - 1)
    return usageError('bench', `--lookups must be a positive integer, got '${values.lookups}'`);
  const proxyCount = values.proxies === undefined ? 0 : Number(values.proxies);
  if (!/^\d+$/.test(values.proxies ?? '0') || proxyCount > 16)
    return usageError('bench', `--proxies must be a number from 0 to 16, got '${values.proxies}'`);
  const repeat = values.repeat === undefined ? 1 : Number(values.repeat);
  if (!/^\d+$/.test(values.repeat ?? '1') || repeat < 1 || repeat > 20)
    return usageError('bench', `--repeat must be a number of runs from 1 to 20, got '${values.repeat}'`);
  if (values.mpi !== undefined) {
    const ranks = Number(values.mpi);
    if (!/^\d+$/.test(values.mpi) || ranks < 1 || ranks > 64)
      return usageError('bench', `--mpi must be a number of proxy ranks from 1 to 64, got '${values.mpi}'`);
    // This same command again, as the application rank of the job (without --mpi).
    const at = args.indexOf('--mpi');
    const rest =
      at >= 0 ? [...args.slice(0, at), ...args.slice(at + 2)] : args.filter((arg) => !arg.startsWith('--mpi='));
    return mpiJob(ranks, [process.argv[1]!, 'bench', ...rest]);
  }
  const size = values.size;
  const grid = values.grid;
  if (values.kernel !== 'as' && values.kernel !== 'c')
    return usageError('bench', `--kernel must be as or c, got '${values.kernel}'`);
  const cKernel = values.kernel === 'c';
  if (cKernel && !existsSync(cKernelSource(app))) {
    return usageError(
      'bench',
      `--kernel c builds ${cKernelSource(app)}, the native peer's source, which is only in a checkout of the repository`,
    );
  }

  const json = values.json === true;
  const say = json ? () => {} : (line: string) => console.log(line);
  const bundle = cKernel
    ? await cachedBundle(cKernelSource(app), {
        label: `offload-${app}-c`,
        name: `${app}-c`,
        includes: [path.join(PEERS_SOURCES, 'proxy_apps.h')],
      })
    : await cachedBundle(app === 'xsbench' ? xsbenchKernelsSource() : rsbenchKernelsSource(), {
        label: `offload-${app}`,
        name: app,
      });

  const local = await startLocalProxies(proxyCount, { announce: !json });
  try {
    const runtime = await Offload.init(
      local && { proxies: local.proxies.map((proxy) => proxy.address), token: local.token },
    );
    try {
      const devices = pickDevices(runtime, values.devices);
      // Before the data is made (tens of seconds for a large run): every device holds all of it.
      if (app === 'xsbench') checkFits(devices, size, grid);
      const initStart = performance.now();
      const making = json ? undefined : progressBar('data');
      const xsData = app === 'xsbench' ? generateXsbench(size, grid, making && ((f) => making.update(f))) : undefined;
      making?.done();
      const rsData = app === 'rsbench' ? generateRsbench(size) : undefined;
      const what = app === 'xsbench' ? `${size}, ${grid} grid` : `${size}, Doppler on`;
      say(
        `${app}  ${what}, ${lookups.toLocaleString('en-US')} lookups; data generated in ${formatDuration(performance.now() - initStart)}`,
      );
      // The peers get as many OpenMP threads as the local devices have compute units.
      const threads =
        devices.filter((d) => d.info.location === 'local').reduce((sum, d) => sum + d.info.computeUnits, 0) ||
        devices[0]!.info.computeUnits;
      const peerArgs = app === 'xsbench' ? [String(lookups), grid, size] : [String(lookups), size];
      const results: LookupResult[] = [];
      const peers = new Map<Peer, PeerResult[]>();
      const peerFailures = new Set<string>();
      for (let round = 1; round <= repeat; round++) {
        const bar = progressBar(repeat === 1 ? 'lookups' : `lookups ${round}/${repeat}`);
        const result = await (
          xsData
            ? runXsbench(runtime, devices, xsData, { bundle: bundle.path, lookups, progress: (f) => bar.update(f) })
            : runRsbench(runtime, devices, { size, lookups, kernelsBundle: bundle.path, data: rsData })
        ).finally(() => bar.done());
        results.push(result);
        if (!values.peers || json) continue;
        for (const peer of PEERS) {
          const ran = runPeer(app, peer, peerArgs, threads);
          if (typeof ran === 'string') peerFailures.add(ran);
          else peers.set(peer, [...(peers.get(peer) ?? []), ran]);
        }
      }
      const rates = results.map((result) => result.lookupsPerSecond);
      const lookupMs = median(results.map((result) => result.lookupSeconds * 1000));
      const checksums = [...new Set(results.map((result) => result.checksum))];
      // Every run must give the published checksum; one that does not makes the whole run INVALID.
      const valid = results.some((result) => result.valid === false) ? false : results[0]!.valid;
      const verdict = valid === undefined ? 'no published value for this lookup count' : valid ? 'VALID' : 'INVALID';
      if (json) {
        const devicesOut = devices.map((device, i) => ({
          id: device.id,
          name: device.info.name,
          lookups: results[0]!.perDevice[i]!,
        }));
        const report = {
          app,
          size,
          grid: app === 'xsbench' ? grid : undefined,
          lookups,
          devices: devicesOut,
          transferMs: results[0]!.transferSeconds * 1000,
          lookupMs,
        };
        console.log(
          JSON.stringify(
            {
              ...report,
              lookupsPerSecond: median(rates),
              runs: rates,
              checksum: checksums[0],
              valid: valid ?? null,
            },
            null,
            2,
          ),
        );
        return valid === false ? 1 : 0;
      }
      const rows = devices.map((device, i) => [
        `  device ${device.id}`,
        device.info.name,
        `${results[0]!.perDevice[i]!.toLocaleString('en-US')} lookups`,
      ]);
      for (const line of table(rows)) console.log(line);
      console.log(
        `transfer ${formatDuration(results[0]!.transferSeconds * 1000)} (moving the data to ${devices.length} device${devices.length === 1 ? '' : 's'})`,
      );
      const runs = repeat === 1 ? '' : `, the median of ${repeat} runs`;
      console.log(`lookups  ${formatDuration(lookupMs)}: ${formatRate(rates)} lookups/s${runs}`);
      console.log(`checksum ${checksums.join(', ')}: ${verdict}`);
      for (const failure of peerFailures) console.log(`peer     ${failure}`);
      if (peers.size > 0) printPeers(rates, checksums[0]!, peers);
      return valid === false ? 1 : 0;
    } finally {
      await runtime.shutdown();
    }
  } finally {
    await local?.stop();
  }
}
