/**
 * OFFLOAD_DEBUG: the runtime's own diagnostics (why a plugin is not there, what a probe found),
 * one line each on stderr, `offload debug [topic]: ...`. Off unless the variable is set to
 * something other than empty, 0, false, off or no. Nothing here is shown by default.
 */

export function debugEnabled(env: NodeJS.ProcessEnv = process.env): boolean {
  return flagSet(env.OFFLOAD_DEBUG);
}

/** Whether an on/off environment variable is on: set, and not empty, 0, false, off or no. */
export function flagSet(value: string | undefined): boolean {
  return value !== undefined && !['', '0', 'false', 'off', 'no'].includes(value.trim().toLowerCase());
}

/** Writes `message` under `topic` when OFFLOAD_DEBUG is on; `message` is only computed then. */
export function debugLog(topic: string, message: string | (() => string)): void {
  if (!debugEnabled()) return;
  process.stderr.write(`offload debug [${topic}]: ${typeof message === 'function' ? message() : message}\n`);
}
