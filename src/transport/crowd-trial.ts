/**
 * Whether to spin for a frame on a crowded machine, measured rather than assumed. A load above
 * the cores says the machine is full, not where the peer runs. Beside one busy process per core
 * on a 2-vCPU VM (bench/README.md), a client and its local proxy
 *   - on one core answered each other in 45-96 us sleeping and in 150-1,100 us spinning: the spin
 *     takes the core the peer needs;
 *   - on two cores, in 350-450 us sleeping (each wake-up crosses to a core that runs the busy
 *     process), 270-300 us with one of them spinning and 70-107 us with both.
 * So under a crowd each side runs trials: TRIAL_FRAMES expected frames slept for, then as many
 * spun for, each as long as a sleep took to see one (longer never pays); it spins until the next
 * trial when the spun-for frames came sooner by a clear margin (SPIN_PAYS; a spin held stops
 * only at no sooner at all). Trials come every FIRST_HOLD expected frames at first, twice as far
 * apart each time the verdict stays, up to LONGEST_HOLD; and at once when held frames came much
 * later than the trial's (CHANGED): the scheduler moved one side to the other's core, or away.
 * Greedy on both sides, this finds what pays for both: on two cores one side's spin already
 * shortens its replies, and then the other's pays too; on one core two spinners share it by turns.
 * A frame later than the longest spin says nothing of wake-ups; MISSES_TO_SLEEP of them in a row
 * while spinning (the peer pauses) make it sleep until the next trial. Ten client processes one
 * after the other beside the busy processes, unpinned: round trips of 68-126 us, against 48-385
 * us always sleeping (bench/README.md); trials at random moments, to keep the two sides' trials
 * apart, did worse there (60-163 us).
 * Deterministic: the caller feeds it arrival times (test/poll-policy.test.ts).
 */

/** Frames slept for, then as many spun for, in one trial; held frames are watched in runs of as many. */
const TRIAL_FRAMES = 16;
/** Expected frames between the first trials, and at most. */
const FIRST_HOLD = 256;
const LONGEST_HOLD = 4096;
/** Spins start to pay when the spun-for median is under this share of the slept-for one. */
const SPIN_PAYS = 0.9;
/** A run of held frames whose median is this much later than the trial's, and CHANGED_US more, calls a trial. */
const CHANGED = 1.5;
const CHANGED_US = 20;
/** Frames in a row that come later than the longest spin before a held spin sleeps. */
const MISSES_TO_SLEEP = 3;

type Phase = 'sleep-trial' | 'spin-trial' | 'hold';

export class CrowdTrial {
  private phase: Phase = 'sleep-trial';
  /** How long after being expected this phase's frames came (held ones: the current run). */
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

  /** Spins last at least `minUs` and at most `maxUs`. */
  constructor(
    private readonly minUs: number,
    private readonly maxUs: number,
  ) {}

  /** Whether it spins now (outside the trials). */
  get spins(): boolean {
    return this.verdict === 'spin';
  }

  /** The verdict and why, in a word (what OFFLOAD_DEBUG says again when it changes). */
  get verdictSaid(): string {
    return `${this.verdict ?? 'untried'} ${this.reason ?? ''}`;
  }

  /** A frame is expected now: how many microseconds to spin for it (0: sleep). */
  window(): number {
    const spin = this.phase === 'spin-trial' || (this.phase === 'hold' && this.spins);
    this.lastWindowUs = spin ? this.spinUs() : 0;
    return this.lastWindowUs;
  }

  /** As long as a frame slept for took to be seen, within the bounds. */
  private spinUs(): number {
    return Math.min(this.maxUs, Math.max(this.minUs, this.sleptUs ?? this.minUs));
  }

  /** The frame expected last came `gapUs` microseconds after it was expected. */
  arrived(gapUs: number): void {
    this.samples.push(gapUs);
    const run = this.samples.length === TRIAL_FRAMES ? median(this.samples.splice(0)) : undefined;
    if (this.phase === 'sleep-trial') {
      if (run !== undefined) {
        this.sleptUs = run;
        this.phase = 'spin-trial';
      }
      return;
    }
    if (this.phase === 'spin-trial') {
      if (run !== undefined) this.judge(run);
      return;
    }
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
    const changed = run !== undefined && this.reason === 'trial' && run > CHANGED * trialUs + CHANGED_US;
    if (changed) this.hold = FIRST_HOLD;
    if (--this.holdLeft <= 0 || changed) {
      this.samples = [];
      this.phase = 'sleep-trial';
    }
  }

  private judge(spunUs: number): void {
    this.spunUs = spunUs;
    const ratio = spunUs / Math.max(1, this.sleptUs!);
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
