/**
 * A CPU hog for `npm run bench -- --busy`: one child process per core, each a busy loop, so that
 * rows measured while it runs show what a user sees beside other programs (a proxy on a node
 * whose cores run kernels). Started and stopped by the bench by PID; a hog never outlives its
 * bench: each child checks its parent is still the one that started it (and exits if not), and
 * the bench kills them by PID when it stops them, when it exits, and on SIGINT/SIGTERM.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { lastCpuOf } from '../src/transport/co-location.js';

/** A busy loop that looks at its parent every few million iterations (a few ms) and leaves when it is gone. */
const LOOP = `
const parent = process.ppid;
let x = 0;
for (let i = 1; ; i++) {
  x = (x * 1103515245 + 12345) | 0;
  if ((i & 0x3fffff) === 0 && process.ppid !== parent) process.exit(x & 0);
}
`;

export interface Hog {
  /** The busy children's process ids. */
  readonly pids: readonly number[];
  /** Kills every child by PID and waits for each to exit. Idempotent. */
  stop(): Promise<void>;
}

/** Starts `count` busy processes (default: one per core) and resolves once each is running. */
export async function startHog(count = availableParallelism()): Promise<Hog> {
  const children: ChildProcess[] = [];
  const killAll = (): void => {
    for (const child of children) {
      if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    killAll();
    process.kill(process.pid, signal);
  };
  process.once('exit', killAll);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  for (let i = 0; i < count; i++) {
    const child = spawn(process.execPath, ['-e', LOOP], { stdio: 'ignore' });
    children.push(child);
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  }
  let stopped: Promise<void> | undefined;
  return {
    pids: children.map((child) => child.pid!),
    stop() {
      stopped ??= (async () => {
        const exits = children.map((child) =>
          child.exitCode !== null || child.signalCode !== null
            ? Promise.resolve()
            : new Promise<void>((resolve) => child.once('exit', () => resolve())),
        );
        killAll();
        await Promise.all(exits);
        process.off('exit', killAll);
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      })();
      return stopped;
    },
  };
}

/** The CPU seconds (user + system) process `pid` has used so far, from /proc (Linux); undefined elsewhere. */
export function cpuSeconds(pid: number): number | undefined {
  try {
    // /proc/<pid>/stat: the command may hold spaces and parentheses; fields after its last ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the command.
    const ticks = Number(fields[11]) + Number(fields[12]);
    return ticks / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}

/** Linux's USER_HZ, which /proc counts CPU time in (100 on every architecture Node runs on). */
const CLOCK_TICKS = 100;

/**
 * Pins every thread of each process in `pids` to `cpus` (a taskset list: '0', '0,1') with
 * util-linux's taskset; false where that cannot be done (no taskset, not Linux), true once all
 * are pinned. For rows that compare two contenders in the same placement: beside a busy
 * process per core, where the scheduler puts a client and its server moves a round trip from
 * about 50 us (one core) to over 100 (two), so that a baseline and a contender placed apart by
 * chance compare placements, not code.
 */
export function pinProcesses(pids: readonly number[], cpus: string): boolean {
  for (const pid of pids) {
    const result = spawnSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
    if (result.status !== 0) return false;
  }
  return true;
}

/** The core process `pid`'s main thread ran on last; undefined off Linux or once it is gone. */
export const lastCore = (pid: number): number | undefined => lastCpuOf(`/proc/${pid}/stat`);

/**
 * Pins the hog's busy processes one per core (for pinned rows); where that cannot be done (one
 * core, no taskset) leaves them on every core and says false.
 */
export function pinHogPerCore(hog: Hog): boolean {
  const cores = availableParallelism();
  if (cores >= 2 && hog.pids.every((pid, i) => pinProcesses([pid], String(i % cores)))) return true;
  pinProcesses(hog.pids, `0-${cores - 1}`);
  return false;
}

/** How often a placement watch looks. */
const PLACEMENT_SAMPLE_MS = 20;

/** Where a client and its server ran while watched: shares of the looks. */
export interface Placement {
  /** Both on one core. */
  together: number;
  /** Every busy process of the hog on one core (the other cores free of them). */
  hogTogether: number;
}

/**
 * Watches where the main threads of processes `a` and `b`, and the busy processes `hog`, run,
 * every PLACEMENT_SAMPLE_MS until stopped (undefined when no look could read `a` and `b`). Beside
 * a busy process per core the scheduler moves all of them about, and where it puts them decides a
 * client's round trip to its proxy: this says what a run had.
 */
export function watchPlacement(a: number, b: number, hog: readonly number[]): { stop(): Placement | undefined } {
  let looks = 0;
  let together = 0;
  let hogTogether = 0;
  const timer = setInterval(() => {
    const coreA = lastCore(a);
    const coreB = lastCore(b);
    if (coreA === undefined || coreB === undefined) return;
    looks++;
    if (coreA === coreB) together++;
    if (new Set(hog.map(lastCore)).size === 1) hogTogether++;
  }, PLACEMENT_SAMPLE_MS);
  return {
    stop: () => {
      clearInterval(timer);
      return looks === 0 ? undefined : { together: together / looks, hogTogether: hogTogether / looks };
    },
  };
}
