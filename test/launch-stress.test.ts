/**
 * The host device's launches under load, counted exactly: every team of every launch must run
 * once, neither more nor less. Mixed team counts (1-5), launches awaited and pipelined, one queue
 * and several; with as many workers as CPUs and with more, on idle CPUs and with every CPU kept
 * busy by other processes (the conditions under which the first protocol ran a team twice).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Offload, type Buffer, type Device, type Kernel, type Runtime } from '../src/index.js';
import { startCpuHog } from './helpers/cpu-hog.js';
import { fixtureBundle } from './helpers/fixtures.js';

const MAX_TEAMS = 5;

/** Launches `count` times on `queues` round robin, teams cycling 1..5, every third awaited; returns how often each team should have run. */
async function mixedLaunches(device: Device, kernel: Kernel, counts: Buffer, queues: number, count: number): Promise<number[]> {
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

async function exactRun(threads: number, queues: number, launches: number): Promise<void> {
  const runtime: Runtime = await Offload.init({ host: { threads, memoryBytes: 16 * 1024 * 1024 }, webgpu: false, proxies: [] });
  try {
    const device = runtime.devices[0]!;
    const kernel = await device.kernel(await runtime.register(await fixtureBundle()), 'count_team');
    const counts = await device.alloc(MAX_TEAMS * 4);
    const q = device.queue();
    await q.write(counts, new Int32Array(MAX_TEAMS)).done;
    const expected = await mixedLaunches(device, kernel, counts, queues, launches);
    const out = new Int32Array(MAX_TEAMS);
    await q.read(counts, out).done;
    const wrong = expected.flatMap((runs, team) => (out[team] === runs ? [] : [`team ${team} ran ${out[team]} times, expected ${runs}`]));
    assert.deepEqual(wrong, [], `${threads} workers, ${queues} queues, ${launches} launches`);
  } finally {
    await runtime.shutdown();
  }
}

const CONFIGS = [
  { threads: 2, queues: 1, launches: 40_000 },
  { threads: 8, queues: 1, launches: 40_000 },
  { threads: 4, queues: 3, launches: 30_000 },
];

describe('host device launches under load', { timeout: 600_000 }, () => {
  describe('on idle CPUs', () => {
    for (const { threads, queues, launches } of CONFIGS) {
      it(`runs every team of ${launches} launches exactly once (${threads} workers, ${queues} queue${queues > 1 ? 's' : ''})`, async () => {
        await exactRun(threads, queues, launches);
      });
    }
  });

  describe('while other processes keep every CPU busy', () => {
    for (const { threads, queues, launches } of CONFIGS) {
      it(`runs every team of ${launches} launches exactly once (${threads} workers, ${queues} queue${queues > 1 ? 's' : ''})`, async () => {
        const hog = await startCpuHog();
        try {
          await exactRun(threads, queues, launches);
        } finally {
          await hog.stop();
        }
      });
    }
  });
});
