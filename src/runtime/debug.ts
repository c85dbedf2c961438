/**
 * OFFLOAD_DEBUG=1, as LIBOMPTARGET_DEBUG: the runtime's internal decisions (which plugins load,
 * and why one has no device; which image a device loads) and every error it swallows (a drain
 * or destroy whose failure nobody asked for, a plugin that would not stop, a signal to a proxy
 * that no longer listens), one line each on stderr. Off by default; when off a call costs one
 * boolean test. OFFLOAD_INFO, by contrast, reports what the program asked for (loads, copies,
 * launches).
 */
import { errors, quoted } from '../errors.js';
import { environment, writeStderr } from '../platform.js';

const OFF_WORDS = ['', '0', 'false', 'off', 'no'];
const ON_WORDS = ['1', 'true', 'on', 'yes', 'all'];

/**
 * Whether OFFLOAD_DEBUG turns debug output on: unset, '', 0, false, off or no: off; 1, true, on,
 * yes or all: on (any case); anything else is refused, naming the variable.
 */
export function debugFromEnv(value: string | undefined = environment().OFFLOAD_DEBUG): boolean {
  if (value === undefined) return false;
  const word = value.trim().toLowerCase();
  if (OFF_WORDS.includes(word)) return false;
  if (ON_WORDS.includes(word)) return true;
  throw errors.invalidArgument(
    `OFFLOAD_DEBUG must be 1 (debug output on stderr) or 0 (also true/false, on/off, yes/no), not ${quoted(value)}`,
  );
}

/** OFFLOAD_DEBUG of `env`, as debugFromEnv reads it. */
export function debugEnabled(env: NodeJS.ProcessEnv = environment()): boolean {
  return debugFromEnv(env.OFFLOAD_DEBUG);
}

/** The longest text of a swallowed error a line repeats. */
const MAX_ERROR_TEXT = 500;

function errorText(error: unknown): string {
  const code =
    typeof error === 'object' && error !== null && typeof (error as { code?: unknown }).code === 'string'
      ? `${(error as { code: string }).code}: `
      : '';
  const text = `${code}${error instanceof Error ? error.message : String(error)}`;
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}...` : text;
}

/** Process-wide, as the environment is: set from OFFLOAD_DEBUG when the module loads and by every Offload.init. */
export const debug = {
  enabled: (() => {
    try {
      return debugFromEnv();
    } catch {
      return false; // Offload.init reports the bad value
    }
  })(),
  /** Where lines go (tests may capture them). */
  sink: (line: string): void => {
    writeStderr(`${line}\n`);
  },
  /** One line about `area` (a plugin, a queue, the proxy). */
  log(area: string, text: string): void {
    if (this.enabled) this.sink(`offload-ts debug: ${area}: ${text}`);
  },
};

/** A rejection handler for an error the runtime drops on purpose: under OFFLOAD_DEBUG it says so. */
export function dropped(area: string, what: string): (error: unknown) => void {
  return (error) => {
    if (debug.enabled) debug.log(area, `${what} failed, and the error was dropped: ${errorText(error)}`);
  };
}

/** Whether an on/off environment variable is on: set, and not empty, 0, false, off or no. */
export function flagSet(value: string | undefined): boolean {
  return value !== undefined && !OFF_WORDS.includes(value.trim().toLowerCase());
}

/** Writes `message` under `topic` when OFFLOAD_DEBUG is on; `message` is only computed then. */
export function debugLog(topic: string, message: string | (() => string)): void {
  if (debug.enabled) debug.log(topic, typeof message === 'function' ? message() : message);
}
