/** Timing: warm-up, alternating repetitions, and the statistics reported. */

/** How many times each contender runs; `--quick` lowers both. */
export interface Plan {
  /** Untimed runs first: JIT warm-up, page faults, worker wake-up paths. At least 1. */
  warmup: number;
  repetitions: number;
  quick: boolean;
  /** `--busy`: suites that can also measure their launch and transfer rows beside a CPU hog (bench/hog.ts) do. */
  busy?: boolean;
}

/** One side of a comparison: `run()` does `count` units of work (bytes, launches) once. */
export interface Contender {
  label: string;
  count: number;
  run(): Promise<void> | void;
}

/** The seconds each timed repetition of a contender took. */
export interface Series {
  label: string;
  count: number;
  seconds: number[];
}

/** V8's collector, when node runs with --expose-gc (as `npm run bench` does). */
const collectGarbage = (globalThis as { gc?: () => void }).gc;

/** Whether a contender's large garbage is collected before the next one runs (see measure). */
export const collectsBetweenRuns = collectGarbage !== undefined;

/** A timed run that leaves more than this on the heap and in buffers has it collected before the next. */
const GARBAGE_BYTES = 16 * 1024 * 1024;

function heldBytes(): number {
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

/**
 * `plan` with `factor` times its repetitions (a quick plan as it is): for contenders whose one
 * repetition is short enough that a busy neighbour's few ms move it by 10 % and more.
 */
export function withMoreRepetitions(plan: Plan, factor: number): Plan {
  return plan.quick ? plan : { ...plan, repetitions: factor * plan.repetitions };
}

/**
 * Times contenders in alternation: all warm up first, then each repetition runs every
 * contender once, so a slow phase of the (shared, 2-vCPU) machine hits all of them alike.
 * A timed run that leaves more than GARBAGE_BYTES behind has it collected, and its memory
 * released, untimed, before the next contender runs: a bare 64 MiB socket read leaves 32 MiB of
 * buffers, and their collection and release ran on the 2 vCPUs beside the remote write timed
 * after it, costing that write up to 40 %. (Collecting before every run instead made
 * microsecond round trips of both sides slower.)
 */
export async function measure(plan: Plan, contenders: readonly Contender[]): Promise<Series[]> {
  for (const contender of contenders) {
    for (let i = 0; i < plan.warmup; i++) await contender.run();
  }
  collectGarbage?.();
  const series = contenders.map(({ label, count }): Series => ({ label, count, seconds: [] }));
  for (let r = 0; r < plan.repetitions; r++) {
    for (const [index, contender] of contenders.entries()) {
      const held = collectGarbage ? heldBytes() : 0;
      const start = performance.now();
      await contender.run();
      series[index]!.seconds.push((performance.now() - start) / 1000);
      if (collectGarbage && heldBytes() - held > GARBAGE_BYTES) {
        collectGarbage();
        // Buffers' memory is released by V8's sweeper after the collection returns: let it finish.
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  }
  return series;
}

export interface Spread {
  median: number;
  min: number;
  max: number;
}

export function spread(values: readonly number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
  return { median, min: sorted[0]!, max: sorted[sorted.length - 1]! };
}
