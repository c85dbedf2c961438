/**
 * `runtime.spread` over real `offload proxy` child processes on 127.0.0.1: one range of equal
 * teams over a proxy with 1 worker and one with 2, against the ideal time (the work over the two
 * proxies' summed throughput, each proxy's throughput measured alone, the same teams, in the same
 * repetition); the same over two proxies of 1 worker (on a 2-vCPU machine the 1 + 2 pair asks
 * for 3 cores); and XSBench's lookups spread over 1 and 2 proxies of one worker each (strong
 * scaling).
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Device, Runtime } from '../../src/index.js';
import { cachedBundle } from '../../src/cli/kernel-cache.js';
import { spawnProxy, type SpawnedProxy } from '../../src/proxy/spawn.js';
import { benchBundle } from '../kernel-bundle.js';
import { measure, type Plan, type Series } from '../measure.js';
import { map, Offload, spread, xsbench } from '../offload.js';
import type { Row, Suite } from '../suite.js';

const built = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const cli = existsSync(built)
  ? [built]
  : ['--import', 'tsx', fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url))];

/** Steps of the recurrence a team of `team_work` runs: about 0.3 ms on one core of the 2-vCPU machine. */
const ITERATIONS = 200_000;

async function equalTeams(
  runtime: Runtime,
  slow: Device,
  fast: Device,
  other: Device,
  plan: Plan,
  progress: (line: string) => void,
): Promise<Row[]> {
  const teams = plan.quick ? 1024 : 4096;
  const library = await runtime.register(await benchBundle());
  const out = new Float32Array(teams);
  const run = (devices: Device[]) => async () => {
    await runtime.spread(devices, { library, name: 'team_work' }, { teams }, [
      ITERATIONS,
      spread.part(map.from(out), 1),
    ]);
  };
  const half = teams / 2;
  // The split a program makes by hand: half the teams to each proxy, at once, one queue each.
  const halves = async (): Promise<void> => {
    await Promise.all(
      [slow, fast].map((device, i) =>
        runtime.spread([device], { library, name: 'team_work' }, { teams: half }, [
          ITERATIONS,
          spread.part(map.from(out.subarray(i * half, (i + 1) * half)), 1),
        ]),
      ),
    );
  };
  const splits: string[] = [];
  const spreadBoth = async (): Promise<void> => {
    const result = await runtime.spread([slow, fast], { library, name: 'team_work' }, { teams }, [
      ITERATIONS,
      spread.part(map.from(out), 1),
    ]);
    splits.push(
      `${(result.seconds * 1000).toFixed(0)} ms: ` +
        result.shares
          .map(
            (s) =>
              `${(s.fraction * 100).toFixed(0)}% in ${s.chunks} chunks, busy ${(s.busySeconds * 1000).toFixed(0)} ms`,
          )
          .join(' | '),
    );
  };
  const [alone1, alone2, both, split, aloneOther, pair] = await measure(plan, [
    { label: `${teams} equal teams on the proxy with 1 worker alone`, count: teams, run: run([slow]) },
    { label: `${teams} equal teams on the proxy with 2 workers alone`, count: teams, run: run([fast]) },
    { label: `${teams} equal teams spread over both proxies`, count: teams, run: spreadBoth },
    { label: 'the same teams split in halves by hand, one to each proxy, at once', count: teams, run: halves },
    { label: `${teams} equal teams on the other proxy with 1 worker alone`, count: teams, run: run([other]) },
    { label: `${teams} equal teams spread over the two proxies of 1 worker`, count: teams, run: run([slow, other]) },
  ]);
  progress(`spread: each spread over both (1 worker | 2 workers): ${splits.join('; ')}`);
  // The ideal of each repetition: the work over the sum of the throughputs measured alone in it.
  const ideal: Series = {
    label: 'ideal: the teams over the summed throughput of the two proxies, each measured alone in the same repetition',
    count: teams,
    seconds: alone1!.seconds.map((one, i) => 1 / (1 / one + 1 / alone2!.seconds[i]!)),
  };
  // On a 2-vCPU machine the 1- and 2-worker pair asks for 3 cores; two proxies of 1 worker fit.
  const idealPair: Series = {
    label:
      'ideal: the teams over the summed throughput of the two 1-worker proxies, each measured alone in the same repetition',
    count: teams,
    seconds: alone1!.seconds.map((one, i) => 1 / (1 / one + 1 / aloneOther!.seconds[i]!)),
  };
  await library.unregister();
  return [
    {
      name: 'proxy with 2 workers vs 1 (what the machine gives)',
      unit: 'teams/s',
      offload: alone2!,
      baseline: alone1!,
      goal: { op: '~', value: 2, note: 'the worker count, if two cores were free' },
    },
    {
      name: 'spread over proxies of 1 and 2 workers vs the ideal',
      unit: 'teams/s',
      offload: both!,
      baseline: ideal,
      goal: { op: '>=', value: 0.87, note: 'within 15 % of the ideal time' },
    },
    {
      name: 'spread over two proxies of 1 worker each vs the ideal (2 cores asked of 2)',
      unit: 'teams/s',
      offload: pair!,
      baseline: idealPair,
      goal: { op: '>=', value: 0.87, note: 'within 15 % of the ideal time' },
    },
    {
      name: 'spread over proxies of 1 and 2 workers vs halves by hand',
      unit: 'teams/s',
      offload: both!,
      baseline: split!,
      goal: { op: '>=', value: 1, note: 'measured balance beats an equal split' },
    },
  ];
}

