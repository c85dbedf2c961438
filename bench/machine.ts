/** The machine a bench run measured, printed above its figures. */
import { readFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, release, totalmem, type } from 'node:os';
import { collectsBetweenRuns } from './measure.js';
import { runtimeSource } from './offload.js';

/** Environment variables that change what the suites measure. */
const SETTINGS = ['OFFLOAD_HOST_THREADS', 'OFFLOAD_HOST_SPIN_US', 'OFFLOAD_POLL_US'] as const;

export interface Machine {
  cpu: string;
  cores: number;
  availableParallelism: number;
  memoryGiB: number;
  os: string;
  node: string;
  /** Which runtime was measured (bench/offload.ts): the dist/ build, or src/ through tsx. */
  runtime: string;
  /** Each of SETTINGS, or null where unset. */
  env: Record<(typeof SETTINGS)[number], string | null>;
  /** How an idle CPU waits (Linux cpuidle driver; a VM guest's halt polling decides how long a wake-up takes). */
  idle: string;
  /** The load averages (1, 5, 15 minutes) when the run started: what else ran beside it. */
  load: string;
  /** Whether a run's large garbage is collected before the next one (node --expose-gc; bench/measure.ts). */
  heapCollected: boolean;
}

/** The first line of a file, or undefined where it cannot be read (not Linux, no cpuidle). */
function readLine(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').split('\n')[0]!.trim();
  } catch {
    return undefined;
  }
}

/**
 * The cpuidle driver, and for a KVM guest's `haltpoll` its poll limit: at 0 a waiting vCPU halts
 * at once, and every wake-up is a VM exit and entry (tens of us), which a round trip pays twice.
 */
function describeIdle(): string {
  const driver = readLine('/sys/devices/system/cpu/cpuidle/current_driver');
  if (!driver) return 'unknown';
  const pollNs = driver === 'haltpoll' ? readLine('/sys/module/haltpoll/parameters/guest_halt_poll_ns') : undefined;
  return pollNs === undefined ? driver : `${driver} (guest_halt_poll_ns=${pollNs})`;
}

export function describeMachine(): Machine {
  const cores = cpus();
  return {
    cpu: cores[0]?.model.trim() || 'unknown',
    cores: cores.length,
    availableParallelism: availableParallelism(),
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os: `${type()} ${release()} ${process.arch}`,
    node: process.version,
    runtime: runtimeSource(),
    env: Object.fromEntries(SETTINGS.map((name) => [name, process.env[name] ?? null])) as Machine['env'],
    idle: describeIdle(),
    load: describeLoad(),
    heapCollected: collectsBetweenRuns,
  };
}

/** The 1, 5 and 15-minute load averages, e.g. `2.03 2.17 2.40`. */
export function describeLoad(): string {
  return loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');
}
