/**
 * The event loop's polling window. When the peer's next frame over TCP is expected soon (a
 * client awaits the reply to its one request in flight; a proxy has answered every request of a
 * client, whose next one may follow at once), this thread's event loop keeps turning (one
 * setImmediate after another: each turn an epoll_wait that does not block) for a window before
 * it may sleep, and stops as soon as bytes come. A frame that comes within the window is read at
 * once. How long the window is, if there is one at all, is the policy's (poll-policy.ts: only
 * while the machine has a core to spare and spins find what they wait for, or where trials on a
 * crowded machine show they bring frames sooner); OFFLOAD_POLL_US overrides it, and
 * OFFLOAD_DEBUG says what it chose whenever that changes.
 * Without the window each message wakes a sleeping thread, and on a VM whose idle vCPUs halt
 * that is an interrupt, a VM exit and an entry: a remote launch round trip on a local proxy cost
 * 73-94 us there, and 17-30 us with a window of 50 us on both sides (bench/README.md). The price
 * is CPU time: at most the window, on one core, per request answered. Polling after every frame
 * instead cost the launch-heavy loop over two proxies 8 % (its processes polled between frames
 * while the workers needed the CPUs). The host device's workers and main thread poll before they
 * sleep for the same reason (OFFLOAD_HOST_SPIN_US), and the MPI hub polls its own way
 * (mpi/hub.ts).
 */
import { readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { errors, quoted } from '../errors.js';
import { coLocation } from './co-location.js';
import { PollPolicy } from './poll-policy.js';
import { reportPolicy } from './poll-report.js';

export { reportPolicy, reportPollingTo } from './poll-report.js';

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

/** OFFLOAD_POLL_US when set (an override of the policy), else undefined; INVALID_ARGUMENT as pollMicros. */
export function pollOverride(env: NodeJS.ProcessEnv = process.env): number | undefined {
  const value = pollMicros(env);
  return env.OFFLOAD_POLL_US === undefined || env.OFFLOAD_POLL_US === '' ? undefined : value;
}

/** How often the machine's load is sampled while frames are expected, in milliseconds. */
const LOAD_SAMPLE_MS = 50;

/**
 * Runnable threads on the machine besides the caller: Linux's count of running tasks
 * (/proc/loadavg's fourth field, at this instant) less this one; elsewhere the 1-minute load
 * average less one.
 */
function othersRunnable(): number {
  try {
    const fields = readFileSync('/proc/loadavg', 'latin1').split(' ');
    const running = Number(fields[3]?.split('/')[0]);
    if (Number.isFinite(running)) return running - 1;
  } catch {
    // not Linux: the load average below
  }
  return loadavg()[0]! - 1;
}

/**
 * Feeds `policy` a load sample, and reads where this thread and its peers on this host run, when
 * the last sample is older than LOAD_SAMPLE_MS; `now` is performance.now().
 */
function sampleLoad(policy: PollPolicy, now: number, state: { sampledAt: number }): void {
  if (policy.overrideUs !== undefined || now - state.sampledAt < LOAD_SAMPLE_MS) return;
  state.sampledAt = now;
  policy.observeLoad(othersRunnable());
  coLocation.sample(policy.crowdedByLoad);
}

/** This thread's policy (made by the transports as they open, from the environment). */
let policy = new PollPolicy({ cores: availableParallelism() });
const load = { sampledAt: -Infinity };
/** Until when (performance.now()) the loop keeps turning, and whether a turn is scheduled. */
let pollUntil = 0;
let turning = false;
/** When the frame expected last was expected (performance.now()), while it has not come. */
let expectedAt: number | undefined;

function turn(): void {
  if (performance.now() < pollUntil) setImmediate(turn);
  else turning = false;
}

/** Sets this thread's policy from the environment; throws INVALID_ARGUMENT for a bad OFFLOAD_POLL_US. */
export function configurePollWindow(env: NodeJS.ProcessEnv = process.env): void {
  const overrideUs = pollOverride(env);
  if (overrideUs === policy.overrideUs) return;
  policy = new PollPolicy({ cores: availableParallelism(), overrideUs });
}

/** This thread's policy (diagnostics and tests). */
export function pollPolicy(): PollPolicy {
  return policy;
}

/**
 * A frame is expected soon (over connection `from`, when given: whether its peer shares this
 * thread's core counts): the loop keeps turning for the window the policy gives from now.
 */
export function pollForAWhile(from?: object): void {
  const now = performance.now();
  sampleLoad(policy, now, load);
  policy.observeSharedCore(from && coLocation.sharedWith(from));
  const windowUs = policy.window();
  reportPolicy('TCP', policy);
  expectedAt = now;
  if (windowUs === 0) return;
  pollUntil = now + windowUs / 1000;
  if (turning) return;
  turning = true;
  setImmediate(turn);
}

/**
 * Bytes came from a peer: the frame expected (if one was) is here. The loop stops turning: what
 * follows is work (the proxy runs the request; the client hands the reply on), and the core is
 * the workers' or the peer's until a frame is expected again.
 */
export function frameArrived(): void {
  if (expectedAt === undefined) return;
  const now = performance.now();
  policy.arrived((now - expectedAt) * 1000);
  expectedAt = undefined;
  pollUntil = 0;
  reportPolicy('TCP', policy);
}
