/**
 * The host device's launch protocol as a system the model checker (interleavings.ts) can
 * explore: the production state machines of launch-protocol.ts (the main thread's HostSide, in
 * launch-host-side.ts, and each worker's WorkerSide, in launch-worker-side.ts) on a small ring, with the actions their drivers take (waits,
 * notifies, kills, running a team) played by this harness as steps of their own.
 *
 * Threads: 0 publishes (the program's launch() calls), 1 is the pump (collection, withdrawals,
 * worker exits), 2.. are workers. Threads 0 and 1 are the one main thread: a publication runs
 * to its end before the pump moves, and the program publishes only while the pump is between
 * rounds (as in production, where they meet only at the pump's awaits).
 *
 * Waits are exact: a wait blocks until a notify of its address wakes it (no time bound), so a
 * schedule that loses a wake-up ends stuck with work left, and the checker reports it.
 */
import {
  ARG_KIND,
  LaunchRing,
  S_FINISHED,
  S_IMAGE,
  S_KERNEL,
  S_NARGS,
  H_DONE_COUNT,
  H_EPOCH,
} from '../../src/plugins/host/launch-ring.js';
import { HostAction, HostSide } from '../../src/plugins/host/launch-host-side.js';
import type { RingLaunch } from '../../src/plugins/host/launch-protocol.js';
import { WorkerAction, WorkerSide } from '../../src/plugins/host/launch-worker-side.js';
import { Fifo } from '../../src/plugins/fifo.js';
import type { InterleavedSystem } from './interleavings.js';

export interface ModelLaunch {
  teams: number;
  /** The program awaits this launch before it launches the next one. */
  awaited?: boolean;
  /** The pool may withdraw it while it is in flight (as a time limit does). */
  withdrawable?: boolean;
}

/** The machines a model runs: the production ones by default (a test may pass an older protocol, shaped alike). */
export interface Protocol {
  Host: new (ring: LaunchRing) => HostSide<Launch>;
  Worker: new (ring: LaunchRing, index: number) => WorkerSide;
  /** What each step of a publication does, for traces. */
  publication: string[];
}

const PRODUCTION: Protocol = {
  Host: HostSide<Launch>,
  Worker: WorkerSide,
  publication: [
    'payload',
    'arguments',
    'LIMIT = gen:teams',
    'STATE = READY',
    'TICKET = gen:0',
    'EPOCH += 1',
    'reads SLEEPERS',
  ],
};

export interface Scenario {
  slots: number;
  workers: number;
  launches: ModelLaunch[];
  /** How many workers may die on their own (each is replaced). */
  deaths?: number;
  /** Whether a blocked wait may return without a notify (production waits have a time bound). */
  spuriousWakeups?: boolean;
  /** Check safety only: a state where nothing can move is not reported (to look past a hang for a wrong result). */
  safetyOnly?: boolean;
}

export interface Launch extends RingLaunch {
  id: number;
}

/** What a thread must do before its protocol's next step. */
type Pending =
  | { kind: 'run' }
  | { kind: 'wait'; address: number; value: number }
  | { kind: 'notify'; address: number; count: number }
  | undefined;

interface ThreadState {
  pending: Pending;
  blocked: boolean;
  /** Killed by main (it may still take steps until it exits), or dead and gone. */
  doomed: boolean;
  dead: boolean;
}

interface Bookkeeping {
  next: number;
  /** Per launch: how many times each team ran; whether and how it was settled. */
  runs: number[][];
  settled: ('completed' | 'withdrawn' | undefined)[];
  /** Launch id per generation published. */
  byGen: Record<number, number>;
  deaths: number;
  exits: number[];
  /** Blocked threads per address, in the order they blocked (Atomics.notify wakes in that order). */
  waiters: Record<number, number[]>;
  threads: ThreadState[];
  violation?: string;
}

const PUBLISHER = 0;
const PUMP = 1;
const FIRST_WORKER = 2;

export class LaunchModel implements InterleavedSystem<unknown> {
  readonly ring: LaunchRing;
  private host: HostSide<Launch>;
  private workers: WorkerSide[];
  private book: Bookkeeping;
  private readonly launches: Launch[];

