/**
 * The host device's host-call mailbox (src/plugins/host/host-calls.ts), model-checked like the
 * launch protocol (test/launch-protocol.test.ts): every interleaving of 1-2 workers calling, the
 * main thread's pump serving the mailboxes, the program's answers arriving at any time, and a
 * worker killed at any step of its call and replaced, explored exhaustively
 * (test/helpers/interleavings.ts). The main side is the production code (HostCallServer's serve
 * and answer, resetMailbox) on a real ring; the worker side is callHost's steps as it orders its
 * accesses (callHost blocks in Atomics.wait, so it is played here one shared access at a time).
 *
 * Checked after every step, as the header of host-calls.ts states them:
 *   M1 STATE moves only IDLE -> CALLING (the worker, next call number), CALLING -> ANSWERED or
 *      FAILED (main, the same call), ANSWERED or FAILED -> IDLE (the worker), or to IDLE by a
 *      replacement's reset; and a worker reads the answer written for its own call.
 *   M2 main answers each call at most once, and only a call waiting in the mailbox.
 *   M3 no call is missed: a state where nothing can move with a live worker still waiting is a
 *      violation (waits are exact: only a notify or a changed word wakes them).
 *   M4 a late answer to a killed worker's call never answers its replacement's call.
 * The answer as it was before this check found its fault (it wrote the result before looking
 * at STATE, so a late answer could overwrite the result of the replacement's call after that
 * was answered) is checked too, as a witness that the checker finds it.
 */
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { H_DONE_COUNT, LaunchRing } from '../src/plugins/host/launch-ring.js';
import { HostCallServer, resetMailbox } from '../src/plugins/host/host-calls.js';
import { describeViolation, explore, type InterleavedSystem } from './helpers/interleavings.js';

// The mailbox's layout, as host-calls.ts has it (int32 words, float64 slots, byte offsets).
const M_STATE = 0;
const M_SLOT = 1;
const M_ARGC = 2;
const M_NAME_LENGTH = 3;
const M_ARGS_F64 = 3;
const M_RESULT_F64 = 9;
const M_NAME = 80;
const M_MESSAGE = 592;
const M_MESSAGE_LENGTH = 4;
const MAILBOX_BYTES = 1024;
const [IDLE, CALLING, ANSWERED, FAILED] = [0, 1, 2, 3];
const STATES = ['IDLE', 'CALLING', 'ANSWERED', 'FAILED'];
const word = (call: number, state: number): number => (call << 2) | state;
const show = (w: number): string => `${w >>> 2}:${STATES[w & 3]}`;

interface Scenario {
  workers: number;
  /** Calls each worker (and each replacement) makes. */
  calls: number;
  /** Workers the pool may kill (each is replaced by one that resets the mailbox first). */
  kills: number;
  /** Answers write the result and message before looking at STATE (the answer before the fix: the witness). */
  writesFirst?: boolean;
}

interface WorkerRegs {
  /** Which worker this is of its cell (0: the first, 1: its replacement, ...). */
  incarnation: number;
  pc: number;
  made: number;
  call: number;
  seen: number;
  woken: boolean;
  done: boolean;
}

interface Pending {
  worker: number;
  call: number;
  value: number;
  failure: string | undefined;
}

interface Regs {
  workers: WorkerRegs[];
  pumpSeen: number;
  pumpServing: boolean;
  pending: Pending[];
  kills: number;
  /** Calls answered (a compare-exchange that took), by worker cell and call number. */
  answered: string[];
}

interface Saved {
  bytes: Uint8Array;
  regs: Regs;
  serving: [number, number][];
}

const argumentOf = (incarnation: number, made: number): number => incarnation * 10 + made;
/** The program's host function: odd arguments fail, others answer argument + 0.5. */
const answerOf = (argument: number): { value: number; failure: string | undefined } =>
  argument % 2 === 1 ? { value: 0, failure: `no ${argument}` } : { value: argument + 0.5, failure: undefined };

class MailboxModel implements InterleavedSystem<Saved> {
  readonly ring: LaunchRing;
  private readonly bytes: Uint8Array;
  private readonly server: HostCallServer;
  private regs: Regs;
  private broken: string | undefined;

