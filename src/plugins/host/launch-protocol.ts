/**
 * The launch protocol between the host device's main thread and its workers, over the ring laid
 * out in launch-ring.ts. Both sides are state machines whose every `step()` makes at most one
 * access to shared memory (a plain read or write of a launch's payload counts as one). The pool
 * and the workers run them back to back; test/launch-protocol.test.ts runs the very same steps in
 * every order they can interleave and checks the invariants below after each one.
 *
 * A slot holds one launch at a time:
 *   LIMIT    = gen:teams   the launch's generation (unique per publication) and team count
 *   TICKET   = gen:next    the next team to hand out; 64-bit, so a claim names its launch
 *   FINISHED   teams finished;   STATE  FREE | READY | DONE
 *   payload    image, kernel, threads, arguments;   TRAPPED and the trap message
 * and worker w has a cell: s + 1 while it works in slot s, -(s + 1) while it may hold one of its
 * teams, 0 otherwise.
 *
 * Main publishes launch L (generation g, T teams) into a FREE slot:
 *   P1 payload, FINISHED = 0, TRAPPED = 0 (plain writes)   P2 LIMIT = g:T   P3 STATE = READY
 *   P4 TICKET = g:0   P5 EPOCH += 1   P6 if SLEEPERS > 0: wake up to T workers waiting on EPOCH
 *   (READY before TICKET: a worker still in the slot may claim every team and store DONE as soon
 *   as TICKET opens them; a READY stored after that would overwrite DONE, and the launch would
 *   never complete. The first protocol did that; it is one of the hangs the model test finds.)
 * A worker:
 *   W1 e = EPOCH, then for each slot whose STATE is READY:
 *   W2   cell = slot + 1
 *   W3   t = TICKET   W4 l = LIMIT; if gen(t) != gen(l) or next(t) >= teams(l): go to W8
 *   W5   cell = -(slot + 1); compare-exchange TICKET from t to t + 1; if it had changed,
 *        cell = slot + 1 and back to W3
 *   W6   run team next(t) with the payload (it reads TRAPPED, sets it on a trap)
 *   W7   if ++FINISHED reached teams: STATE = DONE, DONE_COUNT += 1, wake main;
 *        then cell = slot + 1 and back to W3
 *   W8   cell = 0
 *   (The worker changes its cell only by compare-exchange: if main wrote `killed` there, the
 *   worker stops instead.)
 *   W9 if no slot gave it work: SLEEPERS += 1, wait on EPOCH while it is e, SLEEPERS -= 1; back to W1
 * Main collects: seen = DONE_COUNT; for each slot in flight whose STATE is DONE: read TRAPPED and
 *   the message, STATE = FREE, settle the launch; if none was, wait on DONE_COUNT while it is seen.
 * Main withdraws launch L of slot s (its time limit passed; a worker died holding one of its
 *   teams): compare-exchange TICKET from g:next to g:T (nothing more can be claimed), STATE = FREE,
 *   then for each worker whose cell is -(s + 1): compare-exchange it to killed(s) and kill it.
 *   s is reused once no cell is killed(s). Main clears a worker's cell once its thread has
 *   exited, and then runs its pump.
 *
 * Invariants:
 *  I1 Every team t < T of a published launch is claimed exactly once: W5 moves TICKET from g:t to
 *     g:t+1 at most once (it never moves back; only a new publication resets it, to a new
 *     generation), and never past g:T (W4). A stale worker's compare-exchange fails: the word
 *     carries the generation.
 *  I2 A claimed team runs with its own launch's payload: P1 precedes P2 and P4, and main writes
 *     the payload again only after it collected the slot (STATE == DONE), which needs FINISHED ==
 *     T, which needs this claim's W7: the slot cannot change under a claim. (The first protocol
 *     read the payload after checking the generation but while holding a stale ticket, so a
 *     republished slot ran a team twice: the model test finds that schedule.)
 *  I3 A launch completes exactly once, after its last team: FINISHED counts finishes of claims of
 *     the current generation only, so exactly one W7 sees T and marks DONE.
 *  I4 No wake-up is lost. A worker sleeps only while EPOCH still has the value it read before its
 *     scan; every publication stores READY and opens TICKET before it increments EPOCH. So
 *     either the scan saw the slot claimable, or the increment came after W1 and the wait returns
 *     at once (EPOCH != e) or finds the worker counted in SLEEPERS (incremented before it waits)
 *     and wakes it. Main waits for DONE_COUNT the same way. Waits keep a bound, but only as a cap
 *     on the cost of a bug: the model test checks progress with unbounded waits.
 *  I5 A withdrawn launch's slot is reused only when no worker can touch it. Only a worker that
 *     holds a claim writes a slot (FINISHED, TRAPPED, DONE), and it holds its cell at -(s + 1)
 *     from before its claim to after its last write. After the withdrawing compare-exchange no
 *     claim of the launch can succeed, so every worker that holds one had a negative cell when
 *     main looked, and was killed; its thread's exit ends it. A worker that merely looks at the
 *     slot (cell s + 1, or a negative cell whose claim then fails) writes nothing there, and any
 *     claim it tries after the slot is published again is a claim of the new launch.
 *  I6 A worker's death never leaves a launch waiting for a team nobody runs: its cell is
 *     negative from before its claim (W5) until FINISHED counts the team and, for the last team,
 *     DONE is signalled (W7), so main withdraws the launch of a worker that died holding a team
 *     (unless it is DONE); one that died holding none leaves the launch to the others. A killed
 *     worker that still runs claims nothing: its cell is killed(s), so its next move fails.
 */
