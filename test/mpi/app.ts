/**
 * The application rank of the MPI tests (test/mpi.test.ts), run under mpirun beside
 * `offload proxy --mpi` ranks. argv[2] picks the scenario:
 *   conformance  the conformance suite on the first MPI proxy's device (node:test, TAP on stdout)
 *   p2p          a copy between the devices of two proxy ranks; prints how many bytes the
 *                application's own channels carried meanwhile
 *   shared       several application ranks on one proxy: each writes its own pattern into its
 *                buffer id 1 and reads it back
 *   fail         uses a proxy, then exits with status 3
 *   killed-proxy kills proxy rank mpi:0 (SIGKILL) while using it and mpi:1; prints how the
 *                program saw it (run under mpirun --enable-recovery)
 *   killed-app   uses a proxy, then kills itself (SIGKILL): no bye for the proxies
 *   stopped-proxy stops proxy rank mpi:0 (SIGSTOP) while using it and mpi:1, then ends: prints
 *                the stopped rank's pid and those of the ranks that must still end by themselves
 *   huge-pages   writes one 16 MiB array again and again (changed between writes) and reads it
 *                back each time; prints whether every byte came back and this rank's huge pages
 *   pauses       launches after pauses long enough for both ranks to go quiet (their progress
 *                threads, or their 1 ms timers, must notice), and waits for a kernel long
 *                enough for this rank to go quiet; prints the results, this rank's progress mode
 *                and how often its progress thread woke it
 *   pause-storm  two queues launch hundreds of times each, with random pauses around the time
 *                after which a rank goes quiet (2 ms), so that arming, disarming and wakes race;
 *                prints whether every launch ran once and how often the progress thread woke it
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { Offload, type Buffer as DeviceBuffer, type Device } from '../../src/index.js';
import type { RemoteDevice } from '../../src/plugins/remote/device.js';
import { MpiHub } from '../../src/transport/mpi/hub.js';
import { conformance } from '../conformance/suite.js';
import { fixtureBundle } from '../helpers/fixtures.js';

const scenario = process.argv[2];

/** The process id of rank `rank` of this job, found through /proc (Linux): its OMPI environment. */
function rankPid(rank: number): number {
  const job = `OMPI_MCA_ess_base_jobid=${process.env.OMPI_MCA_ess_base_jobid}`;
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      if (env.includes(job) && env.includes(`OMPI_COMM_WORLD_RANK=${rank}`)) return Number(pid);
    } catch {
      // gone, or not ours to read
    }
  }
  throw new Error(`no process of rank ${rank} of this job`);
}
const MiB = 1024 * 1024;

/** How a 64-byte write to `buffer` ends: 'completed', or the code of its error. */
function writeOutcome(device: Device, buffer: DeviceBuffer): Promise<string> {
  return device
    .queue()
    .write(buffer, new Uint8Array(64))
    .done.then(
      () => 'completed',
      (error: { code?: string }) => String(error.code),
    );
}

