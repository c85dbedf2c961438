/**
 * A remote host device served by a real `offload proxy` child process on 127.0.0.1, against a
 * bare TCP socket to another Node process (bench/raw-tcp.ts): bulk transfers, launch round
 * trips (also with both ends in this thread: the code's cost with no switch between processes),
 * pipelined launches; and a launch-heavy loop over one proxy against two. The CPU an
 * idle proxy takes with clients connected, and one serving 200 launches a second. With `--busy`
 * the transfer and launch rows again beside a CPU hog (bench/hog.ts), their baselines too; the
 * launch round trip against the ping-pong again with both pinned alike, on one core and on two;
 * and ten client processes one after the other under it: is latency the same from run to run?
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Device, Kernel, Runtime } from '../../src/index.js';
import type { RemoteDevice } from '../../src/plugins/remote/device.js';
import { Offload } from '../offload.js';
import { startLocalProxies } from '../../src/cli/local-proxies.js';
import { benchBundle } from '../kernel-bundle.js';
import { measure, withMoreRepetitions, type Plan } from '../measure.js';
import { RawTcpPeer } from '../raw-tcp.js';
import { pollMicros } from '../../src/transport/poll-window.js';
import type { Row, Suite } from '../suite.js';
import { execFile } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SpawnedProxy } from '../../src/proxy/spawn.js';
import { cpuSeconds, pinHogPerCore, pinProcesses, startHog, watchPlacement, type Hog, type Placement } from '../hog.js';
import { availableParallelism } from 'node:os';
import { compactCodec, compactRoundTrip } from '../compact-form.js';
import { oneThreadRoundTrip } from '../one-thread.js';

const MiB = 1024 * 1024;
const COPY_BYTES = 64 * MiB;
const PIPELINED_LAUNCHES = 5000;
/** One small mandelbrot tile per launch: enough work (~0.3 ms) that two proxies can overlap. */
const TILE = [64, 48, 256, -2.2, -1.125, 3 / 64] as const;

// Proxies run as installed (plain node on dist/, built by `npm install`), like the raw TCP
// peer; from source through tsx only when there is no build (tsx's loader costs ~25 % here).
const built = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const cli = existsSync(built)
  ? [built]
  : ['--import', 'tsx', fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url))];

async function transfers(device: Device, raw: RawTcpPeer, plan: Plan): Promise<Row[]> {
  const buffer = await device.alloc(COPY_BYTES);
  const queue = device.queue();
  const src = new Uint8Array(COPY_BYTES).fill(0xa5);
  const dst = new Uint8Array(COPY_BYTES);
  // A repetition of a contender here is one 64 MiB transfer, 15-60 ms: a busy neighbour's few ms
  // move one of nine by 10 % and more, so these take five times the plan's repetitions (8-10 s).
  const transferPlan = withMoreRepetitions(plan, 5);
  const [write, rawWrite, read, rawRead] = await measure(transferPlan, [
    {
      label: 'queue.write(remoteBuffer, 64 MiB) + finish()',
      count: COPY_BYTES,
      run: () => (queue.write(buffer, src), queue.finish()),
    },
    {
      label: '64 MiB over a bare TCP socket to another Node process, in 1 MiB writes, until it acks',
      count: COPY_BYTES,
      run: () => raw.write(src),
    },
    {
      label: 'queue.read(remoteBuffer, 64 MiB) + finish()',
      count: COPY_BYTES,
      run: () => (queue.read(buffer, dst), queue.finish()),
    },
    {
      label: 'the other process streams 64 MiB over a bare TCP socket, copied into a 64 MiB array',
      count: COPY_BYTES,
      run: () => raw.read(dst),
    },
  ]);
  await buffer.free();
  const goal = { op: '>=', value: 0.9 } as const;
  return [
    { name: 'remote write 64 MiB', unit: 'GB/s', offload: write!, baseline: rawWrite!, goal },
    { name: 'remote read 64 MiB', unit: 'GB/s', offload: read!, baseline: rawRead!, goal },
  ];
}

/**
 * queue.fill of 64 MiB against queue.write of 64 MiB to the same remote buffer: a fill is one
 * small frame (the pattern, not the bytes), so what it costs is the proxy filling its memory.
 * The row's name carries the bytes one fill put on the wire (both directions), counted on the
 * client's transport.
 */