  constructor(
    private readonly scenario: Scenario,
    private readonly protocol: Protocol = PRODUCTION,
  ) {
    this.ring = LaunchRing.create({ slots: scenario.slots, workers: scenario.workers, maxArgs: 1, errorBytes: 4 });
    this.launches = scenario.launches.map((launch, id) => ({
      id,
      image: 100 + id,
      kernel: 200 + id,
      teams: launch.teams,
      threads: 1,
      kinds: [ARG_KIND.i32],
      values: [300 + id],
    }));
    this.host = new protocol.Host(this.ring);
    this.workers = Array.from({ length: scenario.workers }, (_, index) => new protocol.Worker(this.ring, index));
    this.book = {
      next: 0,
      runs: this.launches.map((launch) => new Array<number>(launch.teams).fill(0)),
      settled: this.launches.map(() => undefined),
      byGen: {},
      deaths: 0,
      exits: [],
      waiters: {},
      threads: Array.from({ length: FIRST_WORKER + scenario.workers }, () => ({
        pending: undefined,
        blocked: false,
        doomed: false,
        dead: false,
      })),
    };
    this.wireSettlement();
  }

  private wireSettlement(): void {
    this.host.onSettled = (launch, trap) => {
      if (trap !== undefined) this.fail(`launch ${launch.id} trapped: ${trap}`);
      if (this.book.settled[launch.id]) this.fail(`launch ${launch.id} was settled twice`);
      const missing = this.book.runs[launch.id]!.flatMap((count, team) =>
        count === 1 ? [] : [`team ${team} ran ${count} times`],
      );
      if (missing.length > 0) this.fail(`launch ${launch.id} completed, but ${missing.join(', ')}`);
      this.book.settled[launch.id] = 'completed';
    };
  }

  private fail(message: string): void {
    this.book.violation ??= message;
  }

  /** The next launch the program may make now, if any. */
  private available(): Launch | undefined {
    const next = this.launches[this.book.next];
    if (!next) return undefined;
    const previous = this.book.next > 0 ? this.scenario.launches[this.book.next - 1] : undefined;
    if (previous?.awaited && !this.book.settled[this.book.next - 1]) return undefined;
    return next;
  }

  /** The pump is at an await (between rounds, or blocked in its wait): main's other work may run. */
  private pumpAwaiting(): boolean {
    const pump = this.book.threads[PUMP]!;
    return pump.blocked || (!pump.pending && this.host.betweenRounds);
  }

  /** Main is inside a synchronous stretch of the publisher (a publication, its notify). */
  private publisherBusy(): boolean {
    return this.host.midPublication || this.book.threads[PUBLISHER]!.pending !== undefined;
  }

  runnable(): number[] {
    const threads = this.book.threads;
    const result: number[] = [];
    if (this.publisherBusy() || (this.pumpAwaiting() && (this.host.publishing || this.available())))
      result.push(PUBLISHER);
    if (!this.publisherBusy() && this.pumpRunnable()) result.push(PUMP);
    for (let w = 0; w < this.workers.length; w++) {
      const state = threads[FIRST_WORKER + w]!;
      if (state.dead) continue;
      if (!state.blocked || this.scenario.spuriousWakeups) result.push(FIRST_WORKER + w);
      // A killed worker may exit at any time; a live one may die (up to the budget).
      if (state.doomed || this.book.deaths < (this.scenario.deaths ?? 0)) result.push(-(FIRST_WORKER + w));
    }
    return result;
  }

  private pumpRunnable(): boolean {
    const pump = this.book.threads[PUMP]!;
    // Events reach main while the pump awaits: a worker's exit, a time limit passing.
    if (this.pumpAwaiting() && (this.book.exits.length > 0 || this.withdrawable())) return true;
    if (pump.blocked) return this.scenario.spuriousWakeups === true;
    return pump.pending !== undefined || this.host.pumpHasWork;
  }

  /** A launch in flight that the pool may withdraw now (its time limit passed). */
  private withdrawable(): Launch | undefined {
    for (const [, flight] of this.host.inFlight) {
      if (this.scenario.launches[flight.launch.id]!.withdrawable) return flight.launch;
    }
    return undefined;
  }

  step(thread: number): string {
    if (thread < 0) return this.exit(-thread);
    if (thread === PUBLISHER) return this.publisherStep();
    if (thread === PUMP) return this.pumpStep();
    return this.workerStep(thread);
  }