import { Fifo } from '../fifo.js';
import {
  ARG_KIND,
  type ArgKind,
  H_DONE_COUNT,
  H_EPOCH,
  H_SLEEPERS,
  H_STOP,
  LaunchRing,
  STATE_DONE,
  STATE_FREE,
  STATE_READY,
  S_ERROR_LENGTH,
  S_FINISHED,
  S_IMAGE,
  S_KERNEL,
  S_LIMIT,
  S_NARGS,
  S_PRINT_DROPPED,
  S_PRINT_TAIL,
  S_SCRATCH,
  S_SCRATCH_REGION,
  S_STACK_BYTES,
  S_TEAM_BYTES,
  S_TEAMS_X,
  S_TEAMS_Y,
  S_THREADS_X,
  S_THREADS_Y,
  S_STATE,
  S_THREADS,
  S_TICKET,
  S_TRAPPED,
} from './launch-ring.js';

const LOW = 0xffffffffn;
const genOf = (word: bigint): number => Number(word >> 32n);
const countOf = (word: bigint): number => Number(word & LOW);
const pack = (gen: number, count: number): bigint => (BigInt(gen) << 32n) | BigInt(count);

/** What a worker's driver does after a step. */
export const WorkerAction = {
  /** Take the next step. */
  Continue: 0,
  /** A scan begins: handle control messages (image loads), then take the next step. */
  Scan: 1,
  /** Run team `team` of the launch in `slot` (generation `gen`, `teams` teams), then take the next step. */
  RunTeam: 2,
  /** Wait on EPOCH while it equals `epoch`, then take the next step. */
  Sleep: 3,
  /** Wake the main thread (notify DONE_COUNT), then take the next step. */
  WakeMain: 4,
  /** The pool is stopping: return. */
  Stop: 5,
} as const;
export type WorkerAction = (typeof WorkerAction)[keyof typeof WorkerAction];

const W = {
  SCAN: 0,
  STOP: 1,
  STATE: 2,
  ENTER: 3,
  TICKET: 4,
  LIMIT: 5,
  MARK: 6,
  CLAIM: 7,
  FINISH: 8,
  DONE: 9,
  SIGNAL: 10,
  UNMARK: 11,
  LEAVE: 12,
  SLEEP: 13,
  WAIT: 14,
  WOKE: 15,
} as const;
const WORKER_STEP_NAMES = Object.keys(W);

/**
 * Worker cells: 0 (nowhere), s + 1 (in slot s), -(s + 1) (may hold a team of slot s's launch),
 * or `killed(s)`: main has killed the worker while it might hold a team of slot s. Workers move
 * their own cell between the first three with compare-exchange, so once main has written
 * `killed(s)` the worker can claim nothing more (its next compare-exchange fails and it stops).
 */