export async function fills(device: Device, plan: Plan): Promise<Row> {
  const buffer = await device.alloc(COPY_BYTES);
  const queue = device.queue();
  const src = new Uint8Array(COPY_BYTES).fill(0xa5);
  const stats = (device.plugin as RemoteDevice).connection.transport.stats;
  await queue.fill(buffer, 0).done;
  const before = stats.bytesSent + stats.bytesReceived;
  await queue.fill(buffer, Uint32Array.of(0xa5a5a5a5)).done;
  const wire = stats.bytesSent + stats.bytesReceived - before;
  const [fill, write] = await measure(plan, [
    {
      label: 'queue.fill(remoteBuffer, 4-byte pattern) of 64 MiB + finish()',
      count: COPY_BYTES,
      run: () => (queue.fill(buffer, Uint32Array.of(0xa5a5a5a5)), queue.finish()),
    },
    {
      label: 'queue.write(remoteBuffer, 64 MiB of the same bytes) + finish()',
      count: COPY_BYTES,
      run: () => (queue.write(buffer, src), queue.finish()),
    },
  ]);
  await buffer.free();
  return {
    name: `remote fill 64 MiB (${wire} bytes on the wire) vs remote write 64 MiB`,
    unit: 'GB/s',
    offload: fill!,
    baseline: write!,
    goal: `under 1 KiB on the wire: ${wire < 1024 ? 'met' : 'missed'}`,
  };
}

async function launches(
  device: Device,
  empty: Kernel,
  raw: RawTcpPeer,
  polling: RawTcpPeer,
  plan: Plan,
  roundTripGoal: Row['goal'] = { op: '<=', value: 1.5 },
): Promise<Row[]> {
  const queue = device.queue();
  const rounds = plan.quick ? 300 : 1000;
  // Not timed: V8 optimises both processes' frame paths only after thousands of round trips,
  // while the baseline's one-byte ping is warm at once. Blocks of 1,000 launches from a fresh
  // client and proxy took 288, 211, 170, 86, 59 us, then a steady 38-49 us; and in this suite's
  // process (three proxies, two runtimes, the contenders in turns) the nine timed repetitions
  // after 10,000 untimed launches read 122, 75, 80, 69, 65, 61, 58, 61, 77 us, after 40,000 117,
  // 58, 57, 50, 39, 49, 43, 59, 38 us, beside a ping-pong of 42-52 us (the first repetition of
  // each comes after the collection before timing: the ping-pong's read 67 us).
  for (let i = 0; i < (plan.quick ? 1000 : 40_000); i++) await queue.launch(empty, { teams: 1 }, []).done;
  const [sequential, pingPong, pollingPingPong] = await measure(plan, [
    {
      label: 'await queue.launch(empty, { teams: 1 }, []).done on the remote device, one after the other',
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await queue.launch(empty, { teams: 1 }, []).done;
      },
    },
    {
      label: 'one byte to another Node process over bare TCP and one byte back',
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await raw.ping();
      },
    },
    {
      label: `the same ping-pong with both event loops polling ${pollMicros()} us after each message, as the runtime's do (OFFLOAD_POLL_US)`,
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await polling.ping();
      },
    },
  ]);
  const [pipelined] = await measure(plan, [
    {
      label: `${PIPELINED_LAUNCHES.toLocaleString('en-US')} x queue.launch(empty) on the remote device without awaiting, then finish()`,
      count: PIPELINED_LAUNCHES,
      run: () => {
        for (let i = 0; i < PIPELINED_LAUNCHES; i++) queue.launch(empty, { teams: 1 }, []);
        return queue.finish();
      },
    },
  ]);
  return [
    {
      name: 'remote empty-kernel launch round trip vs TCP ping-pong',
      unit: 'us',
      offload: sequential!,
      baseline: pingPong!,
      goal: roundTripGoal,
    },
    {
      name: 'remote empty-kernel launch round trip vs TCP ping-pong polling as the runtime does',
      unit: 'us',
      offload: sequential!,
      baseline: pollingPingPong!,
      goal: 'none: what our code adds at equal wake-ups',
    },
    {
      name: `remote empty launches pipelined on one queue (${PIPELINED_LAUNCHES.toLocaleString('en-US')})`,
      unit: 'launches/s',
      offload: pipelined!,
      baseline: { ...sequential!, label: 'sequential remote launches (the round-trip loop above)' },
    },
  ];
}

