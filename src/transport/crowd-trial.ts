/**
 * Whether to spin for a frame on a crowded machine, measured rather than assumed. A load above
 * the cores says the machine is full, not where the peer runs. Beside one busy process per core
 * on a 2-vCPU VM (bench/README.md), a client and its local proxy
 *   - on one core answered each other in 45-96 us sleeping and in 150-1,100 us spinning: the spin
 *     takes the core the peer needs;
 *   - on two cores, in 350-450 us sleeping (each wake-up crosses to a core that runs the busy
 *     process), 270-300 us with one of them spinning and 70-107 us with both.
 * So under a crowd each side runs trials: TRIAL_FRAMES expected frames slept for and as many spun
 * for, in turns, each spin as long as a sleep took to see a frame (longer never pays); it spins
 * until the next trial when the spun-for frames came sooner by a clear margin (SPIN_PAYS; a spin
 * held stops only at no sooner at all). In turns, not sixteen of one then sixteen of the other:
 * the peer's own trial or verdict may change halfway, and frames taken in turns see the same peer.
 * Which of a pair comes first is a coin's: in a fixed order, two sides trying in step spin only
 * while the other sleeps, and spins there never meet.
 * A trial ends at once after TRIAL_LATE_TO_STOP spun-for frames in a row clearly later than the
 * slept-for median (CLEARLY_LATER): on a shared core each waits out the spin (75 us to 1 ms).
 * Trials come every FIRST_HOLD expected frames at first, twice as far apart each time the verdict
 * stays, up to LONGEST_HOLD; and at once when a run of held frames came clearly later than the
 * trial's: the scheduler moved one side to the other's core, or away. Pinned beside a busy
 * process per core (bench/README.md: six runs before, three after), turns and the early end
 * took a shared core's round trips from 1.60-1.85 times the bare TCP ping-pong's to 1.40-1.47
 * (69-77 us), and left two cores' as they were (0.48-0.59 times, against 0.51-0.58). What is left on a shared
 * core is in the tail: there 1-1.5 % of round trips wait out the busy process's turn (0.3-16 ms)
 * and carry half the time, which medians of sixteen frames do not see (always asleep: 1.2-1.3
 * times there and 1.1 on two cores, pinned, but 48-385 us from run to run unpinned).
 * Greedy on both sides, this finds what pays for both: on two cores one side's spin already
 * shortens its replies, and then the other's pays too; on one core two spinners share it by turns.
 * A frame later than the longest spin says nothing of wake-ups; MISSES_TO_SLEEP of them in a row
 * while spinning (the peer pauses) make it sleep until the next trial. Ten client processes one
 * after the other beside the busy processes, unpinned: round trips of 68-126 us, against 48-385
 * us always sleeping (bench/README.md); trials at random moments, to keep the two sides' trials
 * apart, did worse there (60-163 us).
 * Where the peer is a process on this host that can be seen, the policy does not ask a trial
 * while the two ran on one core last: it sleeps (co-location.ts).
 * Deterministic: the caller feeds it arrival times and the coin (test/poll-policy.test.ts).
 */

/** Frames slept for, and as many spun for, in one trial (in turns); held frames are watched in runs of as many. */
const TRIAL_FRAMES = 16;
/** Expected frames between the first trials, and at most. */
const FIRST_HOLD = 256;
const LONGEST_HOLD = 4096;
/** Spins start to pay when the spun-for median is under this share of the slept-for one. */
const SPIN_PAYS = 0.9;
/**
 * Clearly later: by this factor and CLEARLY_LATER_US more. A run of held frames whose median is
 * clearly later than the trial's calls a trial.
 */
const CLEARLY_LATER = 1.5;
const CLEARLY_LATER_US = 20;
/** Spun-for frames in a row, each clearly later than the slept-for median, that end a spin trial at once. */
const TRIAL_LATE_TO_STOP = 2;
/** Frames in a row that come later than the longest spin before a held spin sleeps. */
const MISSES_TO_SLEEP = 3;

type Phase = 'trial' | 'hold';

export class CrowdTrial {
  private phase: Phase = 'trial';
  /** A trial's frames, slept for and spun for in turns, each: how long after being expected it came. */
  private slept: number[] = [];
  private spun: number[] = [];
  /** Spun-for frames of this trial in a row that came clearly later than the slept-for ones. */
  private lateInTrial = 0;
  /** Whether the current pair of a trial's frames spins for its first, or its second. */
  private spinFirst = false;
  /** The current run of held frames, likewise. */
  private samples: number[] = [];
  /** The last trial's medians: slept for, and spun for. */
  private sleptUs: number | undefined;
  private spunUs: number | undefined;
  /** The verdict held until the next trial (none before the first trial ends). */
  private verdict: 'spin' | 'sleep' | undefined;
  /** Why the verdict is what it is, for describe(). */
  private reason: 'trial' | 'misses' | undefined;
  private hold = FIRST_HOLD;
  private holdLeft = 0;
  private misses = 0;
  private lastWindowUs = 0;

