/**
 * A process as a peer on the same host names it in the hello (co-location.ts reads /proc with
 * it): apart from co-location.ts so that the protocol's decoders, which pages use too, take in no
 * Node built-in.
 */

/** A process: its pid and its start time (clock ticks since boot, /proc/PID/stat's field 22). */
export interface ProcessId {
  pid: number;
  started: number;
}

/** The highest pid Linux gives (PID_MAX_LIMIT). */
export const MAX_PID = 4_194_304;

/** A process as a peer told it (pid and start time, anything from the wire): undefined unless both are plausible integers. */
export function toldProcess(pid: unknown, started: unknown): ProcessId | undefined {
  if (typeof pid !== 'number' || !Number.isSafeInteger(pid) || pid < 1 || pid > MAX_PID) return undefined;
  if (typeof started !== 'number' || !Number.isSafeInteger(started) || started < 0) return undefined;
  return { pid, started };
}
