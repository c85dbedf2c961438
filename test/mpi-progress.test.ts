/**
 * The MPI hub's quiet-rank protocol, model-checked: the hub (src/transport/mpi/hub.ts: schedule,
 * woken, post, expectSoon, and pollBurst's drains) and the addon's progress thread (native/mpi/offload_mpi.c:
 * progress_main, AwaitProgress, DisarmProgress) as a transcription, each step one event-loop
 * step or one critical section under mpi_lock, run in every order they can interleave with
 * messages arriving, sends completing and time passing. Keep it in step with those two files.
 *
 * Invariants: every message that arrives is received and every send's completion is seen (a
 * state where nothing can move with either left is a lost wake-up); the thread is armed only
 * while the hub waits for it (armed => waiting), so it never wakes a hub that polls by itself.
 * Witnesses below show the checker finds the faults a plausible variant would have.
 */
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { describeViolation, explore, type Exploration, type InterleavedSystem } from './helpers/interleavings.js';

interface Scenario {
  /** Messages the peer sends this rank. */
  messages: number;
  /** Sends this rank posts (the program's requests). */
  posts: number;
  /** Times the program says a frame is expected soon (expectSoon: the next turn polls until one comes or the window ends). */
  expects?: number;
  /** Faults to check that the checker finds them. */
  fault?: 'edge-triggered thread' | 'post disarms but keeps waiting' | 'a stale wake leaves the thread armed';
}

type Pc = 'idle' | 'drain' | 'schedule';

interface State {
  // MPI: what has arrived and not been received, what was received, sends in flight and completed unseen.
  arrived: number;
  arrivedSinceArmed: number;
  received: number;
  peerSent: number;
  inFlight: number;
  completedUnseen: number;
  postsLeft: number;
  expectsLeft: number;
  // The progress thread (under mpi_lock) and the thread-safe function calls it queued.
  armed: boolean;
  wakesQueued: number;
  // The hub, on the event loop: where its current turn is, its timer, whether it waits for the thread,
  // and whether traffic is recent (BUSY_MS).
  pc: Pc;
  timer: boolean;
  waiting: boolean;
  busy: boolean;
  /** Within an expectSoon window, nothing received since. */
  expecting: boolean;
}

const TIMER = 0;
const WAKE = 1;
const POST = 2;
const TURN = 3;
const THREAD = 4;
const PEER = 5;
const NETWORK = 6;
const CLOCK = 7;
const EXPECT = 8;
const WINDOW = 9;
const BURST_END = 10;

class ProgressModel implements InterleavedSystem<State> {
  private s: State;

  constructor(private readonly scenario: Scenario) {
    // The hub starts quiet (no traffic yet) and schedules at once: its first step arms the thread.
    this.s = {
      arrived: 0,
      arrivedSinceArmed: 0,
      received: 0,
      peerSent: 0,
      inFlight: 0,
      completedUnseen: 0,
      postsLeft: scenario.posts,
      expectsLeft: scenario.expects ?? 0,
      armed: false,
      wakesQueued: 0,
      pc: 'schedule',
      timer: false,
      waiting: false,
      busy: false,
      expecting: false,
    };
  }

  runnable(): number[] {
    const s = this.s;
    const idle = s.pc === 'idle';
    const threads: number[] = [];
    // The event loop starts a turn for a timer, a queued wake or the program's send, in any order.
    if (idle && s.timer) threads.push(TIMER);
    if (idle && s.wakesQueued > 0) threads.push(WAKE);
    if (idle && s.postsLeft > 0) threads.push(POST);
    if (idle && s.expectsLeft > 0) threads.push(EXPECT);
    if (!idle) threads.push(TURN);
    // The thread's probes that find nothing change nothing: only the one that finds something is a step.
    const sees =
      this.scenario.fault === 'edge-triggered thread'
        ? s.arrivedSinceArmed > 0
        : s.arrived > 0 || s.completedUnseen > 0;
    if (s.armed && sees) threads.push(THREAD);
    if (s.peerSent < this.scenario.messages) threads.push(PEER);
    if (s.inFlight > 0) threads.push(NETWORK);
    if (s.busy) threads.push(CLOCK);
    if (s.expecting) threads.push(WINDOW);
    if (s.pc === 'drain' && s.expecting) threads.push(BURST_END);
    return threads;
  }