/** The same number of tile launches on one proxy's device, then split over two proxies. */
async function scaling(one: Runtime, two: Runtime, plan: Plan): Promise<Row> {
  const launchesTotal = plan.quick ? 400 : 2000;
  const setups = await Promise.all(
    [one, two].map(async (runtime) => {
      const library = await runtime.register(await benchBundle());
      const devices = runtime.devices.filter((d) => d.info.plugin === 'remote');
      return Promise.all(
        devices.map(async (device) => ({
          queue: device.queue(),
          kernel: await device.kernel(library, 'mandelbrot'),
          out: await device.alloc(TILE[0] * TILE[1] * 4),
        })),
      );
    }),
  );
  const loop = (targets: (typeof setups)[number]) => async () => {
    for (let i = 0; i < launchesTotal; i++) {
      const target = targets[i % targets.length]!;
      target.queue.launch(target.kernel, { teams: 1 }, [...TILE, target.out]);
    }
    await Promise.all(targets.map((target) => target.queue.finish()));
  };
  const [onOne, onTwo] = await measure(plan, [
    {
      label: `${launchesTotal} mandelbrot tile launches, pipelined, on one proxy (1 worker)`,
      count: launchesTotal,
      run: loop(setups[0]!),
    },
    {
      label: `the same launches alternating over two proxies (1 worker each), one queue each`,
      count: launchesTotal,
      run: loop(setups[1]!),
    },
  ]);
  return {
    name: 'launch-heavy loop: two proxies vs one',
    unit: 'launches/s',
    offload: onTwo!,
    baseline: onOne!,
    goal: { op: '~', value: 2, note: 'the proxy count' },
  };
}

/** How long each CPU figure of the proxy is watched, in seconds (/proc counts in 10 ms ticks). */
const CPU_WINDOW_S = 6;
/** The launch rate of the proxy-CPU row. */
const LAUNCHES_PER_S = 200;

/** The CPU the proxy process takes, idle with clients connected and serving LAUNCHES_PER_S launches a second. */
async function proxyCpu(proxy: SpawnedProxy, device: Device, empty: Kernel): Promise<Row[]> {
  const pid = proxy.child.pid;
  if (pid === undefined || cpuSeconds(pid) === undefined) return [];
  const watch = async (during: () => Promise<void>): Promise<{ cpu: number; wall: number }> => {
    const cpu = cpuSeconds(pid)!;
    const start = performance.now();
    await during();
    return { cpu: cpuSeconds(pid)! - cpu, wall: (performance.now() - start) / 1000 };
  };
  // Whatever the launches before left running settles first.
  await sleep(1000);
  const idle = await watch(() => sleep(CPU_WINDOW_S * 1000));
  const queue = device.queue();
  const launches = LAUNCHES_PER_S * CPU_WINDOW_S;
  const serving = await watch(async () => {
    const start = performance.now();
    for (let i = 0; i < launches; i++) {
      await queue.launch(empty, { teams: 1 }, []).done;
      const next = start + ((i + 1) * 1000) / LAUNCHES_PER_S;
      const wait = next - performance.now();
      if (wait > 0) await sleep(wait);
    }
  });
  const cpuSeries = (label: string, figure: { cpu: number; wall: number }) => ({
    label,
    count: figure.wall,
    seconds: [figure.cpu],
  });
  const percent = (figure: { cpu: number; wall: number }) => (figure.cpu / figure.wall) * 100;
  return [
    {
      name: 'idle proxy with clients connected: its CPU',
      unit: '% of a core',
      offload: cpuSeries(
        `the proxy process's user + system time (/proc) over ${CPU_WINDOW_S} s, a runtime connected (its heartbeats), nothing sent`,
        idle,
      ),
      goal: `under 1 %: ${percent(idle) < 1 ? 'met' : 'missed'}`,
    },
    {
      name: `proxy serving ${LAUNCHES_PER_S} launches a second: its CPU`,
      unit: '% of a core',
      offload: cpuSeries(
        `the proxy process's user + system time (/proc) over ${launches} empty launches, one every ${1000 / LAUNCHES_PER_S} ms (${(launches / serving.wall).toFixed(0)}/s reached)`,
        serving,
      ),
      goal: `under 10 %: ${percent(serving) < 10 ? 'met' : 'missed'}`,
    },
  ];
}