  /** Performs a pending wait or notify of `thread` (or a spurious wake-up); returns its trace line, or undefined if none. */
  private driverStep(thread: number, who: string): string | undefined {
    const state = this.book.threads[thread]!;
    const pending = state.pending;
    if (state.blocked) {
      this.unblock(thread);
      return `${who}: wakes up without a notify (the wait's time bound)`;
    }
    if (!pending || pending.kind === 'run') return undefined;
    state.pending = undefined;
    const name = pending.address === H_EPOCH ? 'EPOCH' : 'DONE_COUNT';
    if (pending.kind === 'wait') {
      const value = Atomics.load(this.ring.i32, pending.address);
      if (value !== pending.value) return `${who}: wait on ${name}: it is ${value}, not ${pending.value}; goes on`;
      state.blocked = true;
      (this.book.waiters[pending.address] ??= []).push(thread);
      return `${who}: waits on ${name} = ${value}`;
    }
    const woken = (this.book.waiters[pending.address] ?? []).slice(0, pending.count);
    for (const t of woken) this.unblock(t);
    return `${who}: notifies ${name} (up to ${pending.count}): wakes ${woken.length ? woken.map((t) => this.name(t)).join(', ') : 'nobody'}`;
  }

  private unblock(thread: number): void {
    this.book.threads[thread]!.blocked = false;
    for (const list of Object.values(this.book.waiters))
      if (list.includes(thread)) list.splice(list.indexOf(thread), 1);
  }

  private name(thread: number): string {
    return thread === PUBLISHER ? 'main(publish)' : thread === PUMP ? 'main(pump)' : `worker ${thread - FIRST_WORKER}`;
  }

  private publisherStep(): string {
    const driven = this.driverStep(PUBLISHER, 'main(publish)');
    if (driven) return driven;
    if (!this.host.midPublication && !this.host.publishing) {
      const launch = this.available()!;
      this.book.next++;
      this.host.submit(launch);
      if (!this.host.publishing)
        return `main(publish): launch ${launch.id} (${launch.teams} teams) waits for a free slot`;
    }
    const before = this.publication();
    const action = this.host.publishStep();
    const pub = before ?? this.publication()!;
    if (action === HostAction.WakeWorkers)
      this.book.threads[PUBLISHER]!.pending = { kind: 'notify', address: H_EPOCH, count: this.host.wake };
    return `main(publish): launch ${pub.launch.id} gen ${pub.gen} slot ${pub.slot}: ${this.protocol.publication[before?.pc ?? 0]}`;
  }

  /** The publication under way (read before a step: its pc is the step about to be taken). */
  private publication(): { pc: number; gen: number; slot: number; launch: Launch } | undefined {
    const pub = (this.host as unknown as { pub?: { pc: number; gen: number; slot: number; launch: Launch } }).pub;
    if (pub) this.book.byGen[pub.gen] = pub.launch.id;
    return pub && { ...pub };
  }

  private pumpStep(): string {
    const state = this.book.threads[PUMP]!;
    if (this.pumpAwaiting()) {
      const exit = this.book.exits.shift();
      if (exit !== undefined) return this.workerExited(exit);
      const late = this.withdrawable();
      if (late) {
        // The launch's time limit passed: the pool settles it, withdraws it and wakes its pump.
        const slot = [...this.host.inFlight].find(([, flight]) => flight.launch === late)![0];
        this.host.withdraw(slot);
        this.settleWithdrawn(late);
        this.unblock(PUMP);
        state.pending = undefined;
        return `main(pump): launch ${late.id} ran out of time: withdrawn from slot ${slot}`;
      }
    }
    const driven = this.driverStep(PUMP, 'main(pump)');
    if (driven) return driven;
    const pc = (this.host as unknown as { pumpPc: number }).pumpPc;
    let action = this.host.pumpStep();
    // The end of a scan and a retire check with nothing to retire touch no shared memory.
    while (action === HostAction.Continue && this.pumpNextIsLocal()) action = this.host.pumpStep();
    if (action === HostAction.Wait) state.pending = { kind: 'wait', address: H_DONE_COUNT, value: this.host.seen };
    if (action === HostAction.Kill) {
      this.book.threads[FIRST_WORKER + this.host.victim]!.doomed = true;
      return `main(pump): withdrawal: kills worker ${this.host.victim}`;
    }
    const names = ['SEEN', 'STATE', 'TRAPPED', 'FREE', 'RETIRE'];
    return `main(pump): ${names[pc]} -> ${Object.keys(HostAction)[action]}`;
  }

  private pumpNextIsLocal(): boolean {
    const h = this.host as unknown as {
      pumpPc: number;
      scan: number[];
      scanIndex: number;
      retireCandidates: number[];
      withdrawals: unknown[];
    };
    if (h.withdrawals.length > 0) return false;
    return (h.pumpPc === 1 && h.scanIndex === h.scan.length) || (h.pumpPc === 4 && h.retireCandidates.length === 0);
  }