const KILLED = 1 << 16;
const killedCell = (slot: number): number => -(slot + 1) - KILLED;

/** The worker's side of the protocol (W1-W9 above). */
export class WorkerSide {
  pc: number = W.SCAN;
  /** EPOCH as read at the start of the scan (the value a sleep waits on). */
  epoch = 0;
  slot = 0;
  /** Whether this scan ran a team (if not, the worker sleeps). */
  ranAny = false;
  ticket = 0n;
  limit = 0n;
  /** The claimed team: its launch's generation, its number and the launch's team count. */
  gen = 0;
  team = 0;
  teams = 0;
  /** Counts entries into slots: a driver's cache of a slot's payload is valid within one entry. */
  entry = 0;

  constructor(
    readonly ring: LaunchRing,
    readonly index: number,
  ) {}

  /** Moves this worker's cell from `from` to `to`; false if main killed it meanwhile. */
  private move(from: number, to: number): boolean {
    return Atomics.compareExchange(this.ring.i32, this.ring.cell(this.index), from, to) === from;
  }

  step(): WorkerAction {
    const { i32, i64 } = this.ring;
    const ring = this.ring;
    const slot = this.slot;
    switch (this.pc) {
      case W.SCAN:
        this.epoch = Atomics.load(i32, H_EPOCH);
        this.slot = 0;
        this.ranAny = false;
        this.pc = W.STOP;
        return WorkerAction.Scan;
      case W.STOP:
        if (Atomics.load(i32, H_STOP) !== 0) return WorkerAction.Stop;
        this.pc = W.STATE;
        return WorkerAction.Continue;
      case W.STATE:
        if (slot === ring.shape.slots) {
          this.pc = this.ranAny ? W.SCAN : W.SLEEP;
        } else if (Atomics.load(i32, ring.at(slot, S_STATE)) === STATE_READY) {
          this.pc = W.ENTER;
        } else {
          this.slot++;
        }
        return WorkerAction.Continue;
      case W.ENTER:
        if (!this.move(0, slot + 1)) return WorkerAction.Stop;
        this.entry++;
        this.pc = W.TICKET;
        return WorkerAction.Continue;
      case W.TICKET:
        this.ticket = Atomics.load(i64, ring.word(slot, S_TICKET));
        this.pc = W.LIMIT;
        return WorkerAction.Continue;
      case W.LIMIT:
        this.limit = Atomics.load(i64, ring.word(slot, S_LIMIT));
        this.pc =
          genOf(this.ticket) === genOf(this.limit) && countOf(this.ticket) < countOf(this.limit) ? W.MARK : W.LEAVE;
        return WorkerAction.Continue;
      case W.MARK:
        // Before the claim: a worker that dies from here on may hold a team, and main must know.
        if (!this.move(slot + 1, -(slot + 1))) return WorkerAction.Stop;
        this.pc = W.CLAIM;
        return WorkerAction.Continue;
      case W.CLAIM:
        if (Atomics.compareExchange(i64, ring.word(slot, S_TICKET), this.ticket, this.ticket + 1n) !== this.ticket) {
          this.pc = W.UNMARK;
          return WorkerAction.Continue;
        }
        this.gen = genOf(this.ticket);
        this.team = countOf(this.ticket);
        this.teams = countOf(this.limit);
        this.pc = W.FINISH;
        return WorkerAction.RunTeam;
      case W.FINISH:
        this.ranAny = true;
        this.pc = Atomics.add(i32, ring.at(slot, S_FINISHED), 1) + 1 === this.teams ? W.DONE : W.UNMARK;
        return WorkerAction.Continue;
      case W.DONE:
        Atomics.store(i32, ring.at(slot, S_STATE), STATE_DONE);
        this.pc = W.SIGNAL;
        return WorkerAction.Continue;
      case W.SIGNAL:
        Atomics.add(i32, H_DONE_COUNT, 1);
        this.pc = W.UNMARK;
        return WorkerAction.WakeMain;
      case W.UNMARK:
        // After FINISHED counts the team and, for the last one, DONE is signalled: from here on
        // a dead worker leaves nothing undone.
        if (!this.move(-(slot + 1), slot + 1)) return WorkerAction.Stop;
        this.pc = W.TICKET;
        return WorkerAction.Continue;
      case W.LEAVE:
        if (!this.move(slot + 1, 0)) return WorkerAction.Stop;
        this.slot++;
        this.pc = W.STATE;
        return WorkerAction.Continue;
      case W.SLEEP:
        Atomics.add(i32, H_SLEEPERS, 1);
        this.pc = W.WAIT;
        return WorkerAction.Continue;
      case W.WAIT:
        this.pc = W.WOKE;
        return WorkerAction.Sleep;
      case W.WOKE:
        Atomics.sub(i32, H_SLEEPERS, 1);
        this.pc = W.SCAN;
        return WorkerAction.Continue;
      default:
        throw new Error(`worker step ${this.pc} does not exist`);
    }
  }