/** Rows measured beside the hog: named so, their labels too. */
function underHog(rows: Row[], hog: Hog): Row[] {
  const note = ` (under the hog: ${hog.pids.length} busy processes)`;
  const mark = <T extends { label: string }>(series: T): T => ({ ...series, label: `${series.label}${note}` });
  return rows.map((row) => ({
    ...row,
    name: `${row.name}${note}`,
    offload: mark(row.offload),
    baseline: row.baseline && mark(row.baseline),
  }));
}

/** Where the pinned rows put this process (the client) and its servers (the proxy, the raw TCP peer). */
const PLACEMENTS = [
  { name: 'client and servers pinned to one core', client: '0', servers: '0' },
  { name: 'the client pinned to one core, its servers to the other', client: '0', servers: '1' },
] as const;
/** Untimed round trips after each move, so that both sides' polling sees the new placement. */
const SETTLE_ROUNDS = 3000;

/**
 * The launch round trip against the TCP ping-pong with both pinned the same way, beside the hog
 * pinned one busy process per core: on one core and on two. Unpinned, the proxy and the raw
 * peer are placed apart by chance, and the row then compares placements (bench/hog.ts).
 */
async function pinnedLaunches(
  device: Device,
  empty: Kernel,
  raw: RawTcpPeer,
  proxy: SpawnedProxy,
  hog: Hog,
  plan: Plan,
  progress: (line: string) => void,
): Promise<Row[]> {
  const servers = [proxy.child.pid, raw.pid].filter((pid): pid is number => pid !== undefined);
  const everyCore = `0-${availableParallelism() - 1}`;
  if (servers.length < 2 || !pinHogPerCore(hog)) {
    progress('remote: no pinned rows (they need two cores and taskset)');
    return [];
  }
  const queue = device.queue();
  const rounds = plan.quick ? 300 : 1000;
  const rows: Row[] = [];
  try {
    for (const placement of PLACEMENTS) {
      if (!pinProcesses([process.pid], placement.client) || !pinProcesses(servers, placement.servers)) {
        progress(`remote: no row for ${placement.name}: taskset failed`);
        continue;
      }
      progress(`remote: launch round trips, ${placement.name}`);
      for (let i = 0; i < SETTLE_ROUNDS; i++) await queue.launch(empty, { teams: 1 }, []).done;
      for (let i = 0; i < SETTLE_ROUNDS; i++) await raw.ping();
      const [launch, ping] = await measure(plan, [
        {
          label: `await queue.launch(empty, { teams: 1 }, []).done on the remote device, ${placement.name}`,
          count: rounds,
          run: async () => {
            for (let i = 0; i < rounds; i++) await queue.launch(empty, { teams: 1 }, []).done;
          },
        },
        {
          label: `one byte to another Node process over bare TCP and one byte back, ${placement.name}`,
          count: rounds,
          run: async () => {
            for (let i = 0; i < rounds; i++) await raw.ping();
          },
        },
      ]);
      rows.push({
        name: `remote empty-kernel launch round trip vs TCP ping-pong, ${placement.name}`,
        unit: 'us',
        offload: launch!,
        baseline: ping!,
        goal: { op: '<=', value: 1.5 },
      });
    }
  } finally {
    pinProcesses([process.pid, ...servers, ...hog.pids], everyCore);
  }
  return rows;
}

/** What one client process measured, and where it ran. */
interface ClientRun {
  /** Its median launch round trip in us. */
  rttUs: number;
  /** Where it ran beside its proxy and the hog (undefined: not watched). */
  placement: Placement | undefined;
}

/**
 * Runs bench/remote-client.ts --launches-only against the proxy `proxy`, watching where the
 * client runs beside it; pinned to `pin` (a taskset list) when given.
 */
