/**
 * Inline launches: a short launch runs on the calling thread, over the same device memory,
 * instead of waking a worker (which costs a futex wake-up, 25-150 us on a 2-vCPU VM). LLVM's
 * host plugin runs every launch this way; we run only those that are known to be short,
 * because a wasm call on the calling thread cannot be interrupted: a kernel that runs long there
 * freezes the program and cannot be stopped at its time limit.
 *
 * How a kernel is known to be short (OFFLOAD_HOST_INLINE=auto, the default):
 * - Its code is bounded (wasm-code-shape.ts: no loop, no call into the module, no bulk memory
 *   operation, no wait) and small: it may run inline from its first launch, a few teams at once.
 *   This is the only way for an untrusted context (a proxy's client): its code is the proof.
 * - Or, in a trusted context (the program's own kernels), it has shown it: a launch on the workers
 *   that completed within POOL_QUICK_US lets the next launch with no more teams try the calling
 *   thread; that run is timed, and later launches run inline while teams x its time per team fits
 *   INLINE_BUDGET_US. A kernel that may synchronise with other launches (atomics, waits) is never
 *   learned: run in turn on one thread, a team that waits for another would wait for ever.
 * - An inline run over budget sends the kernel's next 16 launches to the workers; one that takes
 *   longer than LONG_RUN_US counts a strike, and each strike doubles that (16, 32, 64, ...), so a
 *   kernel that turns long freezes the program once, not repeatedly.
 * - Its time is the wall clock's, and on a busy machine the thread is preempted now and then in
 *   the middle of a run (a slice of another process: milliseconds), or the collector pauses it.
 *   So for a kernel whose code proves it short a run of over LONG_RUN_US a team is not its own
 *   (it is not counted at all) and it never gets a strike; and FORGIVE_AFTER_RUNS runs within
 *   budget in a row take a strike back. A kernel slowed by the machine now and then does not go
 *   to the workers, where each launch waits for a worker's wake-up (on a core shared with a busy
 *   process, a slice of it).
 *
 * OFFLOAD_HOST_INLINE=never keeps every launch on the workers; always runs every launch inline
 * (for debugging and measurement: no learning, and time limits are only checked afterwards).
 */
import type { Environment } from '../../units.js';
import { errors, quoted } from '../../errors.js';
import { environment } from '../../platform.js';
import type { CodeShape } from '../../build/wasm-code-shape.js';

export type InlineMode = 'auto' | 'never' | 'always';
export const INLINE_MODES: readonly InlineMode[] = ['auto', 'never', 'always'];

/** A launch runs inline when teams x its kernel's time per team is at most this. */
export const INLINE_BUDGET_US = 50;
/** An inline run longer than this is a strike against its kernel. */
export const LONG_RUN_US = 1000;
/** A worker launch that completed within this may be tried inline next time. */
export const POOL_QUICK_US = 1000;
/** A bounded kernel of at most this much code may run inline before it has been timed... */
export const SMALL_CODE_BYTES = 16 * 1024;
/** ...with at most this many teams. */
export const FIRST_RUN_TEAMS = 16;
/** Launches that go to the workers after an inline run over budget. */
const OVER_BUDGET_SKIP = 16;
/** The most launches a strike sends to the workers. */
const MAX_SKIP = 1 << 16;
/** Inline runs within budget in a row that take one strike back. */
export const FORGIVE_AFTER_RUNS = 1024;

export function inlineMode(env: Environment = environment()): InlineMode {
  const value = env.OFFLOAD_HOST_INLINE ?? 'auto';
  if (!(INLINE_MODES as readonly string[]).includes(value)) {
    throw errors.invalidArgument(`OFFLOAD_HOST_INLINE must be one of ${INLINE_MODES.join(', ')}, not ${quoted(value)}`);
  }
  return value as InlineMode;
}

/** Where each launch of one kernel runs, in one context, and what it learnt from the last ones. */
export class InlinePolicy {
  /** Time per team of the last inline run, in microseconds; NaN until one ran. */
  private perTeamUs = Number.NaN;
  /** A worker launch of this many teams completed quickly: try that many inline next. */
  private quickTeams = 0;
  private strikes = 0;
  /** Inline runs within budget since the last one over it (counted while there are strikes). */
  private runsInBudget = 0;
  private skip = 0;
  /** The first call of a wasm function compiles it (V8 compiles lazily): its time says little. */
  private compiled = false;

  constructor(
    private readonly mode: InlineMode,
    private readonly shape: CodeShape,
    /** The context's kernels are the program's own (not a proxy client's). */
    private readonly trusted: boolean,
  ) {}

  /** Whether a launch of `teams` teams (with time limit `timeoutMs`, if any) runs inline. */
  choose(teams: number, timeoutMs: number | undefined): boolean {
    if (this.mode !== 'auto') return this.mode === 'always';
    if (this.skip > 0) {
      this.skip--;
      return false;
    }
    const provable = this.provable;
    if (!provable && (!this.trusted || this.shape.synchronizes)) return false;
    // A time limit cannot stop an inline run: stay well inside it.
    const limitUs = timeoutMs === undefined ? Infinity : (timeoutMs * 1000) / 4;
    if (!Number.isNaN(this.perTeamUs)) {
      const predicted = this.perTeamUs * teams;
      if (predicted <= Math.min(INLINE_BUDGET_US, limitUs)) return true;
      // Timed as too long for this many teams: try again only after a quick worker run says so.
      return this.quickTeams >= teams && LONG_RUN_US <= limitUs;
    }
    if (provable) return teams <= FIRST_RUN_TEAMS;
    return this.quickTeams >= teams && LONG_RUN_US <= limitUs;
  }

  /** Its code proves each team short: bounded, and small enough to run before it is timed. */
  private get provable(): boolean {
    return this.shape.bounded && this.shape.codeBytes <= SMALL_CODE_BYTES;
  }

  /** Strikes against the kernel now (diagnostics and tests). */
  get strikeCount(): number {
    return this.strikes;
  }

  /** An inline run of `teams` teams took `micros`. */
  ranInline(teams: number, micros: number): void {
    const first = !this.compiled;
    this.compiled = true;
    if (first && micros <= LONG_RUN_US) return;
    // Code that proves each team short cannot take a millisecond a team: its thread was
    // preempted (a slice of another process) or paused, and the run says nothing of the kernel.
    if (this.provable && micros > LONG_RUN_US * teams) return;
    this.perTeamUs = micros / teams;
    this.quickTeams = 0;
    if (micros <= INLINE_BUDGET_US) {
      if (this.strikes > 0 && ++this.runsInBudget >= FORGIVE_AFTER_RUNS) {
        this.strikes--;
        this.runsInBudget = 0;
      }
      return;
    }
    // Over budget: the workers take the next OVER_BUDGET_SKIP launches (a quick one may try again);
    // a long run of code not proven short doubles that with every strike.
    this.runsInBudget = 0;
    this.skip = Math.max(this.skip, OVER_BUDGET_SKIP);
    if (micros > LONG_RUN_US && !this.provable) {
      this.strikes = Math.min(this.strikes + 1, 16);
      this.skip = Math.max(this.skip, Math.min(OVER_BUDGET_SKIP * 2 ** (this.strikes - 1), MAX_SKIP));
    }
  }

  /** A launch of `teams` teams on the workers completed `micros` after it was published. */
  ranOnPool(teams: number, micros: number): void {
    this.quickTeams = micros <= POOL_QUICK_US ? teams : 0;
  }
}