  /** The name of the step `step()` takes next (for the model test's traces). */
  get next(): string {
    return WORKER_STEP_NAMES[this.pc]!;
  }
}

/** A launch as the ring sees it: everything already checked and lowered to numbers. */
export interface RingLaunch {
  image: number;
  kernel: number;
  teams: number;
  threads: number;
  kinds: readonly ArgKind[];
  /** number for i32/f32/f64/ptr, bigint for i64, in parameter order. */
  values: readonly (number | bigint)[];
  /** Dimensions, team memory and scratch of a launch with more than one dimension or thread (team-threads.ts); none: 1-D, one thread. */
  shape?: TeamShape;
}

/** What a team run needs beyond its id (team-threads.ts says how workers use it). */
export interface TeamShape {
  teamsX: number;
  teamsY: number;
  threadsX: number;
  threadsY: number;
  /** Address of the launch's scratch memory: one region per worker (and one for the calling thread). */
  scratch: number;
  regionBytes: number;
  teamMemoryBytes: number;
  /** Bytes of asyncify stack per thread (0: the kernel has no barrier). */
  stackBytes: number;
}

/** What the pool does after a step of the main side. */
export const HostAction = {
  /** Take the next step. */
  Continue: 0,
  /** Wake up to `wake` workers sleeping on EPOCH, then take the next step. */
  WakeWorkers: 1,
  /** Launches completed in this round (settled through `onSettled`): let their continuations run, then go on. */
  Collected: 2,
  /** Nothing completed: wait on DONE_COUNT while it equals `seen`, then go on. */
  Wait: 3,
  /** Kill worker `victim` (it may be running a withdrawn launch), then take the next step. */
  Kill: 4,
  /** Nothing is in flight: the pump may stop. */
  Idle: 5,
} as const;
export type HostAction = (typeof HostAction)[keyof typeof HostAction];

const P = { PAYLOAD: 0, ARGS: 1, LIMIT: 2, READY: 3, TICKET: 4, EPOCH: 5, SLEEPERS: 6 } as const;
const C = { SEEN: 0, STATE: 1, TRAPPED: 2, FREE: 3, RETIRE: 4 } as const;
const X = { TICKET: 0, EXHAUST: 1, FREE: 2, CELLS: 3, KILL: 4 } as const;

interface InFlight<L> {
  launch: L;
  gen: number;
}

interface Withdrawal {
  slot: number;
  gen: number;
  teams: number;
  pc: number;
  ticket: bigint;
  /** The worker whose cell is looked at, and what it said. */
  worker: number;
  cell: number;
}

/**
 * The main thread's side of the protocol: publication (P1-P6), collection and withdrawal. The
 * pool calls `publishStep()` while `publishing` is true and `pumpStep()` from its pump; `L` is
 * the pool's launch record.
 */
