/** What the `offload` commands print: aligned tables, durations, signatures, usage errors (sizes: units.ts's formatBytes). */
import type { EntryInfo } from '../image/manifest.js';

/** Exit status of a command used wrongly (unknown command, bad flag, missing argument). */
export const USAGE_EXIT = 2;

/** Rows of cells as lines whose columns line up; the last column is not padded. */
export function table(rows: readonly (readonly string[])[], gap = 2): string[] {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) =>
    row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]! + gap))).join(''),
  );
}

/** Milliseconds with three significant digits in a fitting unit, e.g. `850 µs`, `12.3 ms`, `2.31 s`. */
export function formatDuration(ms: number): string {
  if (ms < 1) return `${Number((ms * 1000).toPrecision(3))} µs`;
  if (ms < 1000) return `${Number(ms.toPrecision(3))} ms`;
  return `${Number((ms / 1000).toPrecision(3))} s`;
}

/** A kernel as it is declared, e.g. `saxpy(n: i32, a: f32, x: ptr, y: ptr)`. */
export function formatSignature(entry: Pick<EntryInfo, 'name' | 'params'>): string {
  return `${entry.name}(${entry.params.map((p) => `${p.name}: ${p.type}`).join(', ')})`;
}

export function hex(value: number): string {
  return `0x${value.toString(16)}`;
}

/** Prints a usage error of `command` on stderr and returns the exit status to use. */
export function usageError(command: string, message: string): number {
  const help = command === '' ? 'offload --help' : `offload ${command} --help`;
  console.error(`offload${command === '' ? '' : ` ${command}`}: ${message}\nSee '${help}'.`);
  return USAGE_EXIT;
}
