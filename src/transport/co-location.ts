/**
 * Whether this thread and the peers it polls for over TCP run on one core: pinned there (taskset,
 * a cpuset of one CPU, a container given one core), or, on a machine crowded by other programs,
 * placed there by the scheduler for now. There a spin for the peer's frame takes the very core
 * the peer needs to send it: beside a busy process on that core, a client and its proxy answered
 * each other in 56-69 us both asleep and in 190-199 us both spinning 50 us, against 47-51 us for
 * a bare ping-pong (bench/README.md); trials of spinning cost what they try. So peers on one host
 * tell each other their process in the hello (only over loopback: a remote host learns nothing),
 * each checks it names a process it can see (the pid's start time, so a peer in another pid
 * namespace, or a pid reused, names nobody), and the polling policy reads, as it samples the
 * load, where each side may run and where each ran last. Pinning changes while connected
 * (taskset -p) and the scheduler's moves are seen within a sample.
 * Linux only (/proc); elsewhere nothing is known and nothing changes.
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { toldProcess, type ProcessId } from './process-id.js';

/** Peers watched at most, each read every sample: the connections past this many are not watched. */
export const MAX_WATCHED_PEERS = 8;
/** The longest Cpus_allowed_list read (a machine of thousands of CPUs, listed one by one, needs no more). */
const MAX_CPU_LIST_CHARS = 16_384;

/** Whether `address` (a socket's remoteAddress) is this host's loopback: 127.0.0.0/8 or ::1, also as a mapped IPv4 address. */
export function isLoopbackPeer(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith('::ffff:') ? address.slice(7) : address;
  if (isIP(v4) === 4) return v4.startsWith('127.');
  return address === '::1' || address === '0:0:0:0:0:0:0:1';
}

/** The start time of process `pid` (field 22 of /proc/PID/stat), or undefined when it cannot be read. */
function startTime(pid: number): number | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return undefined;
  }
  return statField(text, 22);
}

let self: ProcessId | null | undefined;

/** This process (read once); undefined off Linux. */
export function thisProcess(): ProcessId | undefined {
  if (self === undefined) {
    const started = startTime(process.pid);
    self = started === undefined ? null : { pid: process.pid, started };
  }
  return self ?? undefined;
}

/** Whether `told` (from a peer, so anything) names a process this one can see, alive now. */
export function isVisibleProcess(told: ProcessId): boolean {
  const checked = toldProcess(told.pid, told.started);
  return checked !== undefined && startTime(checked.pid) === checked.started;
}

/**
 * The one CPU a /proc status text allows (its Cpus_allowed_list: '3', '0-1,4'), or undefined when
 * it allows more, or says nothing readable.
 */
export function onlyCpu(status: string): number | undefined {
  const line = /^Cpus_allowed_list:[ \t]*([^\n]*)$/m.exec(status.slice(0, 64 * 1024))?.[1]?.trim();
  if (line === undefined || line.length > MAX_CPU_LIST_CHARS) return undefined;
  // One CPU: '3', or a range of one, '3-3'.
  const [, first, last] = /^(\d{1,15})(?:-(\d{1,15}))?$/.exec(line) ?? [];
  if (first === undefined || (last !== undefined && Number(last) !== Number(first))) return undefined;
  return Number(first);
}

/** The one CPU the thread behind a /proc status file may run on; undefined when more, or unreadable. */
function onlyCpuOf(path: string): number | undefined {
  try {
    return onlyCpu(readFileSync(path, 'latin1'));
  } catch {
    return undefined;
  }
}

/** The CPU a /proc stat text says its thread ran on last (field 39), or undefined. */
export function lastCpu(stat: string): number | undefined {
  return statField(stat, 39);
}

/**
 * Field `field` (counted from 1, as proc(5) does) of a /proc stat text, as a non-negative
 * integer; undefined where it is not one. The command name (field 2) is in parentheses and may
 * hold spaces and ')': the fields from 3 on follow the last ')'.
 */
function statField(stat: string, field: number): number | undefined {
  const close = stat.lastIndexOf(')');
  if (close < 0) return undefined;
  const text = stat.slice(close + 2).split(' ')[field - 3];
  if (text === undefined || !/^\d{1,15}$/.test(text)) return undefined;
  return Number(text);
}

/** The CPU the thread behind a /proc stat file (`/proc/PID/stat`: the main thread) ran on last; undefined when unreadable. */
export function lastCpuOf(path: string): number | undefined {
  try {
    return lastCpu(readFileSync(path, 'latin1'));
  } catch {
    return undefined;
  }
}

/**
 * Where this thread and a peer run: on `core`, both, either because neither may run elsewhere
 * (`pinned`) or because the peer ran there last and this thread runs there now.
 */
export interface SharedCore {
  core: number;
  pinned: boolean;
}

/**
 * The peers on this host of this thread's TCP connections (at most MAX_WATCHED_PEERS of them),
 * each with the core it shares with this thread as last sampled. One per thread (a module's
 * state is its thread's), as the polling policy is; the policy asks about the connection whose
 * frame it expects, so a client with other proxies elsewhere still sleeps for the one beside it.
 */
class CoLocation {
  private readonly peers = new Map<object, { process: ProcessId; shared: SharedCore | undefined }>();

  /** The peer of connection `key` is process `peer` on this host (checked by the caller). */
  peerIs(key: object, peer: ProcessId): void {
    if (this.peers.size < MAX_WATCHED_PEERS) this.peers.set(key, { process: peer, shared: undefined });
  }

  closed(key: object): void {
    this.peers.delete(key);
  }

  /**
   * Reads where this thread and each watched peer's main thread may run, and, on a `crowded`
   * machine (the only one where it counts), where they ran last (/proc): one read a sample on a
   * machine that is neither crowded nor pinned.
   */
  sample(crowded: boolean): void {
    if (this.peers.size === 0) return;
    const only = onlyCpuOf('/proc/thread-self/status');
    const now = crowded ? lastCpuOf('/proc/thread-self/stat') : undefined;
    for (const peer of this.peers.values()) {
      const { pid } = peer.process;
      if (only !== undefined && onlyCpuOf(`/proc/${pid}/status`) === only) peer.shared = { core: only, pinned: true };
      else if (now !== undefined && lastCpuOf(`/proc/${pid}/stat`) === now) peer.shared = { core: now, pinned: false };
      else peer.shared = undefined;
    }
  }

  /** The core this thread shares with the peer of connection `key`, as last sampled (undefined: none, or not known). */
  sharedWith(key: object): SharedCore | undefined {
    return this.peers.get(key)?.shared;
  }
}

/** This thread's connections and their peers on this host. */
export const coLocation = new CoLocation();
