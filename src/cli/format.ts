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

/** The width help texts are wrapped to: a terminal's default, and what a reader of a pipe or a log expects. */
export const HELP_WIDTH = 80;

/**
 * A help text with every line longer than `width` broken at spaces. A continuation lines up with
 * where its line's text starts: after an option's (or command's) column when the line has one
 * (a name, then two or more spaces, then its description), else at the line's own indent. The
 * lines that went on the long one's text (same indent, no option of their own) are reflowed with
 * it, so a paragraph stays a paragraph.
 */
export function wrapHelp(text: string, width = HELP_WIDTH): string {
  const input = text.split('\n');
  const output: string[] = [];
  for (let i = 0; i < input.length; i++) {
    let line = input[i]!;
    if (line.length <= width) {
      output.push(line);
      continue;
    }
    const own = /^\s*/.exec(line)![0].length;
    const following = /^\s*/.exec(input[i + 1] ?? '')![0].length;
    // The option's column: after two spaces, else (an option) where the next line, indented deeper,
    // goes on; a usage line's after 'Usage: '.
    const column =
      /^(\s*\S+(?: \S+)*\s{2,})\S/.exec(line)?.[1]?.length ??
      (/^\s*-/.test(line) && following > own && input[i + 1]!.trim() !== ''
        ? following
        : /^Usage: /.test(line)
          ? 'Usage: '.length
          : own);
    const indent = ' '.repeat(column < width / 2 ? column : 2);
    for (let next = input[i + 1]; next !== undefined && isContinuation(next, indent); next = input[i + 1]) {
      line = `${line} ${next.trim()}`;
      i++;
    }
    while (line.length > width) {
      const at = breakAt(line, width);
      // A word longer than the room left stays whole, on a line of its own.
      const cut = at > indent.length ? at : line.indexOf(' ', width);
      if (cut < 0) break;
      output.push(line.slice(0, cut).trimEnd());
      line = indent + line.slice(cut + 1).trimStart();
    }
    output.push(line);
  }
  return output.join('\n');
}

/** Whether `line` goes on the text of the line before: indented as its continuations, not blank, not an option. */
function isContinuation(line: string, indent: string): boolean {
  const text = line.slice(indent.length);
  return line.startsWith(indent) && text !== '' && !/^[\s-]/.test(text);
}

/** The last space at or before `width` outside [] and <> (so `[--token-file <file>]` stays whole), else the last space. */
function breakAt(line: string, width: number): number {
  let depth = 0;
  let outside = -1;
  for (let i = 0; i <= Math.min(width, line.length - 1); i++) {
    const c = line[i];
    if (c === '[' || c === '<') depth++;
    else if ((c === ']' || c === '>') && depth > 0) depth--;
    else if (c === ' ' && depth === 0) outside = i;
  }
  return outside > 0 && !/^\s*$/.test(line.slice(0, outside)) ? outside : line.lastIndexOf(' ', width);
}
