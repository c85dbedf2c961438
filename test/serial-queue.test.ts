/**
 * SerialQueue (src/plugins/serial-queue.ts), the in-order queue with sticky failures under every
 * host and WebGPU queue, explored over random interleavings: programs of operations (closures;
 * allocation-free calls with words, answering by promise, or by callSettled later or at once;
 * operations run at once on an idle queue; synchronize(); operations that enqueue or
 * synchronize from inside themselves), their settling spread over microtask turns at random. A reference model predicts from the order of enqueueing alone what each operation
 * must do (run, fail, or be skipped with the failure before it) and what each synchronize()
 * must report; the run must match it, and the queue's invariants must hold at every start.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CALL_PENDING, type QueuedCall, SerialQueue } from '../src/plugins/serial-queue.js';
import type { LaunchSettled } from '../src/plugins/interface.js';
import { seededRandom } from './helpers/random.js';

type Behaviour = 'ok' | 'throw' | 'resolve' | 'reject';
type Via = 'enqueue' | 'call' | 'now';

interface Op {
  seq: number;
  kind: 'op';
  via: Via;
  behaviour: Behaviour;
  words: number[];
  /** Enqueues one more operation, or a synchronize(), from inside its run (a print listener's launch or finish()). */
  nests: boolean;
  ran: boolean;
  wordsRead: number[] | undefined;
  outcome: { ok: true; value: unknown } | { ok: false; error: unknown } | undefined;
  settleCount: number;
}

interface Sync {
  seq: number;
  kind: 'sync';
  outcome: { ok: true } | { ok: false; error: unknown } | undefined;
}

type Entry = Op | Sync;

class Harness implements QueuedCall {
  readonly entries: Entry[] = [];
  /** Operations started and not settled: at most one, and none when another starts. */
  outstanding = 0;
  /** The async operation now out, settled by the scheduler. */
  out: { op: Op; resolve: (value: unknown) => void; reject: (error: unknown) => void } | undefined;
  guardCalls = 0;
  /** The last operation that started: they start in the order they were enqueued. */
  private lastStarted = -1;
  readonly guardFails = new Set<number>();
  readonly violations: string[] = [];
  readonly queue = new SerialQueue(() => {
    const call = this.guardCalls++;
    if (this.guardFails.has(call)) throw new Error(`guard refused call ${call}`);
  });

  constructor(private readonly next: () => number) {}

  private started(op: Op): void {
    if (this.outstanding !== 0) this.violations.push(`op ${op.seq} started while ${this.outstanding} ran`);
    if (op.seq < this.lastStarted) this.violations.push(`op ${op.seq} started after op ${this.lastStarted}`);
    this.lastStarted = op.seq;
    this.outstanding++;
    op.ran = true;
  }

  /** Runs `op`'s body: its behaviour, after reading its words. */
  /** Runs `op`'s body: its behaviour, after reading its words; a call may answer through callSettled. */
  private body(op: Op, words: number[], queue?: SerialQueue): unknown {
    op.wordsRead = words;
    this.started(op);
    if (op.nests) {
      if (this.next() < 0.5) this.add(false);
      else this.synchronize(); // a finish() from inside: it waits for this operation too
    }
    // A call answers half the time as the host's worker launches do: CALL_PENDING, and callSettled
    // later, or at once from inside (a worker that finished before the launch call returned).
    const callback = queue !== undefined && this.next() < 0.5;
    switch (op.behaviour) {
      case 'ok':
        this.outstanding--;
        if (!callback) return `value ${op.seq}`;
        queue.callSettled(undefined, `value ${op.seq}`);
        return CALL_PENDING;
      case 'throw':
        this.outstanding--;
        if (!callback) throw new Error(`op ${op.seq} threw`);
        queue.callSettled(new Error(`op ${op.seq} threw`), undefined);
        return CALL_PENDING;
      default:
        if (callback) {
          this.out = {
            op,
            resolve: (value) => queue.callSettled(undefined, value),
            reject: (error) => queue.callSettled(error, undefined),
          };
          return CALL_PENDING;
        }
        return new Promise((resolve, reject) => {
          this.out = { op, resolve, reject };
        });
    }
  }