async function xsbenchScaling(runtime: Runtime, one: Device, two: Device, plan: Plan): Promise<Row> {
  const lookups = plan.quick ? 400_000 : 2_000_000;
  const data = xsbench.generateXsbench('small', 'hash');
  const bundle = (await cachedBundle(xsbench.xsbenchKernelsSource(), { label: 'offload-xsbench', name: 'xsbench' }))
    .path;
  const series = (label: string): Series => ({ label, count: lookups, seconds: [] });
  const single = series(`${lookups.toLocaleString('en-US')} XSBench lookups (hash) on one proxy (1 worker)`);
  const pair = series('the same lookups spread over two proxies (1 worker each)');
  const lookupSeconds = async (devices: Device[]): Promise<number> => {
    const result = await xsbench.runXsbench(runtime, devices, data, { bundle, lookups });
    if (result.valid === false) throw new Error(`XSBench's checksum ${result.checksum} is not the expected one`);
    return result.lookupSeconds;
  };
  for (let i = 0; i < plan.warmup; i++) {
    await lookupSeconds([one]);
    await lookupSeconds([one, two]);
  }
  // A repetition is seconds long: at most 5, alternating, so a busy minute hits both alike.
  for (let r = 0; r < Math.min(plan.repetitions, 5); r++) {
    single.seconds.push(await lookupSeconds([one]));
    pair.seconds.push(await lookupSeconds([one, two]));
  }
  return {
    name: 'XSBench strong scaling through spread, 2 proxies vs 1',
    unit: 'lookups/s',
    offload: pair,
    baseline: single,
    goal: { op: '>=', value: 1.8 },
  };
}

export const spreadSuite: Suite = {
  name: 'spread',
  description: 'runtime.spread over real proxy processes: balance against the ideal time, and XSBench strong scaling',
  async run(plan, progress) {
    const token = randomBytes(24).toString('hex');
    const start = (threads: number): Promise<SpawnedProxy> =>
      spawnProxy({
        cli,
        token,
        inheritStderr: true,
        env: {
          ...process.env,
          OFFLOAD_HOST_THREADS: String(threads),
          OFFLOAD_HOST_MEMORY: '512M',
          OFFLOAD_PROXIES: '',
          OFFLOAD_WEBGPU: 'off',
        },
      });
    const proxies = await Promise.all([start(1), start(2), start(1)]);
    let runtime: Runtime | undefined;
    try {
      runtime = await Offload.init({ host: false, webgpu: false, proxies: proxies.map((p) => p.address), token });
      const [slow, fast, other] = runtime.devices;
      progress('spread: equal teams over proxies of 1 and 2 workers');
      const rows = await equalTeams(runtime, slow!, fast!, other!, plan, progress);
      progress('spread: XSBench over 1 and 2 proxies of 1 worker');
      rows.push(await xsbenchScaling(runtime, slow!, other!, plan));
      return rows;
    } finally {
      await runtime?.shutdown();
      await Promise.all(proxies.map((proxy) => proxy.stop()));
    }
  },
};