  constructor(private readonly scenario: Scenario) {
    this.ring = LaunchRing.create({
      slots: 1,
      workers: scenario.workers,
      maxArgs: 1,
      errorBytes: 4,
      mailboxBytes: MAILBOX_BYTES,
    });
    this.bytes = new Uint8Array(this.ring.i32.buffer);
    this.server = new HostCallServer(this.ring);
    this.regs = {
      workers: Array.from({ length: scenario.workers }, () => ({
        incarnation: 0,
        pc: 0,
        made: 0,
        call: 0,
        seen: 0,
        woken: false,
        done: false,
      })),
      pumpSeen: 0,
      pumpServing: false,
      pending: [],
      kills: 0,
      answered: [],
    };
  }

  private get servingMap(): Map<number, number> {
    return (this.server as unknown as { serving: Map<number, number> }).serving;
  }

  private at(worker: number): number {
    return (worker * MAILBOX_BYTES) / 4;
  }

  private state(worker: number): number {
    return Atomics.load(this.ring.mailboxWords, this.at(worker) + M_STATE);
  }

  // Threads: 0..W-1 workers; W the pump; W+1+i the i-th pending answer; 100+w a kill of worker w.
  runnable(): number[] {
    const { workers } = this.scenario;
    const threads: number[] = [];
    this.regs.workers.forEach((w, i) => {
      if (w.done) return;
      // pc 5 is Atomics.wait(STATE, calling): it returns when the word differs or a notify came.
      if (w.pc === 5 && this.state(i) === w.call && !w.woken) return;
      threads.push(i);
    });
    if (this.regs.pumpServing || Atomics.load(this.ring.i32, H_DONE_COUNT) !== this.regs.pumpSeen)
      threads.push(workers);
    this.regs.pending.forEach((_, i) => threads.push(workers + 1 + i));
    if (this.regs.kills < this.scenario.kills)
      this.regs.workers.forEach((w, i) => {
        if (!w.done && w.pc >= 2) threads.push(100 + i);
      });
    return threads;
  }

  step(thread: number): string {
    const { workers } = this.scenario;
    if (thread >= 100) return this.kill(thread - 100);
    if (thread < workers) return this.workerStep(thread);
    if (thread === workers) return this.pumpStep();
    return this.answerStep(thread - workers - 1);
  }

  /** callHost, one shared access (or one run of private writes) at a time. */
  private workerStep(i: number): string {
    const w = this.regs.workers[i]!;
    const words = this.ring.mailboxWords;
    const at = this.at(i);
    const name = `worker ${i}.${w.incarnation}`;
    switch (w.pc) {
      case 0: {
        // The call itself: slot, argument count, arguments, name (only a worker writes these).
        words[at + M_SLOT] = 0;
        words[at + M_ARGC] = 1;
        this.ring.mailboxFloats[(i * MAILBOX_BYTES) / 8 + M_ARGS_F64] = argumentOf(w.incarnation, w.made);
        const encoded = new TextEncoder().encode('f');
        this.ring.mailboxes.set(encoded, i * MAILBOX_BYTES + M_NAME);
        words[at + M_NAME_LENGTH] = encoded.length;
        w.pc = 1;
        return `${name}: writes call ${w.made} (argument ${argumentOf(w.incarnation, w.made)})`;
      }
      case 1: {
        w.call = word(((Atomics.load(words, at + M_STATE) >>> 2) + 1) & 0x1fffffff, CALLING);
        w.pc = 2;
        return `${name}: reads STATE, next call ${w.call >>> 2}`;
      }
      case 2: {
        this.move(i, w.call, 'worker');
        Atomics.store(words, at + M_STATE, w.call);
        w.pc = 3;
        return `${name}: STATE = ${show(w.call)}`;
      }
      case 3: {
        Atomics.add(this.ring.i32, H_DONE_COUNT, 1);
        w.pc = 4;
        return `${name}: DONE_COUNT += 1, notifies main`;
      }
      case 4: {
        w.seen = Atomics.load(words, at + M_STATE);
        w.pc = w.seen === w.call ? 5 : 6;
        return `${name}: reads STATE = ${show(w.seen)}`;
      }
      case 5: {
        w.woken = false;
        w.pc = 4;
        return `${name}: wait returns`;
      }
      case 6: {
        const failed = (w.seen & 3) === FAILED;
        const result = this.ring.mailboxFloats[(i * MAILBOX_BYTES) / 8 + M_RESULT_F64]!;
        const length = words[at + M_MESSAGE_LENGTH]!;
        const message = new TextDecoder().decode(
          this.ring.mailboxes.slice(i * MAILBOX_BYTES + M_MESSAGE, i * MAILBOX_BYTES + M_MESSAGE + length),
        );
        const expected = answerOf(argumentOf(w.incarnation, w.made));
        const got = failed ? `failure '${message}'` : `${result}`;
        const want = expected.failure !== undefined ? `failure '${expected.failure}'` : `${expected.value}`;
        if (got !== want)
          this.broken ??= `M1/M4: ${name} reads ${got} for its call ${w.call >>> 2}, whose answer is ${want}`;
        w.pc = 7;
        return `${name}: reads the answer, ${got}`;
      }
      default: {
        const idle = word(w.call >>> 2, IDLE);
        this.move(i, idle, 'worker');
        Atomics.store(words, at + M_STATE, idle);
        w.made++;
        if (w.made === this.scenario.calls) w.done = true;
        w.pc = 0;
        return `${name}: STATE = ${show(idle)}`;
      }
    }
  }