  /** Spins last at least `minUs` and at most `maxUs`; `random` orders each pair of a trial's frames. */
  constructor(
    private readonly minUs: number,
    private readonly maxUs: number,
    private readonly random: () => number = Math.random,
  ) {}

  /** Whether it spins now (outside the trials). */
  get spins(): boolean {
    return this.verdict === 'spin';
  }

  /** The verdict (undefined: untried): OFFLOAD_DEBUG says it again when it or its reason changes. */
  get verdictNow(): 'spin' | 'sleep' | undefined {
    return this.verdict;
  }

  get verdictReason(): 'trial' | 'misses' | undefined {
    return this.reason;
  }

  /** A frame is expected now: how many microseconds to spin for it (0: sleep). */
  window(): number {
    const spin = this.phase === 'trial' ? this.trialSpins() : this.spins;
    this.lastWindowUs = spin ? this.spinUs() : 0;
    return this.lastWindowUs;
  }

  /**
   * Whether this frame of a trial is spun for: one of each pair is, which one by a coin, so that
   * the peer's trial, whatever its phase, spins as often with this side's spins as with its sleeps.
   */
  private trialSpins(): boolean {
    if ((this.slept.length + this.spun.length) % 2 === 0) this.spinFirst = this.random() < 0.5;
    return this.spun.length < this.slept.length || (this.spun.length === this.slept.length && this.spinFirst);
  }

  /** As long as a frame slept for took to be seen (in this trial, else in the last), within the bounds. */
  private spinUs(): number {
    const slept = this.slept.length > 0 ? median(this.slept) : this.sleptUs;
    return Math.min(this.maxUs, Math.max(this.minUs, slept ?? this.minUs));
  }

  /** The frame expected last came `gapUs` microseconds after it was expected. */
  arrived(gapUs: number): void {
    if (this.phase === 'trial') {
      if (this.lastWindowUs === 0) this.slept.push(gapUs);
      else {
        this.spun.push(gapUs);
        const late = this.slept.length > 0 && this.clearlyLater(gapUs, median(this.slept));
        this.lateInTrial = late ? this.lateInTrial + 1 : 0;
      }
      const done = this.spun.length === TRIAL_FRAMES && this.slept.length === TRIAL_FRAMES;
      if (done || this.lateInTrial >= TRIAL_LATE_TO_STOP) this.judge();
      return;
    }
    this.samples.push(gapUs);
    const run = this.samples.length === TRIAL_FRAMES ? median(this.samples.splice(0)) : undefined;
    if (this.spins && this.lastWindowUs > 0) {
      this.misses = gapUs > this.maxUs ? this.misses + 1 : 0;
      if (this.misses >= MISSES_TO_SLEEP) {
        this.verdict = 'sleep';
        this.reason = 'misses';
        this.hold = FIRST_HOLD;
        this.holdLeft = Math.min(this.holdLeft, FIRST_HOLD);
        this.samples = [];
      }
    }
    const trialUs = this.spins ? this.spunUs! : this.sleptUs!;
    const changed = run !== undefined && this.reason === 'trial' && this.clearlyLater(run, trialUs);
    if (changed) this.hold = FIRST_HOLD;
    if (--this.holdLeft <= 0 || changed) {
      this.samples = [];
      this.phase = 'trial';
    }
  }

  private clearlyLater(gapUs: number, thanUs: number): boolean {
    return gapUs > CLEARLY_LATER * thanUs + CLEARLY_LATER_US;
  }

  private judge(): void {
    this.sleptUs = median(this.slept.splice(0));
    this.spunUs = median(this.spun.splice(0));
    this.lateInTrial = 0;
    const ratio = this.spunUs / Math.max(1, this.sleptUs);
    const verdict = ratio < SPIN_PAYS || (this.spins && ratio < 1) ? 'spin' : 'sleep';
    this.hold = verdict === this.verdict ? Math.min(LONGEST_HOLD, 2 * this.hold) : FIRST_HOLD;
    this.verdict = verdict;
    this.reason = 'trial';
    this.holdLeft = this.hold;
    this.misses = 0;
    this.phase = 'hold';
  }

  /** The last trial in words (for OFFLOAD_DEBUG), or undefined before the first one ends. */
  describe(): string | undefined {
    if (this.reason === 'misses') return `spins found nothing ${MISSES_TO_SLEEP} times in a row (the peer pauses)`;
    if (this.verdict === undefined) return undefined;
    const spun = this.spunUs!.toFixed(0);
    const slept = this.sleptUs!.toFixed(0);
    return this.spins
      ? `spins up to ${this.spinUs().toFixed(0)} us for every frame expected: frames spun for came in ${spun} us, slept for in ${slept} us`
      : `a spin brought frames no sooner (${spun} us against ${slept} us slept for)`;
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1]!;
}
