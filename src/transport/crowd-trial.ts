/**
 * Whether to spin for a frame on a crowded machine, measured rather than assumed. A load above
 * the cores says the machine is full, not where the peer runs. Beside one busy process per core
 * on a 2-vCPU VM (bench/README.md), a client and its local proxy
 *   - on one core answered each other in 45-96 us sleeping and in 150-1,100 us spinning: the spin
 *     takes the core the peer needs;
 *   - on two cores, in 350-450 us sleeping (each wake-up crosses to a core that runs the busy
 *     process), 270-300 us with one of them spinning and 70-107 us with both.
 * So under a crowd each side tries both now and then: TRIAL_FRAMES expected frames slept for,
 * then as many spun for, each as long as a sleep took to see one (longer never pays), and it
 * spins until the next trial when the spun-for frames came sooner by a clear margin. Holding a
 * spin, MISSES_TO_SLEEP frames in a row that come later than the longest spin (the peer pauses)
 * make it sleep until then; later than the spin alone is no reason: the peer's own trial, or a
 * busy process's turn on either core, causes that now and then. Trials come every FIRST_HOLD expected frames at first, twice as far apart each time
 * the verdict stays, up to LONGEST_HOLD. A peer that trials too only helps: from both asleep, a
 * spin on one side already shortens its replies, and then the other side's spin pays as well.
 * Deterministic: the caller feeds it arrival times (test/poll-policy.test.ts).
 */

/** Frames slept for, then as many spun for, in one trial. */
const TRIAL_FRAMES = 16;
/** Expected frames between the first trials, and at most. */
const FIRST_HOLD = 256;
const LONGEST_HOLD = 4096;
/** Spins pay when the spun-for frames' median is under this share of the slept-for ones'. */
const SPIN_PAYS = 0.9;
/** Frames in a row that come later than the longest spin before a held spin sleeps. */
const MISSES_TO_SLEEP = 3;

type Phase = 'sleep-trial' | 'spin-trial' | 'hold';

export class CrowdTrial {
  private phase: Phase = 'sleep-trial';
  private samples: number[] = [];
  /** The last trial's medians: how long after being expected frames came, slept for and spun for. */
  private sleptUs: number | undefined;
  private spunUs: number | undefined;
  /** The verdict held until the next trial (none before the first trial ends). */
  private verdict: 'spin' | 'sleep' | undefined;
  private hold = FIRST_HOLD;
  private holdLeft = 0;
  private misses = 0;
  /** Whether the verdict became sleep because held spins found nothing. */
  private missed = false;
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

  /** A frame is expected now: how many microseconds to spin for it (0: sleep). */
  window(): number {
    this.lastWindowUs =
      this.phase === 'spin-trial' || (this.phase === 'hold' && this.verdict === 'spin') ? this.spinUs() : 0;
    return this.lastWindowUs;
  }

  /** As long as a frame slept for took to be seen, within the bounds. */
  private spinUs(): number {
    return Math.min(this.maxUs, Math.max(this.minUs, this.sleptUs ?? this.minUs));
  }

  /** The frame expected last came `gapUs` microseconds after it was expected. */
  arrived(gapUs: number): void {
    if (this.phase !== 'hold') {
      this.samples.push(gapUs);
      if (this.samples.length === TRIAL_FRAMES) this.endPhase(median(this.samples.splice(0)));
      return;
    }
    if (this.verdict === 'spin' && this.lastWindowUs > 0) {
      this.misses = gapUs > this.maxUs ? this.misses + 1 : 0;
      if (this.misses >= MISSES_TO_SLEEP) {
        this.verdict = 'sleep';
        this.missed = true;
        this.hold = FIRST_HOLD;
        this.holdLeft = Math.min(this.holdLeft, FIRST_HOLD);
      }
    }
    if (--this.holdLeft <= 0) this.phase = 'sleep-trial';
  }

  private endPhase(medianUs: number): void {
    if (this.phase === 'sleep-trial') {
      this.sleptUs = medianUs;
      this.phase = 'spin-trial';
      return;
    }
    this.spunUs = medianUs;
    const verdict = this.spunUs < SPIN_PAYS * this.sleptUs! ? 'spin' : 'sleep';
    this.hold = verdict === this.verdict ? Math.min(LONGEST_HOLD, 2 * this.hold) : FIRST_HOLD;
    this.verdict = verdict;
    this.holdLeft = this.hold;
    this.misses = 0;
    this.missed = false;
    this.phase = 'hold';
  }

  /** The last trial in words (for OFFLOAD_DEBUG), or undefined before the first one ends. */
  describe(): string | undefined {
    if (this.verdict === undefined) return undefined;
    const spun = this.spunUs!.toFixed(0);
    const slept = this.sleptUs!.toFixed(0);
    if (this.verdict === 'spin')
      return `spins up to ${this.spinUs().toFixed(0)} us for every frame expected: frames spun for came in ${spun} us, slept for in ${slept} us`;
    if (this.missed) return `spins found nothing ${MISSES_TO_SLEEP} times in a row (the peer pauses)`;
    return `a spin brought frames no sooner (${spun} us against ${slept} us slept for)`;
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1]!;
}