  /** Main's handler of a worker's exit: clear its cell, withdraw the launch it ran, start a new worker in its place. */
  private workerExited(index: number): string {
    const slot = this.host.workerExited(index);
    let line = `main(pump): worker ${index} exited: its cell is cleared`;
    if (slot !== undefined) {
      const launch = this.host.inFlight.get(slot)!.launch;
      this.host.withdraw(slot);
      this.settleWithdrawn(launch);
      line += `; its launch ${launch.id} in slot ${slot} is withdrawn`;
    }
    // The pool wakes its pump after every exit: a slot may have stopped retiring.
    this.unblock(PUMP);
    this.book.threads[PUMP]!.pending = undefined;
    this.workers[index] = new this.protocol.Worker(this.ring, index);
    this.book.threads[FIRST_WORKER + index] = { pending: undefined, blocked: false, doomed: false, dead: false };
    return `${line}; a new worker ${index} starts`;
  }

  private settleWithdrawn(launch: Launch): void {
    if (this.book.settled[launch.id]) this.fail(`launch ${launch.id} was settled twice`);
    this.book.settled[launch.id] = 'withdrawn';
  }

  private workerStep(thread: number): string {
    const index = thread - FIRST_WORKER;
    const who = `worker ${index}${this.book.threads[thread]!.doomed ? ' (killed)' : ''}`;
    const driven = this.driverStep(thread, who);
    if (driven) return driven;
    const side = this.workers[index]!;
    const state = this.book.threads[thread]!;
    if (state.pending?.kind === 'run') {
      state.pending = undefined;
      return `${who}: ${this.runTeam(side)}`;
    }
    const name = side.next;
    const slot = side.slot;
    let action = side.step();
    // Steps that touch nothing another thread writes commute with every other step: take them
    // at once (reading STOP, which the model never sets; the end of a scan; entering a wait).
    while (
      action !== WorkerAction.Stop &&
      (side.next === 'STOP' || side.next === 'WAIT' || (side.next === 'STATE' && side.slot === this.ring.shape.slots))
    ) {
      action = side.step();
    }
    switch (action) {
      case WorkerAction.RunTeam:
        state.pending = { kind: 'run' };
        return `${who}: ${name} slot ${slot}: claims team ${side.team} of gen ${side.gen}`;
      case WorkerAction.Sleep:
        state.pending = { kind: 'wait', address: H_EPOCH, value: side.epoch };
        break;
      case WorkerAction.WakeMain:
        state.pending = { kind: 'notify', address: H_DONE_COUNT, count: 1 };
        break;
      case WorkerAction.Stop:
        // Killed: its cell move failed, so it returns and its thread ends.
        return `${who}: ${name} slot ${slot}: finds itself killed and stops; ${this.exit(thread)}`;
      default:
        break;
    }
    return `${who}: ${name}${name === 'SCAN' ? '' : ` slot ${slot}`}`;
  }

  /** The kernel: reads the slot's payload as a worker's driver does and counts the team as run. */
  private runTeam(side: WorkerSide): string {
    const { i32, f64 } = this.ring;
    const slot = side.slot;
    const id = this.book.byGen[side.gen];
    const payload = {
      image: i32[this.ring.at(slot, S_IMAGE)]!,
      kernel: i32[this.ring.at(slot, S_KERNEL)],
      nargs: i32[this.ring.at(slot, S_NARGS)],
      arg: f64[this.ring.arg(slot, 0)],
    };
    // A driver that read the payload before the run (the first protocol did) runs with what it read.
    const read = (side as { payloadImage?: number }).payloadImage;
    if (read !== undefined) Object.assign(payload, { image: read, kernel: read + 100, arg: read + 200 });
    const launch = id === undefined ? undefined : this.launches[id]!;
    const ran = `runs team ${side.team} of gen ${side.gen} with the payload of launch ${payload.image - 100}`;
    if (!launch) {
      this.fail(`a worker runs a team of generation ${side.gen}, which was never published`);
      return ran;
    }
    if (
      payload.image !== launch.image ||
      payload.kernel !== launch.kernel ||
      payload.nargs !== 1 ||
      payload.arg !== launch.values[0]
    ) {
      this.fail(
        `worker ${side.index} runs team ${side.team} of launch ${launch.id} with another launch's payload (${JSON.stringify(payload)})`,
      );
    }
    if (side.teams !== launch.teams || side.team >= launch.teams)
      this.fail(`worker ${side.index} runs team ${side.team} of launch ${launch.id}, which has ${launch.teams} teams`);
    const runs = this.book.runs[launch.id]!;
    runs[side.team] = (runs[side.team] ?? 0) + 1;
    if (runs[side.team]! > 1) this.fail(`team ${side.team} of launch ${launch.id} ran twice`);
    return ran;
  }

