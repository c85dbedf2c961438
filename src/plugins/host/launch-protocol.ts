/**
 * The launch protocol between the host device's main thread and its workers, over the ring laid
 * out in launch-ring.ts. Both sides are state machines whose every `step()` makes at most one
 * access to shared memory (a plain read or write of a launch's payload counts as one). The pool
 * and the workers run them back to back; test/launch-protocol.test.ts runs the very same steps in
 * every order they can interleave and checks the invariants below after each one.
 *
 * The main thread's side is HostSide (launch-host-side.ts), a worker's is WorkerSide
 * (launch-worker-side.ts); this file holds what both read and write: the packed words and cells.
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
import type { ArgKind } from './launch-ring.js';

/** LIMIT and TICKET pack a generation and a count into one 64-bit word. */
const LOW = 0xffffffffn;
export const genOf = (word: bigint): number => Number(word >> 32n);
export const countOf = (word: bigint): number => Number(word & LOW);
export const pack = (gen: number, count: number): bigint => (BigInt(gen) << 32n) | BigInt(count);

/**
 * Worker cells: 0 (nowhere), s + 1 (in slot s), -(s + 1) (may hold a team of slot s's launch),
 * or `killed(s)`: main has killed the worker while it might hold a team of slot s. Workers move
 * their own cell between the first three with compare-exchange, so once main has written
 * `killed(s)` the worker can claim nothing more (its next compare-exchange fails and it stops).
 */
export const KILLED = 1 << 16;
export const killedCell = (slot: number): number => -(slot + 1) - KILLED;

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
