/**
 * Measures the first remote device the runtime finds (an MPI proxy rank under mpirun, or
 * OFFLOAD_PROXIES over TCP): the round trip of an empty launch, the same after a 10 ms pause
 * (both sides quiet: what wakes them is measured), and a 64 MiB write, medians. `--pauses-only`
 * measures the pauses alone, `--launches-only` the round trips alone (a run of ten of them, each
 * its own process, shows whether latency is bimodal: bench --busy). Prints one JSON line. Used by the `mpi` bench suite, on both
 * transports, in the same run.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Device, Kernel, Queue } from '../src/index.js';
import { Offload } from './offload.js';
import { benchBundle } from './kernel-bundle.js';

const ROUNDS = 1000;
const REPS = 7;
const WARM_UP_LAUNCHES = 10_000;
const BYTES = 64 * 1024 * 1024;
const PAUSES = 60;
const PAUSE_MS = 10;
const pausesOnly = process.argv.includes('--pauses-only');
const launchesOnly = process.argv.includes('--launches-only');

const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;

/**
 * Launches after pauses, last: measured before the round trips, they slowed those by a third
 * (19 -> 25-33 us over MPI, with the progress thread or without it, and over TCP too).
 */
async function launchesAfterPauses(launch: () => Promise<void>): Promise<number> {
  const afterPause: number[] = [];
  for (let i = 0; i < PAUSES; i++) {
    await sleep(PAUSE_MS);
    const start = performance.now();
    await launch();
    afterPause.push((performance.now() - start) * 1000);
  }
  return median(afterPause);
}

const runtime = await Offload.init({ host: false });
try {
  const device = runtime.devices.find((d) => d.info.plugin === 'remote');
  if (!device) throw new Error('no remote device');
  const empty = await device.kernel(await runtime.register(await benchBundle()), 'empty');
  const queue = device.queue();
  // Warm-up, not timed: V8 needs several thousand round trips to optimise both sides' paths
  // (the first thousand launches take 120-190 us over MPI, the eighth 20 us).
  for (let i = 0; i < WARM_UP_LAUNCHES; i++) await queue.launch(empty, { teams: 1 }, []).done;
  if (pausesOnly) {
    const pause = await launchesAfterPauses(() => queue.launch(empty, { teams: 1 }, []).done);
    console.log(JSON.stringify({ location: device.info.location, pause_rtt_us: pause }));
  } else {
    const rtts: number[] = [];
    for (let rep = 0; rep < REPS; rep++) {
      const start = performance.now();
      for (let i = 0; i < ROUNDS; i++) await queue.launch(empty, { teams: 1 }, []).done;
      rtts.push(((performance.now() - start) / ROUNDS) * 1000);
    }
    if (launchesOnly) {
      console.log(JSON.stringify({ location: device.info.location, rtt_us: median(rtts) }));
    } else {
      await writesAndPauses(device, queue, empty, rtts);
    }
  }
} finally {
  await runtime.shutdown();
}

/** The 64 MiB writes and the launches after pauses; prints every figure with the round trips `rtts`. */
async function writesAndPauses(device: Device, queue: Queue, empty: Kernel, rtts: number[]): Promise<void> {
  const buffer = await device.alloc(BYTES);
  const src = new Uint8Array(BYTES).fill(0xa5);
  // Untimed first, as many as the C peer's first pass (bench/peers/mpi-pingpong.c), so both
  // time the same steady state: the first write touches the device memory, and the third
  // sends bytes sent twice before, which the MPI transport collapses into huge pages then
  // (OFFLOAD_MPI_HUGE_PAGES). With one untimed write, that collapse (30-75 ms) and the write
  // before it were two of the seven timed, and moved the median by up to half.
  for (let rep = 0; rep < REPS; rep++) await queue.write(buffer, src).done;
  const writes: number[] = [];
  for (let rep = 0; rep < REPS; rep++) {
    const start = performance.now();
    await queue.write(buffer, src).done;
    writes.push((performance.now() - start) / 1000);
  }
  const write = median(writes);
  const pause = await launchesAfterPauses(() => queue.launch(empty, { teams: 1 }, []).done);
  console.log(
    JSON.stringify({
      location: device.info.location,
      rtt_us: median(rtts),
      pause_rtt_us: pause,
      write_64mib_s: write,
      write_gb_s: BYTES / write / 1e9,
    }),
  );
}