  private exit(thread: number): string {
    const state = this.book.threads[thread]!;
    const index = thread - FIRST_WORKER;
    const how = state.doomed ? 'exits (killed)' : 'dies';
    if (!state.doomed) this.book.deaths++;
    state.doomed = false;
    this.unblock(thread);
    state.dead = true;
    state.pending = undefined;
    this.book.exits.push(index);
    return `worker ${index} ${how} at ${this.workers[index]!.next}`;
  }

  violation(): string | undefined {
    if (this.book.violation) return this.book.violation;
    for (const [slot, flight] of this.host.inFlight) {
      const finished = Atomics.load(this.ring.i32, this.ring.at(slot, S_FINISHED));
      if (finished > flight.launch.teams)
        return `slot ${slot} counts ${finished} finished teams of launch ${flight.launch.id}, which has ${flight.launch.teams}`;
    }
    return undefined;
  }

  stuck(): string | undefined {
    if (this.scenario.safetyOnly) return undefined;
    const open = this.launches.filter((launch) => !this.book.settled[launch.id]).map((launch) => launch.id);
    if (open.length === 0) return undefined;
    const blocked = this.book.threads.map((t, i) => (t.blocked ? this.name(i) : '')).filter(Boolean);
    return `nothing can move, but launches ${open.join(', ')} never completed (blocked: ${blocked.join(', ') || 'none'}): a lost wake-up`;
  }

  /**
   * The state, with what no step will read again left out: registers of a state machine that
   * its current step overwrites before reading them, the pump's scan once a round is over, the
   * consumed part of the FIFO. (Keeping them would only split equal states apart.)
   *
   * Workers are interchangeable, so the workers are listed in a canonical order (by their own
   * state), with their cells and every mention of them renumbered to match: states that differ
   * only in which worker is which are explored once. Not while main scans the workers in index
   * order (a withdrawal or a retire check is under way): then the order matters.
   */
  fingerprint(): (Uint8Array | string)[] {
    const h = this.host as unknown as HostFields<Launch>;
    const b = this.book;
    const { i32 } = this.ring;
    const own = this.workers.map((w, index) => {
      const live = liveRegisters(w);
      const t = b.threads[FIRST_WORKER + index]!;
      live.push(
        i32[this.ring.cell(index)],
        `${+t.blocked}${+t.doomed}${+t.dead}${t.pending ? Object.values(t.pending).join('.') : ''}`,
      );
      return live.join(',');
    });
    const ordered = h.withdrawals.length > 0 || h.pumpPc === 4;
    const order = own.map((_, index) => index);
    if (!ordered) order.sort((a, c) => (own[a]! < own[c]! ? -1 : own[a]! > own[c]! ? 1 : 0));
    const rename = new Map<number, number>(
      order.map((index, position) => [FIRST_WORKER + index, FIRST_WORKER + position]),
    );
    const thread = (t: number): number => rename.get(t) ?? t;
    const memory = new Uint8Array(this.ring.buffer as unknown as ArrayBuffer).slice();
    const cells = new Int32Array(memory.buffer, this.ring.cell(0) * 4, order.length);
    order.forEach((index, position) => (cells[position] = i32[this.ring.cell(index)]!));
    const flights = [...h.inFlight].map(([slot, f]) => `${slot}:${f.launch.id}@${f.gen}`);
    const pub = h.pub ? `${h.pub.slot}:${h.pub.launch.id}@${h.pub.gen}/${h.pub.pc}` : '';
    const round =
      h.pumpPc === 0 ? '' : [h.scan, h.scanIndex, h.collected, h.retireCandidates, h.retireWorker, h.seen].join('/');
    const withdrawals = h.withdrawals.map((w) => `${w.slot}@${w.gen}/${w.pc}/${w.ticket}/${w.worker}/${w.cell}`);
    const host = [
      h.free,
      h.waiting.items.slice(h.waiting.head).map((l) => l.id),
      flights,
      [...h.retiring],
      withdrawals,
      pub,
      h.pumpPc,
      round,
      h.generation,
    ].join('|');
    const main = b.threads
      .slice(0, FIRST_WORKER)
      .map((t) => `${+t.blocked}${t.pending ? Object.values(t.pending).join('.') : ''}`);
    const waiters = Object.entries(b.waiters).map(([address, list]) => `${address}:${list.map(thread).join(',')}`);
    const book = [
      b.next,
      b.runs.join(';'),
      b.settled,
      Object.entries(b.byGen),
      b.deaths,
      b.exits.map((w) => thread(FIRST_WORKER + w)),
      waiters,
      main,
      b.violation ?? '',
    ].join('|');
    return [memory, host, order.map((index) => own[index]).join('|'), book];
  }

