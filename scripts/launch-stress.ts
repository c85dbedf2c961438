/**
 * `node --import tsx scripts/launch-stress.ts [runs] [--hog] [--threads N] [--queues N] [--launches N]`:
 * the launch stress program of test/launch-stress.test.ts, run `runs` times (default 20), each on
 * a new host device; with --hog, other processes keep every CPU busy meanwhile. Prints each run's
 * verdict and the tally; exits 1 if any run was not exact.
 */
import { parseArgs } from 'node:util';
import { startCpuHog } from '../test/helpers/cpu-hog.js';
import { stressRun } from '../test/helpers/launch-stress.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    hog: { type: 'boolean' },
    threads: { type: 'string' },
    queues: { type: 'string' },
    launches: { type: 'string' },
  },
});
const runs = Number(positionals[0] ?? 20);
const run = {
  threads: Number(values.threads ?? 2),
  queues: Number(values.queues ?? 1),
  launches: Number(values.launches ?? 40_000),
};
const hog = values.hog ? await startCpuHog(runs * 120_000) : undefined;
let exact = 0;
try {
  for (let n = 1; n <= runs; n++) {
    const started = performance.now();
    const wrong = await stressRun(run);
    if (wrong.length === 0) exact++;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    console.log(`run ${n}: ${wrong.length === 0 ? 'exact' : `WRONG: ${wrong.join('; ')}`} (${seconds} s)`);
  }
} finally {
  await hog?.stop();
}
console.log(
  `${exact} of ${runs} runs exact (${run.launches} launches, ${run.threads} workers, ${run.queues} queue(s)${hog ? ', CPUs kept busy' : ''})`,
);
if (exact < runs) process.exitCode = 1;