export class HostSide<L extends RingLaunch> {
  // Protected, not private: the model test's transcript of the first protocol overrides publishStep.
  protected readonly free: number[] = [];
  protected readonly waiting = new Fifo<L>();
  readonly inFlight = new Map<number, InFlight<L>>();
  /** Slots of withdrawn launches, reused once the workers killed for them have exited. */
  private readonly retiring = new Set<number>();
  private readonly withdrawals: Withdrawal[] = [];
  protected generation = 0;
  /** The publication under way. */
  protected pub: { slot: number; launch: L; gen: number; pc: number } | undefined;
  private pumpPc: number = C.SEEN;
  private scan: number[] = [];
  private scanIndex = 0;
  private collected = 0;
  private retireCandidates: number[] = [];
  private retireWorker = 0;
  /** After WakeWorkers: how many. After Wait: the DONE_COUNT value to wait on. After Kill: whom. */
  wake = 0;
  seen = 0;
  victim = 0;
  /**
   * Told of each completed launch, with its trap message if it trapped, and its slot (whose
   * print records stay as the teams left them until this returns).
   */
  onSettled: (launch: L, trap: string | undefined, slot: number) => void = () => {};

  constructor(readonly ring: LaunchRing) {
    for (let slot = ring.shape.slots - 1; slot >= 0; slot--) this.free.push(slot);
  }

  /**
   * Whether a team of the launch in flight in `slot` has been claimed: it has begun to run, not
   * only to wait for a worker. A read of TICKET, outside the protocol's steps.
   */
  begun(slot: number): boolean {
    const flight = this.inFlight.get(slot);
    if (!flight) return false;
    const ticket = Atomics.load(this.ring.i64, this.ring.word(slot, S_TICKET));
    return genOf(ticket) === flight.gen && countOf(ticket) > 0;
  }

  /** Queues a launch; it is published when a slot is free. */
  submit(launch: L): void {
    this.waiting.push(launch);
  }

  /** True while a publication is under way or can start. */
  get publishing(): boolean {
    return this.pub !== undefined || (this.waiting.length > 0 && this.free.length > 0);
  }

  /** True when a publication has begun and not ended (its steps run back to back). */
  get midPublication(): boolean {
    return this.pub !== undefined;
  }

  /** True when the pump is between rounds: no collection scan or withdrawal is half done. */
  get betweenRounds(): boolean {
    return this.pumpPc === C.SEEN && this.withdrawals.length === 0;
  }

  /** True when the pump has something to do: launches in flight, withdrawals, or slots to retire that launches wait for. */
  get pumpHasWork(): boolean {
    return (
      this.inFlight.size > 0 ||
      this.withdrawals.length > 0 ||
      !this.betweenRounds ||
      (this.retiring.size > 0 && this.waiting.length > 0)
    );
  }

  /** Removes and returns the launches not yet published that `match` (all of them by default). */
  drainWaiting(match: (launch: L) => boolean = () => true): L[] {
    const all = this.waiting.drain();
    for (const launch of all) if (!match(launch)) this.waiting.push(launch);
    return all.filter(match);
  }

