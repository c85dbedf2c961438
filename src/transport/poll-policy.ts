/**
 * When a thread that expects its peer's next frame soon should spin for it (keep its event loop
 * turning, or poll MPI in a loop) and when it should sleep. Spinning saves the wake-up of a
 * sleeping thread (on a VM whose idle vCPUs halt: an interrupt, a VM exit and an entry, 30-70
 * us), but only while the frame comes within the spin and while the spinning thread takes the
 * core from nobody: a client spinning 50 us after each request on the core its proxy needs made
 * a remote launch 115 us instead of 28 us (bench/README.md). So the policy spins only when
 *   - the machine has a core to spare: the runnable threads besides this one (Linux's
 *     /proc/loadavg, sampled and smoothed; elsewhere the 1-minute load average) fit in the
 *     other cores; on a machine crowded by a load, which does not say whether the peer shares
 *     this core, spins are tried now and then and kept where they pay (crowd-trial.ts); an MPI
 *     job's ranks counted exactly on too few cores share them with the peer, and sleep;
 *   - spins pay: after three spins in a row that found nothing (the peer computes longer than
 *     the spin, or the client pauses: a frame that still came sooner than frames slept for are
 *     seen is no reason to sleep; where a sleep adds more than three windows to a reply, as
 *     many misses as it adds windows, up to 16) it backs off, spinning only on every 2nd, 4th,
 *     ... 64th expected frame to see whether replies come quickly again (one that does restores
 *     it);
 *     a probe spins as long as a sleep takes to see a frame, and one that finds its frame keeps
 *     spinning through misses for 64 frames: two MPI ranks that answer each other at once,
 *     backed off by a few slow launches, each probed the other asleep and slept for good;
 *   - a wake-up costs more than a few microseconds: now and then it sleeps instead (one expected
 *     frame in 32, rarer where a sleep costs much more than a spun-for reply takes, so that these
 *     samples add at most 2 % to the average reply: over MPI a sleep costs hundreds of
 *     microseconds), and when frames slept for come as soon as spun-for ones do (bare metal with
 *     a cheap wake-up), spinning buys nothing and stops, spinning for one frame in 16 to see.
 * And it never spins for a frame of a peer on this host while the two may run on one core only,
 * nor, on a machine crowded by a load, while they run on one core for now (co-location.ts): the
 * spin would take the core the answer needs.
 * OFFLOAD_POLL_US set overrides all of it: that window after every expected frame, 0 never.
 * Deterministic: the caller feeds it loads and arrival times (test/poll-policy.test.ts).
 */
import type { SharedCore } from './co-location.js';
import { CrowdTrial } from './crowd-trial.js';

/** The longest spin the policy chooses by itself, in microseconds (OFFLOAD_POLL_US's default). */
export const AUTO_POLL_US = 50;
/** Spins in a row that found nothing before the policy backs off. */
const MISSES_TO_BACK_OFF = 3;
/** At most this many where a sleep is dear (see missesToBackOff). */
const MOST_MISSES_TO_BACK_OFF = 16;
/** At most one expected frame in 2^this is spun for while backed off. */
const MAX_BACKOFF = 6;
/** A probe spins at most this many windows. */
const PROBE_MAX_WINDOWS = 20;
/** At least one expected frame in this many is slept for, to measure what a wake-up costs. */
const SLEEP_SAMPLE_EVERY = 32;
/** At most one in this many, however dear a sleep is. */
const SLEEP_SAMPLE_RAREST = 4096;
/** The share of the average reply's time the sleep samples may add. */
const SLEEP_SAMPLE_COST = 0.02;
/** One expected frame in this many is spun for while wake-ups are cheap (are they still?). */
const CHEAP_WAKE_PROBE_EVERY = 16;
/** A wake-up adding less than this to a reply's arrival is cheaper than any spin. */
const CHEAP_WAKE_US = 5;
/** Weight of a new load sample in the smoothed load (about the last five samples count). */
const LOAD_WEIGHT = 0.2;
/** Crowded above cores - 1 + this, uncrowded again below cores - 1 - this (no flapping). */
const LOAD_HYSTERESIS = 0.25;
/** Weight of a new arrival in the running figures of frames spun for and slept for. */
const GAP_WEIGHT = 0.25;

