/**
 * How long the proxy's event loop was held: a timer every RESOLUTION_MS, late by as long as a
 * callback held the loop, as node's monitorEventLoopDelay measures it. Unlike that monitor it
 * runs only while the proxy has work (requests, connections, refusals, scrapes) and for a
 * second after: an idle proxy's loop sleeps. Two 10 ms monitors (the metrics' and the stats
 * line's) woke every idle proxy about 100 times a second, each wake-up a switch that takes a core
 * from whatever the node runs (bench/README.md). One sampler serves both readers: the metrics' window
 * (p99 and max of each 10 s) and `kill -USR2`'s stats (the max since it last asked).
 */
import { createHistogram, performance, type RecordableHistogram } from 'node:perf_hooks';

/** How often the timer looks while the proxy has work, in ms (monitorEventLoopDelay's resolution here before). */
export const RESOLUTION_MS = 10;
/** Looks in a row with no work before the timer stops. */
const QUIET_LOOKS = 100;

export interface LoopWindow {
  /** Seconds. */
  p99: number;
  max: number;
}

export class LoopDelay {
  private readonly window: RecordableHistogram = createHistogram();
  /** The longest delay since the stats line last asked, in ns. */
  private sinceTakenNs = 0;
  private timer: NodeJS.Timeout | undefined;
  /** When the timer last fired (or started), performance.now(). */
  private lastLook = 0;
  private workSinceLook = false;
  private quietLooks = 0;
  private stopped = false;

  /** The proxy has work: the timer runs from now if it did not (a per-request call: two field writes when it does). */
  work(): void {
    this.workSinceLook = true;
    if (this.timer === undefined && !this.stopped) this.start();
  }

  private start(): void {
    this.lastLook = performance.now();
    this.quietLooks = 0;
    this.timer = setInterval(() => this.look(), RESOLUTION_MS);
    this.timer.unref();
  }

  private look(): void {
    const now = performance.now();
    const lateNs = Math.round((now - this.lastLook - RESOLUTION_MS) * 1e6);
    this.lastLook = now;
    // A histogram records 1 ns at the least: a look on time counts as such.
    this.window.record(Math.max(1, lateNs));
    if (lateNs > this.sinceTakenNs) this.sinceTakenNs = lateNs;
    if (this.workSinceLook) {
      this.workSinceLook = false;
      this.quietLooks = 0;
    } else if (++this.quietLooks >= QUIET_LOOKS) {
      this.pause();
    }
  }

  private pause(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Whether the timer runs now (the proxy had work within the last QUIET_LOOKS looks). */
  get running(): boolean {
    return this.timer !== undefined;
  }

  /** The figures of the window in progress (zero while nothing was measured). */
  windowNow(): LoopWindow {
    const { window } = this;
    return window.count > 0 ? { p99: window.percentile(99) / 1e9, max: window.max / 1e9 } : { p99: 0, max: 0 };
  }

  /** The window in progress's figures; a new window starts. */
  closeWindow(): LoopWindow {
    const figures = this.windowNow();
    this.window.reset();
    return figures;
  }

  /** The longest the loop was held since the last call (or the start), in ms; starts a new measurement. */
  takeMaxMs(): number {
    const max = this.sinceTakenNs / 1e6;
    this.sinceTakenNs = 0;
    return max;
  }

  /** Stops for good (the proxy shuts down). */
  stop(): void {
    this.stopped = true;
    this.pause();
  }
}