  runQueued(a: unknown, _b: unknown, queue: SerialQueue, at: number, count: number): unknown {
    const words: number[] = [];
    for (let i = 0; i < count; i++) words.push(queue.word(at + i) as number);
    return this.body(a as Op, words, queue);
  }

  private settled(op: Op, outcome: Op['outcome']): void {
    op.settleCount++;
    if (op.settleCount > 1) this.violations.push(`op ${op.seq} settled twice`);
    op.outcome = outcome;
  }

  /** Adds a random operation (never one that enqueues, when `nesting` is false). */
  add(nesting = true): void {
    const r = this.next();
    const behaviour: Behaviour = (['ok', 'ok', 'ok', 'throw', 'resolve', 'resolve', 'reject'] as const)[
      Math.floor(this.next() * 7)
    ]!;
    const via: Via = r < 0.35 ? 'enqueue' : r < 0.8 ? 'call' : 'now';
    const words = Array.from({ length: Math.floor(this.next() * 9) }, () => Math.floor(this.next() * 1e6));
    const op: Op = {
      seq: this.entries.length,
      kind: 'op',
      via,
      behaviour,
      words,
      nests: nesting && this.next() < 0.1,
      ran: false,
      wordsRead: undefined,
      outcome: undefined,
      settleCount: 0,
    };
    if (via === 'now' && this.queue.readyNow() && behaviour !== 'resolve' && behaviour !== 'reject') {
      // As HostQueue.launch runs an inline launch: guard, run, report a throw as the queue's failure.
      this.entries.push(op);
      let value: unknown;
      try {
        this.queue.beginNow();
        value = this.body(op, words);
      } catch (error) {
        this.queue.endNow();
        this.settled(op, { ok: false, error: this.queue.failNow(error) });
        return;
      }
      this.queue.endNow();
      this.settled(op, { ok: true, value });
      return;
    }
    if (via === 'now') op.via = 'call';
    this.entries.push(op);
    if (op.via === 'enqueue') {
      let returned = false;
      const promise = this.queue.enqueue(() => {
        if (!returned) this.violations.push(`op ${op.seq} ran before enqueue returned`);
        return this.body(op, words);
      });
      returned = true;
      promise.then(
        (value) => this.settled(op, { ok: true, value }),
        (error: unknown) => this.settled(op, { ok: false, error }),
      );
      return;
    }
    const settled: LaunchSettled = {
      launchSettled: (error, where) =>
        this.settled(op, error === undefined ? { ok: true, value: where } : { ok: false, error }),
    };
    const at = this.queue.enqueueCall(this, op, undefined, settled, words.length);
    words.forEach((word, i) => this.queue.setWord(at + i, word));
  }

  synchronize(): void {
    const sync: Sync = { seq: this.entries.length, kind: 'sync', outcome: undefined };
    this.entries.push(sync);
    this.queue.synchronize().then(
      () => (sync.outcome = { ok: true }),
      (error: unknown) => (sync.outcome = { ok: false, error }),
    );
  }

  /** Settles the async operation out, if any. */
  settleOut(): void {
    const out = this.out;
    if (!out) return;
    this.out = undefined;
    this.outstanding--;
    if (out.op.behaviour === 'resolve') out.resolve(`value ${out.op.seq}`);
    else out.reject(new Error(`op ${out.op.seq} rejected`));
  }

