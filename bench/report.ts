/** A bench run's results, as a markdown table for people or as JSON for tools. */
import type { Machine } from './machine.js';
import { spread, type Plan, type Series } from './measure.js';
import type { Goal, Row, Unit } from './suite.js';

export interface Report {
  /** ISO 8601, when the run started. */
  date: string;
  machine: Machine;
  plan: Plan;
  suites: { name: string; description: string; rows: Row[] }[];
  /** The load averages when the run ended (machine.load: when it started). */
  loadAfter?: string;
}

/** A series' repetitions in the row's unit (see Unit). */
function values(series: Series, unit: Unit): number[] {
  switch (unit) {
    case 'GB/s':
      return series.seconds.map((s) => series.count / s / 1e9);
    case 'launches/s':
    case 'lookups/s':
    case 'teams/s':
    case 'calls/s':
      return series.seconds.map((s) => series.count / s);
    case 'Mpixels/s':
    case 'Melements/s':
      return series.seconds.map((s) => series.count / s / 1e6);
    case 'us':
      return series.seconds.map((s) => (s / series.count) * 1e6);
    case '% of a core':
      return series.seconds.map((s) => (s / series.count) * 100);
  }
}

/** offload-ts's median over the baseline's, in the row's unit. */
function ratio(row: Row): number | undefined {
  if (!row.baseline) return undefined;
  return spread(values(row.offload, row.unit)).median / spread(values(row.baseline, row.unit)).median;
}

/** Whether the ratio (and offload-ts's own median, for an absolute bound) meets the goal; undefined where the goal has no verdict. */
function met(goal: Goal | string | undefined, value: number | undefined, own?: number): boolean | undefined {
  if (typeof goal !== 'object' || value === undefined || goal.op === '~') return undefined;
  const within = (x: number, bound: number) => (goal.op === '>=' ? x >= bound : x <= bound);
  return within(value, goal.value) && (goal.absolute === undefined || own === undefined || within(own, goal.absolute));
}

/** offload-ts's median in the row's unit. */
function own(row: Row): number {
  return spread(values(row.offload, row.unit)).median;
}

function seriesJson(series: Series, unit: Unit) {
  return {
    label: series.label,
    count: series.count,
    repetitions: series.seconds.length,
    seconds: spread(series.seconds),
    [unit]: spread(values(series, unit)),
    samples: series.seconds,
  };
}

export function jsonReport(report: Report): string {
  const suites = report.suites.map(({ name, description, rows }) => ({
    name,
    description,
    rows: rows.map((row) => {
      const value = ratio(row);
      return {
        name: row.name,
        unit: row.unit,
        ratio: value ?? null,
        goal: row.goal ?? null,
        met: met(row.goal, value, own(row)) ?? null,
        offload: seriesJson(row.offload, row.unit),
        baseline: row.baseline ? seriesJson(row.baseline, row.unit) : null,
      };
    }),
  }));
  return JSON.stringify({ ...report, suites }, null, 2);
}

function formatValue(series: Series, unit: Unit): string {
  const { median } = spread(values(series, unit));
  switch (unit) {
    case 'GB/s':
      return `${median.toFixed(2)} GB/s (${formatSeconds(spread(series.seconds).median)})`;
    case 'launches/s':
    case 'calls/s':
      return `${Math.round(median).toLocaleString('en-US')}/s`;
    case 'lookups/s':
    case 'teams/s':
      return `${Math.round(median).toLocaleString('en-US')}/s (${formatSeconds(spread(series.seconds).median)})`;
    case 'Mpixels/s':
    case 'Melements/s':
      return `${median.toFixed(2)} ${unit} (${formatSeconds(spread(series.seconds).median)})`;
    case 'us':
      // Two decimals below 10 us: an inline launch takes 0.4 us, and 0.4 against 0.5 hid a 5 % step.
      return `${median.toFixed(median < 10 ? 2 : 1)} us`;
    case '% of a core':
      return `${median.toFixed(2)} % of a core`;
  }
}

function formatSeconds(seconds: number): string {
  return seconds >= 1 ? `${seconds.toFixed(2)} s` : `${(seconds * 1000).toFixed(1)} ms`;
}

function formatGoal(
  goal: Goal | string | undefined,
  value: number | undefined,
  ownValue?: number,
  unit?: Unit,
): string {
  if (goal === undefined) return '';
  if (typeof goal === 'string') return goal;
  const verdict = met(goal, value, ownValue);
  const op = { '>=': '≥', '<=': '≤', '~': '≈' }[goal.op];
  const note = goal.note ? ` (${goal.note})` : '';
  const absolute = goal.absolute === undefined ? '' : ` and ${op} ${goal.absolute} ${unit ?? ''}`.trimEnd();
  return `${op} ${goal.value}${absolute}${note}${verdict === undefined ? '' : verdict ? ': met' : ': missed'}`;
}

function formatMachine(report: Report): string[] {
  const { machine, plan } = report;
  const setting = (name: keyof Machine['env'], fallback: string) =>
    `${name}=${machine.env[name] ?? `unset (${fallback})`}`;
  return [
    `- CPU: ${machine.cpu}, ${machine.cores} cores (availableParallelism ${machine.availableParallelism}), ${machine.memoryGiB} GiB RAM`,
    `- ${machine.os}, Node ${machine.node}; the runtime measured: ${machine.runtime}`,
    `- ${setting('OFFLOAD_HOST_THREADS', `${machine.availableParallelism} workers`)}, ${setting('OFFLOAD_HOST_SPIN_US', '50 us')}, ${setting('OFFLOAD_POLL_US', 'adaptive, up to 50 us')}`,
    `- ${plan.quick ? 'quick run: ' : ''}${plan.warmup} warm-up + ${plan.repetitions} timed repetitions of each contender, alternating${machine.heapCollected ? ", a run's garbage over 16 MiB collected before the next" : ' (garbage not collected between runs: node without --expose-gc)'}; medians shown (\`--json\` adds min/max)`,
    `- idle CPUs: ${machine.idle}`,
    `- load average (1, 5, 15 min): ${machine.load} at the start${report.loadAfter ? `, ${report.loadAfter} at the end` : ''}`,
    ...(plan.busy
      ? ['- `--busy`: rows marked "under the hog" ran beside one busy process per core, their baselines too']
      : []),
  ];
}

export function markdownReport(report: Report): string {
  const lines = [`# offload-ts bench, ${report.date}`, '', ...formatMachine(report)];
  for (const { name, description, rows } of report.suites) {
    lines.push('', `## ${name}: ${description}`, '');
    if (rows.length === 0) {
      lines.push('No rows: the suite was skipped (its reason is on stderr).');
      continue;
    }
    lines.push('| measurement | offload-ts | baseline | ratio | goal |', '|---|---|---|---|---|');
    for (const row of rows) {
      const value = ratio(row);
      const baseline = row.baseline ? formatValue(row.baseline, row.unit) : '';
      lines.push(
        `| ${row.name} | ${formatValue(row.offload, row.unit)} | ${baseline} | ${value?.toFixed(2) ?? ''} | ${formatGoal(row.goal, value, own(row), row.unit)} |`,
      );
    }
    lines.push(
      '',
      "ratio = offload-ts / baseline, both medians in the row's unit: higher is better for rates (per second), lower for us.",
      '',
    );
    for (const row of rows) {
      lines.push(
        `- ${row.name}: offload-ts = ${row.offload.label}${row.baseline ? `; baseline = ${row.baseline.label}` : ''}`,
      );
    }
  }
  return lines.join('\n');
}