  publishStep(): HostAction {
    const { i32, f64, i64 } = this.ring;
    const ring = this.ring;
    if (!this.pub) {
      const slot = this.free.pop()!;
      const launch = this.waiting.shift()!;
      this.generation = (this.generation + 1) | 0;
      this.pub = { slot, launch, gen: this.generation, pc: P.PAYLOAD };
    }
    const pub = this.pub;
    const { slot, launch } = pub;
    switch (pub.pc) {
      case P.PAYLOAD:
        i32[ring.at(slot, S_IMAGE)] = launch.image;
        i32[ring.at(slot, S_KERNEL)] = launch.kernel;
        i32[ring.at(slot, S_THREADS)] = launch.threads;
        i32[ring.at(slot, S_NARGS)] = launch.values.length;
        i32[ring.at(slot, S_TEAMS_X)] = launch.shape?.teamsX ?? launch.teams;
        i32[ring.at(slot, S_TEAMS_Y)] = launch.shape?.teamsY ?? 1;
        i32[ring.at(slot, S_THREADS_X)] = launch.shape?.threadsX ?? launch.threads;
        i32[ring.at(slot, S_THREADS_Y)] = launch.shape?.threadsY ?? 1;
        i32[ring.at(slot, S_SCRATCH)] = launch.shape?.scratch ?? 0;
        i32[ring.at(slot, S_SCRATCH_REGION)] = launch.shape?.regionBytes ?? 0;
        i32[ring.at(slot, S_TEAM_BYTES)] = launch.shape?.teamMemoryBytes ?? 0;
        i32[ring.at(slot, S_STACK_BYTES)] = launch.shape?.stackBytes ?? 0;
        i32[ring.at(slot, S_FINISHED)] = 0;
        i32[ring.at(slot, S_TRAPPED)] = 0;
        i32[ring.at(slot, S_ERROR_LENGTH)] = 0;
        i32[ring.at(slot, S_PRINT_TAIL)] = 0;
        i32[ring.at(slot, S_PRINT_DROPPED)] = 0;
        pub.pc = P.ARGS;
        return HostAction.Continue;
      case P.ARGS:
        for (let a = 0; a < launch.values.length; a++) {
          const value = launch.values[a]!;
          if (launch.kinds[a] === ARG_KIND.i64) i64[ring.arg(slot, a)] = value as bigint;
          else f64[ring.arg(slot, a)] = value as number;
        }
        pub.pc = P.LIMIT;
        return HostAction.Continue;
      case P.LIMIT:
        Atomics.store(i64, ring.word(slot, S_LIMIT), pack(pub.gen, launch.teams));
        pub.pc = P.READY;
        return HostAction.Continue;
      case P.READY:
        Atomics.store(i32, ring.at(slot, S_STATE), STATE_READY);
        pub.pc = P.TICKET;
        return HostAction.Continue;
      case P.TICKET:
        // Last: from here on teams can be claimed, and the last one may store DONE at once.
        Atomics.store(i64, ring.word(slot, S_TICKET), pack(pub.gen, 0));
        this.inFlight.set(slot, { launch, gen: pub.gen });
        pub.pc = P.EPOCH;
        return HostAction.Continue;
      case P.EPOCH:
        Atomics.add(i32, H_EPOCH, 1);
        pub.pc = P.SLEEPERS;
        return HostAction.Continue;
      default: {
        // P.SLEEPERS: the last step.
        this.pub = undefined;
        if (Atomics.load(i32, H_SLEEPERS) === 0) return HostAction.Continue;
        this.wake = launch.teams;
        return HostAction.WakeWorkers;
      }
    }
  }

  /**
   * Withdraws the launch in flight in `slot` (the caller settles it): no team of it starts any
   * more, the workers running it are killed (Kill actions of the next pump steps), and the slot
   * is reused once none of them can touch it.
   */
  withdraw(slot: number): void {
    const flight = this.inFlight.get(slot);
    if (!flight) return;
    this.inFlight.delete(slot);
    this.retiring.add(slot);
    this.withdrawals.push({
      slot,
      gen: flight.gen,
      teams: flight.launch.teams,
      pc: X.TICKET,
      ticket: 0n,
      worker: 0,
      cell: 0,
    });
  }

  /**
   * Worker `worker` has exited (killed, or dead on its own). Clears its cell and returns the
   * slot of the launch it was working on, if that launch is still in flight (it can never
   * complete now: the caller withdraws it with the reason).
   */
  workerExited(worker: number): number | undefined {
    const { i32 } = this.ring;
    const cell = this.ring.cell(worker);
    const value = Atomics.exchange(i32, cell, 0);
    // -(s + 1): it may have held a team of slot s's launch, which then never finishes; unless
    // that launch is DONE already (it was the last team, and signalled).
    const slot = -value - 1;
    if (value >= 0 || value <= -KILLED || !this.inFlight.has(slot)) return undefined;
    return Atomics.load(i32, this.ring.at(slot, S_STATE)) === STATE_DONE ? undefined : slot;
  }

