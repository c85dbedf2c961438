/**
 * The launch stress program: a kernel that counts, atomically, how many times
 * each team ran; launches with 1-5 teams, every third awaited, the rest pipelined, over one queue
 * or several; then every team's count is compared with what it must be, exactly.
 */
import { Offload, type Buffer, type Device, type Kernel } from '../../src/index.js';
import { fixtureBundle } from './fixtures.js';

const MAX_TEAMS = 5;

export interface StressRun {
  threads: number;
  queues: number;
  launches: number;
}

/** Launches `count` times round robin over `queues` new queues; returns how often each team should have run. */
async function mixedLaunches(
  device: Device,
  kernel: Kernel,
  counts: Buffer,
  queues: number,
  count: number,
): Promise<number[]> {
  const expected = new Array<number>(MAX_TEAMS).fill(0);
  const qs = Array.from({ length: queues }, () => device.queue());
  for (let i = 0; i < count; i++) {
    const teams = 1 + (i % MAX_TEAMS);
    for (let t = 0; t < teams; t++) expected[t]!++;
    const event = qs[i % queues]!.launch(kernel, { teams }, [counts]);
    if (i % 3 === 0) await event.done;
  }
  await Promise.all(qs.map((q) => q.finish()));
  await Promise.all(qs.map((q) => q.destroy()));
  return expected;
}

/** One run on a host device of `threads` workers; returns what was wrong (nothing when exact). */
export async function stressRun({ threads, queues, launches }: StressRun): Promise<string[]> {
  // Every launch on the workers: this stresses the launch ring (count_team would run inline).
  const runtime = await Offload.init({
    host: { threads, memoryBytes: 16 * 1024 * 1024, inline: 'never' },
    webgpu: false,
    proxies: [],
  });
  try {
    const device = runtime.devices[0]!;
    const kernel = await device.kernel(await runtime.register(await fixtureBundle()), 'count_team');
    const counts = await device.alloc(MAX_TEAMS * 4);
    const q = device.queue();
    await q.write(counts, new Int32Array(MAX_TEAMS)).done;
    const expected = await mixedLaunches(device, kernel, counts, queues, launches);
    const out = new Int32Array(MAX_TEAMS);
    await q.read(counts, out).done;
    return expected.flatMap((runs, team) =>
      out[team] === runs ? [] : [`team ${team} ran ${out[team]} times, expected ${runs}`],
    );
  } finally {
    await runtime.shutdown();
  }
}