function clientRun(proxy: SpawnedProxy, token: string, hog: Hog, pin?: string): Promise<ClientRun> {
  const client = fileURLToPath(new URL('../remote-client.ts', import.meta.url));
  return new Promise((resolve, reject) => {
    let watch: { stop(): Placement | undefined } | undefined;
    const child = execFile(
      process.execPath,
      ['--import', 'tsx', client, '--launches-only'],
      {
        encoding: 'utf8',
        timeout: 300_000,
        env: { ...process.env, OFFLOAD_PROXIES: proxy.address, OFFLOAD_TOKEN: token, OFFLOAD_WEBGPU: 'off' },
      },
      (error, stdout, stderr) => {
        const placement = watch?.stop();
        const line = stdout.split('\n').find((l) => l.startsWith('{'));
        if (error || !line)
          reject(new Error(`the remote client failed: ${error?.message ?? ''}\n${stdout}\n${stderr}`));
        else resolve({ rttUs: (JSON.parse(line) as { rtt_us: number }).rtt_us, placement });
      },
    );
    if (child.pid === undefined) return;
    // Its threads inherit the main thread's mask: pinned before it starts any worker of its own.
    if (pin !== undefined) pinProcesses([child.pid], pin);
    if (proxy.child.pid !== undefined) watch = watchPlacement(child.pid, proxy.child.pid, hog.pids);
  });
}

const percent = (share: number): string => `${Math.round(share * 100)} %`;

/** A run's round trip and where it ran: on its proxy's core, and with the busy processes sharing one core, for what share of the run. */
function described({ rttUs, placement }: ClientRun): string {
  if (!placement) return rttUs.toFixed(1);
  return `${rttUs.toFixed(1)} (on the proxy's core ${percent(placement.together)}, the busy processes on one core ${percent(placement.hogTogether)})`;
}

/** A row of client processes one after the other: their median round trip against their fastest. */
function runsRow(name: string, label: string, runs: readonly ClientRun[], goal: Row['goal']): Row {
  const rtts = runs.map((run) => run.rttUs);
  return {
    name,
    unit: 'us',
    offload: {
      label: `${label}, each run's median of 7 x 1,000 awaited empty launches after 10,000 untimed (bench/remote-client.ts --launches-only): ${runs.map(described).join(', ')} us`,
      count: 1,
      seconds: rtts.map((rtt) => rtt / 1e6),
    },
    baseline: { label: 'the fastest of those runs', count: 1, seconds: [Math.min(...rtts) / 1e6] },
    goal,
  };
}

/**
 * Ten client processes one after the other, each its own median round trip: their median against
 * their fastest. First with everything unpinned; then with the hog pinned one busy process per
 * core (the client and the proxy still where the scheduler puts them), the row the goal is on;
 * then in each of two placements, pinned there (the proxy on core 0, the client on core 0 or on
 * core 1): whether runs in one placement agree. With nothing pinned the scheduler moves the
 * busy processes about too, and for stretches puts both on one core, leaving the other to the
 * client and its proxy: the runs that had that are the fastest (each run says its share), so
 * that row measures where the busy processes went, not the runtime.
 */
async function separateRuns(proxy: SpawnedProxy, token: string, plan: Plan, hog: Hog): Promise<Row[]> {
  const count = plan.quick ? 3 : 10;
  const busy = `(under the hog: ${hog.pids.length} busy processes)`;
  const tenRuns = async (pin?: string): Promise<ClientRun[]> => {
    const runs: ClientRun[] = [];
    for (let i = 0; i < count; i++) runs.push(await clientRun(proxy, token, hog, pin));
    return runs;
  };
  const rows = [
    runsRow(
      `remote launch round trip, ${count} client processes one after the other, nothing pinned: median vs fastest ${busy}`,
      'the busy processes unpinned too',
      await tenRuns(),
      'none: the busy processes may share a core, and the runs that had the other core free are the fastest (the next row pins them one per core)',
    ),
  ];
  const everyCore = `0-${availableParallelism() - 1}`;
  const proxyPid = proxy.child.pid;
  if (proxyPid === undefined || !pinHogPerCore(hog)) return rows;
  try {
    rows.push(
      runsRow(
        `remote launch round trip, ${count} client processes one after the other: median vs fastest ${busy}`,
        'a busy process pinned to each core, the client and the proxy unpinned',
        await tenRuns(),
        { op: '<=', value: 1.5, note: 'no bimodal latency' },
      ),
    );
    if (!pinProcesses([proxyPid], '0')) return rows;
    for (const [where, core] of [
      ["on the proxy's core", '0'],
      ['on the other core', '1'],
    ] as const) {
      rows.push(
        runsRow(
          `remote launch round trip, ${count} client processes one after the other, each pinned ${where}: median vs fastest ${busy}`,
          `a busy process pinned to each core, the proxy to core 0, each client to core ${core}`,
          await tenRuns(core),
          { op: '<=', value: 1.5, note: 'runs in one placement agree' },
        ),
      );
    }
  } finally {
    pinProcesses([proxyPid, ...hog.pids], everyCore);
  }
  return rows;
}