  /** The pool kills worker `i` (its launch timed out) and starts its replacement, which resets the mailbox (production). */
  private kill(i: number): string {
    this.regs.kills++;
    const old = this.regs.workers[i]!;
    const before = this.state(i);
    resetMailbox(this.ring, i);
    const after = this.state(i);
    if (after !== word(before >>> 2, IDLE)) this.broken ??= `M4: a reset moved ${show(before)} to ${show(after)}`;
    this.regs.workers[i] = {
      incarnation: old.incarnation + 1,
      pc: 0,
      made: 0,
      call: 0,
      seen: 0,
      woken: false,
      done: false,
    };
    return `pool: kills worker ${i}.${old.incarnation}; its replacement resets STATE ${show(before)} -> ${show(after)}`;
  }

  /** The pump: wakes on DONE_COUNT, then serves the mailboxes (HostCallServer.serve, production). */
  private pumpStep(): string {
    if (!this.regs.pumpServing) {
      this.regs.pumpSeen = Atomics.load(this.ring.i32, H_DONE_COUNT);
      this.regs.pumpServing = true;
      return `main: wakes, DONE_COUNT = ${this.regs.pumpSeen}`;
    }
    this.regs.pumpServing = false;
    const served: string[] = [];
    this.server.serve(this.scenario.workers, (slot) => {
      if (slot !== 0) this.broken ??= `main reads slot ${slot}, which no worker wrote`;
      return (_name, args) => {
        // Called within serve's turn, right after it read this worker's call: find which mailbox.
        const worker = [...this.servingMap.keys()].find(
          (w) => !this.regs.pending.some((p) => p.worker === w && p.call === this.servingMap.get(w)),
        );
        const call = worker === undefined ? -1 : this.servingMap.get(worker)!;
        const { value, failure } = answerOf(args[0]!);
        this.regs.pending.push({ worker: worker ?? -1, call, value, failure });
        served.push(`worker ${worker} call ${call} (argument ${args[0]})`);
        return new Promise<number>(() => {}); // answered by an answer step of this model
      };
    });
    return `main: serves ${served.length > 0 ? served.join(', ') : 'nothing'}`;
  }

  /** The program's answer arrives: HostCallServer's answer (production), one turn of main. */
  private answerStep(index: number): string {
    const [p] = this.regs.pending.splice(index, 1);
    const { worker, call, value, failure } = p!;
    const before = this.state(worker);
    if (this.scenario.writesFirst) {
      const box = this.at(worker);
      if (this.servingMap.get(worker) === call) this.servingMap.delete(worker);
      this.ring.mailboxFloats[(worker * MAILBOX_BYTES) / 8 + M_RESULT_F64] = value;
      if (failure !== undefined) {
        const encoded = new TextEncoder().encode(failure);
        this.ring.mailboxes.set(encoded, worker * MAILBOX_BYTES + M_MESSAGE);
        this.ring.mailboxWords[box + M_MESSAGE_LENGTH] = encoded.length;
      }
      const answered = word(call, failure === undefined ? ANSWERED : FAILED);
      if (
        Atomics.compareExchange(this.ring.mailboxWords, box + M_STATE, word(call, CALLING), answered) ===
        word(call, CALLING)
      )
        Atomics.notify(this.ring.mailboxWords, box + M_STATE);
    } else {
      const box = {
        words: this.at(worker),
        floats: (worker * MAILBOX_BYTES) / 8,
        bytes: worker * MAILBOX_BYTES,
        messageBytes: MAILBOX_BYTES - M_MESSAGE,
      };
      (this.server as unknown as { answer(...args: unknown[]): void }).answer(worker, call, box, value, failure);
    }
    const after = this.state(worker);
    if (after !== before) {
      this.checkMove(worker, before, after, 'main');
      if (this.regs.answered.includes(`${worker}:${call}`))
        this.broken ??= `M2: call ${call} of worker ${worker} answered twice`;
      this.regs.answered.push(`${worker}:${call}`);
      // The notify wakes the worker's wait.
      const w = this.regs.workers[worker]!;
      if (w.pc === 5) w.woken = true;
    }
    return `main: answers call ${call} of worker ${worker} (${failure ?? value}): STATE ${show(before)} -> ${show(after)}`;
  }

