/** What a bench suite is and what it reports. Suites are listed in suites/index.ts. */
import type { Plan, Series } from './measure.js';

/**
 * How a row's figures are expressed. Rates divide a series' count by its time (GB/s counts
 * bytes, 10^9 per GB; Mpixels 10^6 pixels; launches, lookups and teams one each); `us` divides its time
 * by its count (microseconds per operation); `% of a core` is CPU seconds (the series' times) per
 * wall-clock second (its count).
 */
export type Unit =
  'GB/s' | 'launches/s' | 'lookups/s' | 'teams/s' | 'Mpixels/s' | 'Melements/s' | 'calls/s' | 'us' | '% of a core';

/** A target for a row's ratio. `~` means "close to", which gets no verdict. */
export interface Goal {
  op: '>=' | '<=' | '~';
  value: number;
  /** Also a bound on offload-ts's own median, in the row's unit, on the same side as `op` (e.g. at most 30 us). */
  absolute?: number;
  /** Said after the value, e.g. "the worker count". */
  note?: string;
}

/** One line of the table: offload-ts against its baseline, both measured in this run. */
export interface Row {
  name: string;
  unit: Unit;
  offload: Series;
  baseline?: Series;
  /** A Goal on the ratio, or a text shown instead (e.g. which row the goal is on). */
  goal?: Goal | string;
}

export interface Suite {
  name: string;
  description: string;
  /** Measures everything of the suite; frees what it set up before returning. */
  run(plan: Plan, progress: (line: string) => void): Promise<Row[]>;
}
