/**
 * The main thread's side of the launch protocol (publication P1-P6, collection and withdrawal of
 * launch-protocol.ts, which states the steps and the invariants they keep): worker-pool.ts drives it.
 */
import { Fifo } from '../fifo.js';
import {
  ARG_KIND,
  H_DONE_COUNT,
  H_EPOCH,
  H_SLEEPERS,
  type LaunchRing,
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
import { countOf, genOf, KILLED, killedCell, pack, type RingLaunch } from './launch-protocol.js';

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
