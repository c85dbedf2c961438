/**
 * `npm run bench -- [--json] [--quick] [--busy] [suite ...]`: runs bench suites (all by default) and
 * prints each figure beside its baseline, both measured in this run, with their ratio.
 * Progress goes to stderr, results to stdout.
 */
import { parseArgs } from 'node:util';
import { describeLoad, describeMachine } from './machine.js';
import type { Plan } from './measure.js';
import { jsonReport, markdownReport, type Report } from './report.js';
import { suites } from './suites/index.js';

const FULL: Plan = { warmup: 2, repetitions: 9, quick: false };
const QUICK: Plan = { warmup: 1, repetitions: 3, quick: true };

const usage = [
  'usage: npm run bench -- [--json] [--quick] [--busy] [suite ...]',
  '  --json   machine-readable results (with min/max and every sample) on stdout',
  '  --quick  fewer repetitions, for smoke runs',
  '  --busy   remote, mpi: the launch and transfer rows again beside a CPU hog (a busy process per core)',
  `  suites:  ${suites.map((suite) => suite.name).join(', ')} (default: all)`,
].join('\n');

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        json: { type: 'boolean' },
        quick: { type: 'boolean' },
        busy: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    console.error(`${(error as Error).message}\n${usage}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(usage);
    return 0;
  }
  const unknown = positionals.filter((name) => !suites.some((suite) => suite.name === name));
  if (unknown.length > 0) {
    console.error(`unknown suite ${unknown.join(', ')}\n${usage}`);
    return 2;
  }
  const selected = positionals.length === 0 ? suites : suites.filter((suite) => positionals.includes(suite.name));
  const plan: Plan = { ...(values.quick ? QUICK : FULL), busy: values.busy === true };
  const report: Report = { date: new Date().toISOString(), machine: describeMachine(), plan, suites: [] };
  for (const suite of selected) {
    const rows = await suite.run(plan, (line) => process.stderr.write(`${line}\n`));
    report.suites.push({ name: suite.name, description: suite.description, rows });
  }
  report.loadAfter = describeLoad();
  console.log(values.json ? jsonReport(report) : markdownReport(report));
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