export const remoteSuite: Suite = {
  name: 'remote',
  description: 'a remote host device behind a real proxy process against bare TCP between two Node processes',
  async run(plan, progress) {
    progress(
      `remote: proxies run ${cli.length === 1 ? 'dist/cli/main.js (run npm run build after changing src/)' : 'src/cli/main.ts through tsx (no dist/ build)'}`,
    );
    // One worker each: on a 2-vCPU machine, two proxies then use both cores between them.
    const local = (await startLocalProxies(3, {
      cli,
      env: { ...process.env, OFFLOAD_HOST_THREADS: '1', OFFLOAD_HOST_MEMORY: '256M', OFFLOAD_PROXIES: '' },
      announce: false,
    }))!;
    const { proxies, token } = local;
    const raw = await RawTcpPeer.start();
    const polling = await RawTcpPeer.start({ pollUs: pollMicros() });
    const runtimes: Runtime[] = [];
    try {
      const single = await Offload.init({ host: false, proxies: [proxies[0]!.address], token });
      runtimes.push(single);
      const pair = await Offload.init({ host: false, proxies: [proxies[1]!.address, proxies[2]!.address], token });
      runtimes.push(pair);
      const device = single.devices[0]!;
      const library = await single.register(await benchBundle());
      const empty = await device.kernel(library, 'empty');
      progress('remote: write/read of 64 MiB');
      const copyRows = await transfers(device, raw, plan);
      progress('remote: fill of 64 MiB');
      copyRows.push(await fills(device, plan));
      progress('remote: launch round trips and pipelined launches');
      const launchRows = await launches(device, empty, raw, polling, plan);
      progress('remote: the launch round trip with both ends in this thread');
      launchRows.push(await oneThreadRoundTrip(plan));
      progress('remote: launch-heavy loop over one and two proxies');
      const rows = [...copyRows, ...launchRows, await scaling(single, pair, plan)];
      progress('remote: launch round trips with the compact launch frames and without them');
      rows.push(await compactRoundTrip(device, empty, proxies[0]!.address, token, plan));
      rows.push(await compactCodec(plan));
      progress(`remote: the proxy's CPU, idle with clients connected and at ${LAUNCHES_PER_S} launches/s`);
      rows.push(...(await proxyCpu(proxies[0]!, device, empty)));
      if (plan.busy) {
        const hog = await startHog();
        progress(`remote: under a CPU hog (pids ${hog.pids.join(', ')})`);
        try {
          rows.push(...underHog(await transfers(device, raw, plan), hog));
          const unpinned =
            'none: the proxy and the raw peer where the scheduler put them, apart by chance (the pinned rows below compare like with like)';
          rows.push(...underHog(await launches(device, empty, raw, polling, plan, unpinned), hog));
          rows.push(...underHog(await pinnedLaunches(device, empty, raw, proxies[0]!, hog, plan, progress), hog));
          progress('remote: client processes one after the other under the hog');
          rows.push(...(await separateRuns(proxies[0]!, token, plan, hog)));
        } finally {
          await hog.stop();
        }
      }
      return rows;
    } finally {
      for (const runtime of runtimes) await runtime.shutdown();
      await raw.close();
      await polling.close();
      await local.stop();
    }
  },
};