  save(): unknown {
    return {
      memory: new Uint8Array(this.ring.buffer).slice(),
      host: copyHost(this.host),
      workers: this.workers.map(copyWorker),
      book: copyBook(this.book),
    };
  }

  restore(saved: unknown, last: boolean): void {
    const s = saved as { memory: Uint8Array; host: HostSide<Launch>; workers: WorkerSide[]; book: Bookkeeping };
    new Uint8Array(this.ring.buffer).set(s.memory);
    this.host = last ? s.host : copyHost(s.host);
    this.workers = last ? s.workers : s.workers.map(copyWorker);
    this.book = last ? s.book : copyBook(s.book);
    this.wireSettlement();
  }
}

/** The registers a worker's next steps may read (all of them, for a machine other than WorkerSide). */
function liveRegisters(w: WorkerSide): unknown[] {
  if (!(w instanceof WorkerSide))
    return [
      JSON.stringify(w, (key, value: unknown) =>
        key === 'ring' ? undefined : typeof value === 'bigint' ? `${value}n` : value,
      ),
    ];
  const pc = w.next;
  const live: unknown[] = [pc];
  if (pc !== 'SCAN') live.push(w.slot);
  if (pc !== 'SCAN' && pc !== 'WOKE') live.push(w.epoch, w.ranAny);
  if (pc === 'LIMIT' || pc === 'CLAIM') live.push(w.ticket);
  if (pc === 'CLAIM') live.push(w.limit);
  if (pc === 'FINISH') live.push(w.gen, w.team, w.teams);
  return live;
}

/** A worker's registers are numbers and bigints (and the first protocol's small cache): copied field by field. */
function copyWorker(side: WorkerSide): WorkerSide {
  const copy = Object.assign(Object.create(Object.getPrototypeOf(side) as object) as WorkerSide, side);
  const views = (side as unknown as { views?: object[] }).views;
  if (views) Object.assign(copy, { views: views.map((view) => ({ ...view })) });
  return copy;
}

/** HostSide's private fields, as the model reads and copies them. */
interface HostFields<L> {
  free: number[];
  waiting: { items: L[]; head: number };
  inFlight: Map<number, { launch: L; gen: number }>;
  retiring: Set<number>;
  withdrawals: { slot: number; gen: number; pc: number; ticket: bigint; worker: number; cell: number }[];
  pub?: { slot: number; launch: L; gen: number; pc: number };
  pumpPc: number;
  scan: number[];
  scanIndex: number;
  collected: number;
  retireCandidates: number[];
  retireWorker: number;
  seen: number;
  generation: number;
}

/** HostSide's state, copied field by field (the model copies states millions of times). */
function copyHost<L extends RingLaunch>(host: HostSide<L>): HostSide<L> {
  const from = host as unknown as HostFields<L>;
  const copy = Object.assign(Object.create(Object.getPrototypeOf(host) as object) as HostFields<L>, from);
  copy.free = [...from.free];
  copy.waiting = Object.assign(new Fifo<L>(), { items: [...from.waiting.items], head: from.waiting.head });
  copy.inFlight = new Map([...from.inFlight].map(([slot, flight]) => [slot, { ...flight }]));
  copy.retiring = new Set(from.retiring);
  copy.withdrawals = from.withdrawals.map((w) => ({ ...w }));
  copy.pub = from.pub && { ...from.pub };
  copy.scan = [...from.scan];
  copy.retireCandidates = [...from.retireCandidates];
  return copy as unknown as HostSide<L>;
}

function copyBook(book: Bookkeeping): Bookkeeping {
  return {
    ...book,
    runs: book.runs.map((runs) => [...runs]),
    settled: [...book.settled],
    byGen: { ...book.byGen },
    exits: [...book.exits],
    waiters: Object.fromEntries(Object.entries(book.waiters).map(([address, list]) => [address, [...list]])),
    threads: book.threads.map((t) => ({ ...t })),
  };
}