export type PollMode = 'override' | 'shared-core' | 'spin' | 'crowded' | 'crowd-spin' | 'backed-off' | 'cheap-wake';

export interface PollPolicyOptions {
  /** The cores this process may run on. */
  cores: number;
  /** What the others are, in the policy's words, one and many (default: runnable threads besides this one). */
  others?: readonly [one: string, many: string];
  /** OFFLOAD_POLL_US when set: the window, always. */
  overrideUs?: number;
  /** The longest spin chosen by itself (AUTO_POLL_US). */
  maxUs?: number;
  /** Orders the frames of a crowd trial (default Math.random; tests pass a seeded one). */
  random?: () => number;
}

export class PollPolicy {
  readonly cores: number;
  readonly overrideUs: number | undefined;
  readonly maxUs: number;
  private readonly othersAre: readonly [one: string, many: string];
  private readonly random: (() => number) | undefined;
  /** Runnable threads besides this one, smoothed; undefined before the first sample. */
  private others: number | undefined;
  private crowded = false;
  /** Whether the others were counted (knowOthers), not sampled from the machine's load. */
  private counted = false;
  /** Spins tried now and then while the machine is crowded by a sampled load. */
  private trial: CrowdTrial;
  private misses = 0;
  /** Misses still forgiven after a probe found its frame. */
  private graceLeft = 0;
  private backoff = 0;
  private sinceProbe = 0;
  private sinceSleepSample = 0;
  /** The window the last expected frame got (what `arrived` judges). */
  private lastWindowUs = 0;
  /** Running figures of how long after being expected a frame came: spun for, and slept for. */
  private spunGapUs: number | undefined;
  private sleptGapUs: number | undefined;
  /** The core this thread shares with the peer whose frame it expects, while it does (co-location.ts). */
  private shared: SharedCore | undefined;
  /** The mode last said, with what else its words name: the shared core, or the crowd trial's verdict and reason. */
  private lastSaid: { mode: PollMode; detail: unknown; why: unknown } | undefined;

  constructor(options: PollPolicyOptions) {
    this.cores = Math.max(1, Math.floor(options.cores));
    this.overrideUs = options.overrideUs;
    this.maxUs = options.maxUs ?? AUTO_POLL_US;
    this.othersAre = options.others ?? ['runnable thread besides this one', 'runnable threads besides this one'];
    this.random = options.random;
    this.trial = this.newTrial();
  }

  private newTrial(): CrowdTrial {
    return new CrowdTrial(this.maxUs, PROBE_MAX_WINDOWS * this.maxUs, this.random);
  }

  /** A sample of the machine: runnable threads besides this one (a fraction for a load average). */
  observeLoad(others: number): void {
    if (!Number.isFinite(others)) return;
    const sample = Math.max(0, others);
    this.judgeCrowd(this.others === undefined ? sample : this.others + LOAD_WEIGHT * (sample - this.others));
  }

  /** The others counted exactly (not a sample to smooth): the figure is this from now on. */
  knowOthers(others: number): void {
    if (!Number.isFinite(others)) return;
    this.counted = true;
    this.judgeCrowd(Math.max(0, others));
  }

  /** The core this thread shares with the peer whose frame it expects next (undefined: none, or not known). */
  observeSharedCore(shared: SharedCore | undefined): void {
    this.shared = shared;
  }

  /**
   * Whether the core is shared so that a spin takes it from the peer: always where both are
   * pinned to it; where they ran there last, only on a crowded machine (with a core to spare the
   * scheduler wakes the peer on an idle one).
   */
  private get sharesCore(): boolean {
    return this.shared !== undefined && (this.shared.pinned || this.crowdedByLoad);
  }

  /** Whether the machine is crowded by a sampled load (not by an MPI job's ranks counted exactly). */
  get crowdedByLoad(): boolean {
    return this.crowded && !this.counted;
  }