  private move(worker: number, to: number, by: 'worker' | 'main'): void {
    this.checkMove(worker, this.state(worker), to, by);
  }

  private checkMove(worker: number, from: number, to: number, by: 'worker' | 'main'): void {
    const [fs, ts] = [from & 3, to & 3];
    const legal =
      by === 'worker'
        ? (fs === IDLE && ts === CALLING && to >>> 2 === (((from >>> 2) + 1) & 0x1fffffff)) ||
          ((fs === ANSWERED || fs === FAILED) && ts === IDLE && to >>> 2 === from >>> 2)
        : fs === CALLING && (ts === ANSWERED || ts === FAILED) && to >>> 2 === from >>> 2;
    if (!legal) this.broken ??= `M1: ${by} moves the STATE of worker ${worker} from ${show(from)} to ${show(to)}`;
  }

  violation(): string | undefined {
    return this.broken;
  }

  stuck(): string | undefined {
    const waiting = this.regs.workers.flatMap((w, i) =>
      w.done ? [] : [`worker ${i}.${w.incarnation} at step ${w.pc}`],
    );
    return waiting.length > 0 ? `M3: nothing can move while ${waiting.join(', ')} waits for an answer` : undefined;
  }

  fingerprint(): (Uint8Array | string)[] {
    return [this.bytes, JSON.stringify(this.regs), JSON.stringify([...this.servingMap]), this.broken ?? ''];
  }

  save(): Saved {
    return { bytes: this.bytes.slice(), regs: structuredClone(this.regs), serving: [...this.servingMap] };
  }

  restore(saved: Saved): void {
    this.bytes.set(saved.bytes);
    this.regs = structuredClone(saved.regs);
    this.servingMap.clear();
    for (const [k, v] of saved.serving) this.servingMap.set(k, v);
    this.broken = undefined;
  }
}

function check(t: TestContext, scenario: Scenario) {
  const started = performance.now();
  const result = explore(new MailboxModel(scenario), { maxStates: 500_000 });
  t.diagnostic(
    `${result.states} states, schedules up to ${result.deepest} steps, ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  return result;
}

function holds(t: TestContext, scenario: Scenario): void {
  const result = check(t, scenario);
  assert.equal(result.violation, undefined, describeViolation(result.violation));
  assert.equal(result.bounded, false, 'the exploration must be exhaustive');
}

describe('host-call mailbox (model-checked)', { timeout: 120_000 }, () => {
  it('holds M1-M3 for one worker making two calls, one answered and one failed', (t) => {
    holds(t, { workers: 1, calls: 2, kills: 0 });
  });

  it('holds M1-M3 for two workers calling at once', (t) => {
    holds(t, { workers: 2, calls: 1, kills: 0 });
  });

  it('holds M4: a worker killed at any step of its call, its replacement calling, late answers dropped', (t) => {
    holds(t, { workers: 1, calls: 2, kills: 1 });
  });

  it("finds the fault of the answer before: a late answer overwrites the result of the replacement's answered call", (t) => {
    const result = check(t, { workers: 1, calls: 2, kills: 1, writesFirst: true });
    assert.ok(result.violation, 'the checker must find the late answer');
    assert.match(result.violation.message, /^M1\/M4: worker 0\.1 reads .* for its call \d+, whose answer is /);
    t.diagnostic(describeViolation(result.violation));
  });
});