  pumpStep(): HostAction {
    if (this.withdrawals.length > 0) return this.withdrawStep(this.withdrawals[0]!);
    const { i32 } = this.ring;
    const ring = this.ring;
    switch (this.pumpPc) {
      case C.SEEN:
        if (!this.pumpHasWork) return HostAction.Idle;
        this.seen = Atomics.load(i32, H_DONE_COUNT);
        this.scan = [...this.inFlight.keys()];
        this.scanIndex = 0;
        this.collected = 0;
        this.pumpPc = C.STATE;
        return HostAction.Continue;
      case C.STATE: {
        if (this.scanIndex === this.scan.length) {
          if (this.collected > 0) {
            this.pumpPc = C.SEEN;
            return HostAction.Collected;
          }
          this.retireCandidates = [...this.retiring];
          this.retireWorker = 0;
          this.pumpPc = C.RETIRE;
          return HostAction.Continue;
        }
        const slot = this.scan[this.scanIndex]!;
        if (this.inFlight.has(slot) && Atomics.load(i32, ring.at(slot, S_STATE)) === STATE_DONE)
          this.pumpPc = C.TRAPPED;
        else this.scanIndex++;
        return HostAction.Continue;
      }
      case C.TRAPPED: {
        const slot = this.scan[this.scanIndex]!;
        const flight = this.inFlight.get(slot);
        if (!flight) {
          // Withdrawn since its STATE was read: the withdrawal owns the slot now.
          this.scanIndex++;
          this.pumpPc = C.STATE;
          return HostAction.Continue;
        }
        const trapped = Atomics.load(i32, ring.at(slot, S_TRAPPED)) !== 0;
        this.inFlight.delete(slot);
        this.pumpPc = C.FREE;
        this.onSettled(flight.launch, trapped ? ring.errorText(slot) : undefined, slot);
        return HostAction.Continue;
      }
      case C.FREE: {
        const slot = this.scan[this.scanIndex++]!;
        Atomics.store(i32, ring.at(slot, S_STATE), STATE_FREE);
        this.free.push(slot);
        this.collected++;
        this.pumpPc = C.STATE;
        return HostAction.Continue;
      }
      default: {
        // C.RETIRE: a retiring slot is free again once every worker killed for it has exited.
        const slot = this.retireCandidates[0];
        if (slot === undefined) {
          this.pumpPc = C.SEEN;
          return HostAction.Wait;
        }
        if (this.retireWorker === ring.shape.workers) {
          this.retiring.delete(slot);
          this.free.push(slot);
          this.retireCandidates.shift();
          this.retireWorker = 0;
        } else if (Atomics.load(i32, ring.cell(this.retireWorker)) === killedCell(slot)) {
          this.retireCandidates.shift();
          this.retireWorker = 0;
        } else {
          this.retireWorker++;
        }
        return HostAction.Continue;
      }
    }
  }

  private withdrawStep(w: Withdrawal): HostAction {
    const { i32, i64 } = this.ring;
    const ring = this.ring;
    switch (w.pc) {
      case X.TICKET:
        w.ticket = Atomics.load(i64, ring.word(w.slot, S_TICKET));
        w.pc = X.EXHAUST;
        return HostAction.Continue;
      case X.EXHAUST: {
        const exhausted = pack(w.gen, w.teams);
        if (
          w.ticket !== exhausted &&
          Atomics.compareExchange(i64, ring.word(w.slot, S_TICKET), w.ticket, exhausted) !== w.ticket
        ) {
          w.pc = X.TICKET;
        } else {
          w.pc = X.FREE;
        }
        return HostAction.Continue;
      }
      case X.FREE:
        Atomics.store(i32, ring.at(w.slot, S_STATE), STATE_FREE);
        w.pc = X.CELLS;
        return HostAction.Continue;
      case X.CELLS:
        // One worker cell per step: a worker that may hold a team of the launch is killed.
        if (w.worker === ring.shape.workers) {
          this.withdrawals.shift();
          return HostAction.Continue;
        }
        w.cell = Atomics.load(i32, ring.cell(w.worker));
        if (w.cell === -(w.slot + 1)) {
          w.pc = X.KILL;
        } else {
          w.worker++;
        }
        return HostAction.Continue;
      default:
        // X.KILL: the cell still says so (or the worker moved on, and is looked at again).
        w.pc = X.CELLS;
        if (Atomics.compareExchange(i32, ring.cell(w.worker), w.cell, killedCell(w.slot)) !== w.cell)
          return HostAction.Continue;
        this.victim = w.worker++;
        return HostAction.Kill;
    }
  }
}