if (scenario === 'conformance') {
  conformance('remote device over MPI', async () => {
    const runtime = await Offload.init({ host: { threads: 1, memoryBytes: 16 * MiB } });
    const device = runtime.devices.find((d) => d.info.location.startsWith('mpi:'))!;
    return { runtime, device, peer: runtime.devices[0], bundle: await fixtureBundle() };
  });
} else if (scenario === 'p2p') {
  const runtime = await Offload.init({ host: false });
  const [a, b] = runtime.devices;
  const bytes = 16 * MiB;
  const data = new Uint8Array(bytes).map((_, i) => (i * 7) & 0xff);
  const src = await a!.alloc(bytes);
  const dst = await b!.alloc(bytes);
  await a!.queue().write(src, data).done;
  const channels = [a!, b!].map((d) => (d.plugin as RemoteDevice).connection.transport.stats);
  const before = channels.reduce((sum, s) => sum + s.bytesSent + s.bytesReceived, 0);
  await a!.queue().copy(dst, src).done;
  const carried = channels.reduce((sum, s) => sum + s.bytesSent + s.bytesReceived, 0) - before;
  const back = new Uint8Array(bytes);
  await b!.queue().read(dst, back).done;
  assert.ok(Buffer.from(back).equals(Buffer.from(data)), 'the copy arrived intact');
  console.log(JSON.stringify({ locations: runtime.devices.map((d) => d.info.location), carried }));
  await runtime.shutdown();
} else if (scenario === 'shared') {
  const runtime = await Offload.init({ host: false });
  const rank = Number(process.env.OMPI_COMM_WORLD_RANK);
  const device = runtime.devices[0]!;
  const buffer = await device.alloc(MiB);
  const mine = new Uint8Array(MiB).fill(rank + 1);
  const q = device.queue();
  for (let round = 0; round < 20; round++) {
    q.write(buffer, mine);
    const back = new Uint8Array(MiB);
    q.read(buffer, back);
    await q.finish();
    assert.ok(
      back.every((v) => v === rank + 1),
      `rank ${rank} read another client's bytes`,
    );
  }
  console.log(JSON.stringify({ rank, ok: true, devices: runtime.devices.length }));
  await runtime.shutdown();
} else if (scenario === 'fail') {
  // Uses a proxy, then fails: the job must end with a non-zero status.
  const runtime = await Offload.init({ host: false });
  await runtime.devices[0]!.alloc(64);
  process.exit(3);
} else if (scenario === 'killed-proxy') {
  const runtime = await Offload.init({ host: false });
  const [a, b] = runtime.devices;
  const [onA, onB] = await Promise.all([a!.alloc(64), b!.alloc(64)]);
  process.kill(rankPid(0), 'SIGKILL');
  const started = Date.now();
  // Pending and later work on the killed rank's device fails; the other device goes on.
  const lost = await writeOutcome(a!, onA);
  const seconds = (Date.now() - started) / 1000;
  const out = new Uint8Array(64);
  const q = b!.queue();
  q.write(onB, new Uint8Array(64).fill(7));
  q.read(onB, out);
  await q.finish();
  const later = await a!.alloc(8).then(
    () => 'allocated',
    (error: { code?: string }) => String(error.code),
  );
  console.log(JSON.stringify({ lost, seconds, later, other: out.every((v) => v === 7) }));
  await runtime.shutdown();
} else if (scenario === 'stopped-proxy') {
  const runtime = await Offload.init({ host: false });
  const [a, b] = runtime.devices;
  const onA = await a!.alloc(64);
  const stopped = rankPid(0);
  process.kill(stopped, 'SIGSTOP');
  const lost = await writeOutcome(a!, onA);
  await b!.alloc(8);
  console.log(JSON.stringify({ lost, stopped, survivors: [process.pid, rankPid(1)] }));
  await runtime.shutdown();
} else if (scenario === 'killed-app') {
  const runtime = await Offload.init({ host: false });
  await runtime.devices[0]!.alloc(64);
  console.log(JSON.stringify({ killing: process.pid }));
  process.kill(process.pid, 'SIGKILL');
} else if (scenario === 'huge-pages') {
  // Sent again and again, the array's pages are collapsed into huge ones at its third write
  // (OFFLOAD_MPI_HUGE_PAGES): every write must still carry what the array holds at that moment.
  const runtime = await Offload.init({ host: false });
  const device = runtime.devices[0]!;
  const bytes = 16 * MiB;
  const data = new Uint8Array(bytes);
  const back = new Uint8Array(bytes);
  const buffer = await device.alloc(bytes);
  const q = device.queue();
  let intact = true;
  for (let round = 0; round < 4; round++) {
    for (let i = 0; i < bytes; i += 4096) data.fill((round * 31 + i / 4096) & 0xff, i, i + 4096);
    data[bytes - 1] = round;
    await q.write(buffer, data).done;
    await q.read(buffer, back).done;
    intact &&= Buffer.from(back).equals(Buffer.from(data));
  }
  const rollup = readFileSync('/proc/self/smaps_rollup', 'utf8');
  const hugeKiB = Number(/^AnonHugePages:\s+(\d+) kB/m.exec(rollup)?.[1] ?? 0);
  console.log(JSON.stringify({ intact, hugeKiB }));
  await runtime.shutdown();
} else if (scenario === 'pauses') {
  const runtime = await Offload.init({ host: false });
  const device = runtime.devices[0]!;
  const library = await runtime.register(await fixtureBundle());
  const [add, busy] = [await device.kernel(library, 'add_i32'), await device.kernel(library, 'busy')];
  const data = await device.alloc(64);
  const q = device.queue();
  await q.write(data, new Int32Array(16)).done;
  const pausesMs = [0, 3, 10, 30, 150, 1, 0, 20];
  for (const ms of pausesMs) {
    await new Promise((resolve) => setTimeout(resolve, ms));
    await q.launch(add, { teams: 1 }, [16, 1, data]).done;
  }
  const counts = new Int32Array(16);
  await q.read(data, counts).done;
  // A kernel of tens of milliseconds: this rank goes quiet while it runs, and its answer must wake it.
  const hub = MpiHub.current()!;
  const wakesBefore = hub.progressWakes;
  await q.launch(busy, { teams: 1 }, [40_000_000, data]).done;
  console.log(
    JSON.stringify({
      counts: [...new Set(counts)],
      expected: pausesMs.length,
      progress: hub.progress,
      wokenByAnswer: hub.progressWakes - wakesBefore,
    }),
  );
  await runtime.shutdown();
} else if (scenario === 'round-trips') {
  // Launches awaited one after another: each reply is expected (expectSoon), and the rank polls
  // MPI for it while it comes, unless OFFLOAD_POLL_US=0.
  const runtime = await Offload.init({ host: false });
  const device = runtime.devices[0]!;
  const add = await device.kernel(await runtime.register(await fixtureBundle()), 'add_i32');
  const data = await device.alloc(64);
  const q = device.queue();
  await q.write(data, new Int32Array(16)).done;
  const hub = MpiHub.current()!;
  const before = hub.arrivalsExpected;
  const launches = 300;
  for (let i = 0; i < launches; i++) await q.launch(add, { teams: 1 }, [16, 1, data]).done;
  const counts = new Int32Array(16);
  await q.read(data, counts).done;
  console.log(
    JSON.stringify({
      counts: [...new Set(counts)],
      expected: launches,
      arrivalsExpected: hub.arrivalsExpected - before,
    }),
  );
  await runtime.shutdown();
} else if (scenario === 'pause-storm') {
  const runtime = await Offload.init({ host: false });
  const device = runtime.devices[0]!;
  const add = await device.kernel(await runtime.register(await fixtureBundle()), 'add_i32');
  const launches = 250;
  const pause = (): Promise<void> | undefined => {
    const kind = Math.random();
    if (kind < 0.25) return undefined; // back to back
    if (kind < 0.5) return new Promise((resolve) => setImmediate(resolve));
    return new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * 5)));
  };
  const counts = await Promise.all(
    [0, 1].map(async () => {
      const data = await device.alloc(64);
      const q = device.queue();
      await q.write(data, new Int32Array(16)).done;
      for (let i = 0; i < launches; i++) {
        await pause();
        const event = q.launch(add, { teams: 1 }, [16, 1, data]);
        if (Math.random() < 0.5) await event.done;
      }
      const back = new Int32Array(16);
      await q.read(data, back).done;
      return [...new Set(back)];
    }),
  );
  console.log(JSON.stringify({ counts, expected: launches, wakes: MpiHub.current()!.progressWakes }));
  await runtime.shutdown();
} else {
  console.error(`unknown scenario '${scenario}'`);
  process.exitCode = 2;
}
