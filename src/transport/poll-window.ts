/**
 * The event loop's polling window. When the peer's next frame over TCP is expected soon (a
 * client awaits the reply to its one request in flight; a proxy has answered every request of a
 * client, whose next one may follow at once), this thread's event loop keeps turning (one
 * setImmediate after another: each turn an epoll_wait that does not block) for OFFLOAD_POLL_US
 * microseconds before it may sleep. A frame that comes within the window is read at once.
 * Without the window each message wakes a sleeping thread, and on a VM whose idle vCPUs halt
 * that is an interrupt, a VM exit and an entry: a remote launch round trip on a local proxy cost
 * 73-94 us there, and 17-30 us with a window of 50 us on both sides (bench/README.md). The price
 * is CPU time: at most the window, on one core, per request answered. Polling after every frame
 * instead cost the launch-heavy loop over two proxies 8 % (its processes polled between frames
 * while the workers needed the CPUs). The host device's workers and main thread poll before they
 * sleep for the same reason (OFFLOAD_HOST_SPIN_US), and the MPI hub polls its own way
 * (mpi/hub.ts).
 */
import { performance } from 'node:perf_hooks';
import { errors, quoted } from '../errors.js';

export const DEFAULT_POLL_US = 50;
const MAX_POLL_US = 100_000;

/** OFFLOAD_POLL_US, checked: INVALID_ARGUMENT naming the variable for anything but 0 to 100000 microseconds. */
export function pollMicros(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.OFFLOAD_POLL_US;
  const value = text === undefined || text === '' ? DEFAULT_POLL_US : Number(text);
  if (!Number.isFinite(value) || value < 0 || value > MAX_POLL_US) {
    throw errors.invalidArgument(
      `OFFLOAD_POLL_US must be a number of microseconds from 0 to ${MAX_POLL_US}, not ${quoted(String(text))} (0: sleep as soon as nothing is ready)`,
    );
  }
  return value;
}

/** The window of this thread (set by the transports as they open, from the environment), in milliseconds. */
let windowMs = DEFAULT_POLL_US / 1000;
/** Until when (performance.now()) the loop keeps turning, and whether a turn is scheduled. */
let pollUntil = 0;
let turning = false;

function turn(): void {
  if (performance.now() < pollUntil) setImmediate(turn);
  else turning = false;
}

/** Sets this thread's window from the environment; throws INVALID_ARGUMENT for a bad OFFLOAD_POLL_US. */
export function configurePollWindow(env: NodeJS.ProcessEnv = process.env): void {
  windowMs = pollMicros(env) / 1000;
}

/** A frame is expected soon: the loop keeps turning for the window from now. */
export function pollForAWhile(): void {
  if (windowMs === 0) return;
  pollUntil = performance.now() + windowMs;
  if (turning) return;
  turning = true;
  setImmediate(turn);
}
