/**
 * A worker's side of the launch protocol (W1-W9 of launch-protocol.ts, which states the steps and
 * the invariants they keep): worker-loop.ts drives it and does what each step asks.
 */
import {
  H_DONE_COUNT,
  H_EPOCH,
  H_SLEEPERS,
  H_STOP,
  type LaunchRing,
  STATE_DONE,
  STATE_READY,
  S_FINISHED,
  S_LIMIT,
  S_STATE,
  S_TICKET,
} from './launch-ring.js';
import { countOf, genOf } from './launch-protocol.js';

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

/** The worker's side of the protocol (W1-W9 in launch-protocol.ts). */
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