  private judgeCrowd(others: number): void {
    this.others = others;
    const spare = this.cores - 1;
    if (this.crowded && this.others < spare - LOAD_HYSTERESIS) this.crowded = false;
    else if (!this.crowded && this.others > spare + LOAD_HYSTERESIS) {
      this.crowded = true;
      this.trial = this.newTrial();
    }
  }

  /** A frame is expected now: how many microseconds to spin for it (0: sleep). */
  window(): number {
    this.lastWindowUs = this.choose();
    return this.lastWindowUs;
  }

  private choose(): number {
    if (this.overrideUs !== undefined) return this.overrideUs;
    if (this.sharesCore) return 0;
    if (this.crowded) return this.counted ? 0 : this.trial.window();
    if (this.backoff > 0 || this.wakeIsCheap()) {
      // A probe now and then: do spins pay again?
      if (++this.sinceProbe < (this.backoff > 0 ? 2 ** this.backoff : CHEAP_WAKE_PROBE_EVERY)) return 0;
      this.sinceProbe = 0;
      return this.backoff > 0 ? this.probeUs() : this.maxUs;
    }
    // Now and then a frame slept for, to know what a wake-up costs here.
    if (++this.sinceSleepSample < this.sleepSampleEvery()) return this.maxUs;
    this.sinceSleepSample = 0;
    return 0;
  }

  /**
   * A backed-off probe spins as long as a frame slept for takes to be seen (up to 20 windows):
   * a peer that backed off too answers a probe late, by its own sleep, and a probe of one window
   * would miss it for ever.
   */
  private probeUs(): number {
    return Math.max(this.maxUs, Math.min(PROBE_MAX_WINDOWS * this.maxUs, this.sleptGapUs ?? Infinity));
  }

  /** Expected frames per one slept for: the rarer, the more a sleep costs beside a spun-for reply. */
  private sleepSampleEvery(): number {
    if (this.spunGapUs === undefined || this.sleptGapUs === undefined) return SLEEP_SAMPLE_EVERY;
    const every = (this.sleptGapUs - this.spunGapUs) / (SLEEP_SAMPLE_COST * Math.max(1, this.spunGapUs));
    return Math.min(SLEEP_SAMPLE_RAREST, Math.max(SLEEP_SAMPLE_EVERY, Math.ceil(every)));
  }

  /** The frame expected last came `gapUs` microseconds after it was expected. */
  arrived(gapUs: number): void {
    if (this.overrideUs !== undefined || this.sharesCore || !(gapUs >= 0)) return;
    if (this.crowded) {
      if (!this.counted) this.trial.arrived(gapUs);
      return;
    }
    if (this.lastWindowUs === 0) {
      // Slept for: a figure of what a wake-up adds (a reply the peer took long over says nothing).
      if (gapUs <= PROBE_MAX_WINDOWS * this.maxUs) this.sleptGapUs = blend(this.sleptGapUs, gapUs);
      return;
    }
    if (gapUs <= this.lastWindowUs) {
      // A probe found its frame: spin again, and through misses for as many frames as the
      // rarest probe is apart, so that a peer still backed off finds this side spinning when
      // it probes in turn.
      if (this.backoff > 0) this.graceLeft = 2 ** MAX_BACKOFF;
      this.misses = 0;
      this.backoff = 0;
      this.sinceProbe = 0;
      if (gapUs <= this.maxUs) this.spunGapUs = blend(this.spunGapUs, gapUs);
      return;
    }
    if (this.graceLeft > 0) {
      this.graceLeft--;
      return;
    }
    // Sooner than a frame slept for is seen: a longer spin would have paid, not a sleep (the peer
    // slept itself, or took a little longer than the window).
    if (this.sleptGapUs !== undefined && gapUs <= this.sleptGapUs) return;
    // The spin found nothing; a probe that finds nothing backs off further at once.
    if (this.backoff > 0 || ++this.misses >= this.missesToBackOff()) {
      this.misses = 0;
      this.backoff = Math.min(MAX_BACKOFF, this.backoff + 1);
    }
  }