  step(thread: number): string {
    const s = this.s;
    switch (thread) {
      case TIMER:
        s.timer = false;
        s.pc = 'drain';
        return 'hub: timer turn';
      case WAKE:
        s.wakesQueued--;
        if (!s.waiting) return 'hub: wake ignored (polling by itself)';
        s.waiting = false;
        if (this.scenario.fault !== 'a stale wake leaves the thread armed') s.armed = false; // disarmProgress()
        s.busy = true;
        s.pc = 'drain';
        return 'hub: woken';
      case POST:
        s.postsLeft--;
        s.inFlight++;
        s.busy = true;
        s.pc = 'schedule';
        return 'hub: post (isend)';
      case EXPECT:
        s.expectsLeft--;
        s.expecting = true;
        s.busy = true;
        s.pc = 'schedule';
        return 'hub: expectSoon (the window starts)';
      case TURN:
        return this.turn();
      case THREAD:
        s.armed = false;
        s.wakesQueued++;
        return 'thread: probe finds traffic, disarms, queues a wake';
      case PEER:
        s.peerSent++;
        s.arrived++;
        s.arrivedSinceArmed++;
        return 'peer: a message arrives';
      case NETWORK:
        s.inFlight--;
        s.completedUnseen++;
        return 'network: a send completes';
      case CLOCK:
        s.busy = false;
        return 'clock: BUSY_MS pass without traffic';
      case WINDOW:
        s.expecting = false;
        return 'clock: the expectSoon window ends';
      case BURST_END:
        s.pc = 'schedule';
        return 'clock: BURST_US pass: the turn stops polling (the window goes on)';
    }
    throw new Error(`no thread ${thread}`);
  }

  /** One step of the hub's turn: one of pollBurst's drains (pollOnce), then schedule(). */
  private turn(): string {
    const s = this.s;
    if (s.pc === 'drain') {
      if (s.arrived > 0) {
        s.busy = true;
        s.expecting = false;
      }
      s.received += s.arrived;
      s.arrived = 0;
      s.completedUnseen = 0;
      // Within an expectSoon window with nothing received yet, pollBurst drains again.
      if (s.expecting) return 'hub: pollOnce, nothing yet: polls again (a frame is expected)';
      s.pc = 'schedule';
      return 'hub: pollOnce (completed(), probe/receive until none)';
    }
    s.pc = 'idle';
    if (!s.busy && !s.timer) {
      if (s.waiting) return 'hub: schedule, quiet, already waiting';
      s.waiting = true;
      s.armed = true; // awaitProgress(): under mpi_lock
      s.arrivedSinceArmed = 0;
      return 'hub: schedule, quiet: arms the thread';
    }
    if (s.waiting) {
      if (this.scenario.fault !== 'post disarms but keeps waiting') s.waiting = false;
      s.armed = false; // disarmProgress()
    }
    s.timer = true;
    return 'hub: schedule, busy: setImmediate';
  }

  violation(): string | undefined {
    if (this.s.armed && !this.s.waiting) return 'the thread is armed while the hub polls by itself';
    return undefined;
  }

  stuck(): string | undefined {
    const s = this.s;
    if (s.received < this.scenario.messages)
      return `lost wake-up: ${this.scenario.messages - s.received} message(s) never received`;
    if (s.inFlight > 0 || s.completedUnseen > 0) return 'lost wake-up: a completed send never seen';
    return undefined;
  }

  fingerprint(): string[] {
    return [JSON.stringify(this.s)];
  }

  save(): State {
    return { ...this.s };
  }

  restore(saved: State, last: boolean): void {
    this.s = last ? saved : { ...saved };
  }
}

function check(t: TestContext, scenario: Scenario): Exploration {
  const result = explore(new ProgressModel(scenario), { maxStates: 2_000_000 });
  t.diagnostic(`${result.states} states, schedules up to ${result.deepest} steps`);
  return result;
}

describe('MPI quiet-rank progress (model-checked)', { timeout: 120_000 }, () => {
  for (const scenario of [
    { messages: 3, posts: 0 },
    { messages: 0, posts: 3 },
    { messages: 3, posts: 3 },
    { messages: 4, posts: 2 },
    { messages: 5, posts: 5 },
    { messages: 2, posts: 0, expects: 2 },
    { messages: 3, posts: 2, expects: 2 },
  ]) {
    it(`loses no wake-up and never leaves the thread armed for a polling hub: ${scenario.messages} messages, ${scenario.posts} posts, ${scenario.expects ?? 0} frames expected`, (t) => {
      const result = check(t, scenario);
      assert.equal(result.violation, undefined, describeViolation(result.violation));
      assert.equal(result.bounded, false, 'the exploration must be exhaustive');
    });
  }

  describe('faults the checker finds', () => {
    it('a thread that looks only for messages that arrive after it was armed misses one that came during the last poll', (t) => {
      const result = check(t, { messages: 2, posts: 0, fault: 'edge-triggered thread' });
      assert.match(result.violation?.message ?? '', /lost wake-up: \d message/, describeViolation(result.violation));
      t.diagnostic(describeViolation(result.violation));
    });

    it('a post that disarms the thread but leaves the hub waiting never arms it again', (t) => {
      const result = check(t, { messages: 1, posts: 1, fault: 'post disarms but keeps waiting' });
      assert.match(result.violation?.message ?? '', /lost wake-up/, describeViolation(result.violation));
      t.diagnostic(describeViolation(result.violation));
    });

    it('a wake that comes after the hub armed the thread again leaves it armed while the hub polls', (t) => {
      const result = check(t, { messages: 2, posts: 1, fault: 'a stale wake leaves the thread armed' });
      assert.match(result.violation?.message ?? '', /armed while the hub polls/, describeViolation(result.violation));
      t.diagnostic(describeViolation(result.violation));
    });
  });
});
