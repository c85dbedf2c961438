/** Quantities as text (environment variables, command-line options, messages), read and written one way everywhere. */
import { errors, quoted } from './errors.js';

/** `512M`, `2G`, `64KiB`, `1048576`: a byte count. INVALID_ARGUMENT naming `name` otherwise. */
export function parseBytes(text: string, name: string): number {
  const match = /^(\d{1,16})\s*([KMGT]?)i?B?$/i.exec(text.trim());
  if (!match) throw errors.invalidArgument(`${name} must be a size such as 512M or 2G, not ${quoted(text)}`);
  const unit = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 }[
    match[2]!.toUpperCase() as '' | 'K' | 'M' | 'G' | 'T'
  ];
  return Number(match[1]) * unit;
}

/** A whole number from `min` to `max`. INVALID_ARGUMENT naming `name` otherwise. */
export function parseCount(text: string, name: string, min: number, max: number): number {
  const value = /^\d{1,16}$/.test(text.trim()) ? Number(text) : NaN;
  if (!(value >= min && value <= max))
    throw errors.invalidArgument(`${name} must be a whole number from ${min} to ${max}, not ${quoted(text)}`);
  return value;
}

/** The longest fill pattern (queue.fill): one request carries it to a remote device. */
export const MAX_FILL_PATTERN_BYTES = 4096;

/** The longest time a Node timer waits (about 24 days): the bound of every time limit. */
export const MAX_MILLISECONDS = 2 ** 31 - 1;

/** A time limit given as text (an environment variable, a command-line option) named `name`. */
export function parseMilliseconds(text: string, name: string): number {
  const value = /^\d{1,10}$/.test(text.trim()) ? Number(text) : NaN;
  if (!(value >= 1 && value <= MAX_MILLISECONDS)) {
    throw errors.invalidArgument(
      `${name} must be a whole number of milliseconds from 1 to ${MAX_MILLISECONDS}, not ${quoted(text)}`,
    );
  }
  return value;
}

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** Bytes in binary units, e.g. `512 B`, `1023 MiB`, `1.5 GiB` (one decimal at most). */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${Number(value.toFixed(1))} ${BYTE_UNITS[unit]}`;
}

/**
 * Environment variables as the runtime reads them (`process.env` is one). Declared here rather
 * than as `NodeJS.ProcessEnv` so that the published declarations need no `@types/node`.
 */
export type Environment = Readonly<Record<string, string | undefined>>;