  /**
   * Misses in a row before backing off: three, or as many windows as a sleep adds to a reply
   * when that is more (a miss costs a window of CPU; a frame slept for in vain, what a sleep adds).
   */
  private missesToBackOff(): number {
    if (this.spunGapUs === undefined || this.sleptGapUs === undefined) return MISSES_TO_BACK_OFF;
    const windows = Math.ceil((this.sleptGapUs - this.spunGapUs) / this.maxUs);
    return Math.min(MOST_MISSES_TO_BACK_OFF, Math.max(MISSES_TO_BACK_OFF, windows));
  }

  private wakeIsCheap(): boolean {
    return (
      this.spunGapUs !== undefined && this.sleptGapUs !== undefined && this.sleptGapUs - this.spunGapUs < CHEAP_WAKE_US
    );
  }

  /** What the policy does now and why. */
  get mode(): PollMode {
    if (this.overrideUs !== undefined) return 'override';
    if (this.sharesCore) return 'shared-core';
    if (this.crowded) return this.trial.spins && !this.counted ? 'crowd-spin' : 'crowded';
    if (this.backoff > 0) return 'backed-off';
    if (this.wakeIsCheap()) return 'cheap-wake';
    return 'spin';
  }

  /** The mode in words, for OFFLOAD_DEBUG. */
  describe(): string {
    const load =
      this.others === undefined
        ? `${this.othersAre[1]}: not sampled yet`
        : `${Number.isInteger(this.others) ? this.others : this.others.toFixed(2)} ${this.othersAre[this.others === 1 ? 0 : 1]}`;
    switch (this.mode) {
      case 'override':
        return this.overrideUs === 0
          ? 'OFFLOAD_POLL_US=0: sleeps as soon as nothing is ready'
          : `OFFLOAD_POLL_US=${this.overrideUs}: spins ${this.overrideUs} us for every frame expected`;
      case 'shared-core': {
        const { core, pinned } = this.shared!;
        const who = 'this thread and its peer';
        return pinned
          ? `sleeps: ${who} may run on core ${core} only (a spin would take the core the answer needs)`
          : `sleeps: ${who} run on core ${core} for now, and ${load} ${this.others === 1 ? 'does' : 'do'} not fit in the other ${this.cores - 1} of ${this.cores} cores (a spin would take the core the answer needs)`;
      }
      case 'crowded': {
        const crowd = `${load} ${this.others === 1 ? 'does' : 'do'} not fit in the other ${this.cores - 1} of ${this.cores} cores`;
        const trial = this.counted ? undefined : this.trial.describe();
        return `sleeps: ${crowd}${trial ? `; ${trial}` : ''}`;
      }
      case 'crowd-spin':
        return `${this.trial.describe()!}, though ${load} ${this.others === 1 ? 'does' : 'do'} not fit in the other ${this.cores - 1} of ${this.cores} cores`;
      case 'backed-off':
        return `sleeps: spins found nothing (the peer takes longer than ${this.maxUs} us); spins for one expected frame in ${2 ** this.backoff}`;
      case 'cheap-wake':
        return `sleeps: a wake-up adds ${(this.sleptGapUs! - this.spunGapUs!).toFixed(1)} us to a reply, less than a spin saves`;
      case 'spin':
        return `spins up to ${this.maxUs} us for every frame expected (${load}, ${this.cores} cores)`;
    }
  }

  /** The mode's description when the mode, or a crowd trial's verdict, changed since the last call; else undefined. */
  changed(): string | undefined {
    // Asked for every frame expected: compared field by field, as a string built and compared
    // each time cost more than the rest of a frame's polling.
    const mode = this.mode;
    let detail: unknown;
    let why: unknown;
    if (mode === 'shared-core') {
      detail = this.shared!.core;
      why = this.shared!.pinned;
    } else if (this.crowded && !this.counted) {
      detail = this.trial.verdictNow;
      why = this.trial.verdictReason;
    }
    const last = this.lastSaid;
    if (last !== undefined && last.mode === mode && last.detail === detail && last.why === why) return undefined;
    this.lastSaid = { mode, detail, why };
    return this.describe();
  }
}

function blend(figure: number | undefined, sample: number): number {
  return figure === undefined ? sample : figure + GAP_WEIGHT * (sample - figure);
}
