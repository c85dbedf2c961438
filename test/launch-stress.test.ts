/**
 * The host device's launches under load, counted exactly: every team of every launch must run
 * once, neither more nor less. Mixed team counts (1-5), launches awaited and pipelined, one queue
 * and several; with as many workers as CPUs and with more, on idle CPUs and with every CPU kept
 * busy by other processes (the conditions under which the first protocol ran a team twice).
 * `node --import tsx scripts/launch-stress.ts` runs the same program many times over.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCpuHog } from './helpers/cpu-hog.js';
import { stressRun, type StressRun } from './helpers/launch-stress.js';

const CONFIGS: StressRun[] = [
  { threads: 2, queues: 1, launches: 40_000 },
  { threads: 8, queues: 1, launches: 40_000 },
  { threads: 4, queues: 3, launches: 30_000 },
];

const title = ({ threads, queues, launches }: StressRun): string =>
  `runs every team of ${launches} launches exactly once (${threads} workers, ${queues} queue${queues > 1 ? 's' : ''})`;

describe('host device launches under load', { timeout: 600_000 }, () => {
  describe('on idle CPUs', () => {
    for (const run of CONFIGS) {
      it(title(run), async () => {
        assert.deepEqual(await stressRun(run), [], JSON.stringify(run));
      });
    }
  });

  describe('while other processes keep every CPU busy', () => {
    for (const run of CONFIGS) {
      it(title(run), async () => {
        const hog = await startCpuHog();
        try {
          assert.deepEqual(await stressRun(run), [], JSON.stringify(run));
        } finally {
          await hog.stop();
        }
      });
    }
  });
});