  /** What the model predicts, from the order of enqueueing alone, against what happened. */
  check(): void {
    let failure: unknown;
    let guardCall = 0;
    for (const entry of this.entries) {
      if (entry.kind === 'sync') {
        assert.ok(entry.outcome, `synchronize ${entry.seq} never settled`);
        if (failure === undefined) assert.equal(entry.outcome.ok, true, `synchronize ${entry.seq} reported a failure`);
        else {
          assert.equal(entry.outcome.ok, false, `synchronize ${entry.seq} missed a failure`);
          sameFailure((entry.outcome as { error: unknown }).error, failure, `synchronize ${entry.seq}`);
        }
        failure = undefined;
        continue;
      }
      assert.equal(entry.settleCount, 1, `op ${entry.seq} (${entry.via}) settled ${entry.settleCount} times`);
      if (failure !== undefined) {
        assert.equal(entry.ran, false, `op ${entry.seq} ran after a failure`);
        assert.equal(entry.outcome!.ok, false);
        sameFailure((entry.outcome as { error: unknown }).error, failure, `op ${entry.seq}`);
        continue;
      }
      const refused = this.guardFails.has(guardCall++);
      if (refused) {
        assert.equal(entry.ran, false, `op ${entry.seq} ran though the guard refused it`);
        assert.equal(entry.outcome!.ok, false);
        failure = (entry.outcome as { error: unknown }).error;
        assert.match((failure as Error).message, /guard refused/);
        continue;
      }
      assert.equal(entry.ran, true, `op ${entry.seq} never ran`);
      assert.deepEqual(entry.wordsRead, entry.words, `op ${entry.seq} read other words`);
      const fails = entry.behaviour === 'throw' || entry.behaviour === 'reject';
      assert.equal(entry.outcome!.ok, !fails, `op ${entry.seq} (${entry.behaviour}) settled the wrong way`);
      if (fails) failure = (entry.outcome as { error: unknown }).error;
      else if (entry.via === 'enqueue') assert.equal((entry.outcome as { value: unknown }).value, `value ${entry.seq}`);
    }
    assert.deepEqual(this.violations, []);
    assert.equal(this.queue.idle(), true, 'the queue is idle at the end');
  }
}

/** `reported` is `failure`, or the queue's OffloadError made of it (which quotes its message). */
function sameFailure(reported: unknown, failure: unknown, who: string): void {
  const original = (failure as Error).message.replace(
    /^internal error while running an operation of a device queue: /,
    '',
  );
  assert.ok(
    (reported as Error).message.includes(original.replace(/ \(this is a bug.*$/, '')),
    `${who} reported ${(reported as Error).message}, not ${original}`,
  );
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

async function runProgram(seed: number, steps: number): Promise<void> {
  const next = seededRandom(seed);
  const harness = new Harness(next);
  for (let i = 0; i < 4; i++) if (next() < 0.5) harness.guardFails.add(Math.floor(next() * steps));
  for (let step = 0; step < steps; step++) {
    const r = next();
    if (r < 0.55) harness.add();
    else if (r < 0.62) harness.synchronize();
    else if (r < 0.8) harness.settleOut();
    else if (r < 0.9) await Promise.resolve();
    else await tick();
  }
  // Drain: settle whatever is out until nothing is left, then a last synchronize.
  for (let i = 0; i < 10_000 && !harness.queue.idle(); i++) {
    harness.settleOut();
    await tick();
  }
  harness.synchronize();
  await tick();
  try {
    harness.check();
  } catch (error) {
    (error as Error).message = `seed ${seed}: ${(error as Error).message}`;
    throw error;
  }
}

describe('SerialQueue over random interleavings', { timeout: 120_000 }, () => {
  it('keeps order, sticky failures, synchronize and words in 400 random programs', async () => {
    for (let seed = 1; seed <= 400; seed++) await runProgram(seed, 120);
  });

  it('keeps them through rings grown while wrapped and dropped once drained', async () => {
    // Bursts behind an operation that is out: the rings grow while their head is past 0, past
    // LARGE_RING entries (then they are dropped once drained), and again after that.
    for (const burst of [40, 300, 70_000, 500]) {
      const next = seededRandom(burst);
      const harness = new Harness(next);
      for (let i = 0; i < 7; i++) harness.add(false);
      for (let round = 0; round < 3; round++) {
        let release: () => void = () => {};
        const gate = new Promise<void>((resolve) => (release = resolve));
        void harness.queue.enqueue(() => gate);
        for (let i = 0; i < burst; i++) harness.add(false);
        release();
        for (let i = 0; i < 10_000 && !harness.queue.idle(); i++) {
          harness.settleOut();
          await tick();
        }
      }
      harness.synchronize();
      await tick();
      harness.check();
    }
  });
});
