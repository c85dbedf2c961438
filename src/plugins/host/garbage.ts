/**
 * Asks V8 for a full garbage collection now, on the calling thread.
 *
 * Why: a context's device memory is a shared WebAssembly.Memory that the main thread and every
 * worker hold a reference to (through their instances). Its pages go back to the OS only when
 * every one of those threads has collected its reference, and an idle worker, which allocates
 * nothing, may not collect for hours: measured, 400 contexts of 1 MiB touched each left the RSS
 * 400 MiB higher until each thread ran a collection. `vm.measureMemory` with eager execution is
 * Node's one documented way to start a collection without --expose-gc; it announces itself with
 * an ExperimentalWarning, which is ours to drop, not the program's to see.
 */
import { measureMemory } from 'node:vm';
import { performance } from 'node:perf_hooks';

/** The shortest time between two collections asked for with collectGarbageSoon. */
const MIN_INTERVAL_MS = 250;
let scheduled: NodeJS.Timeout | undefined;
let last = 0;

/**
 * Asks for a collection soon, coalescing requests: many contexts ending together (a proxy's
 * clients leaving) cost one collection, and never more than one per MIN_INTERVAL_MS.
 */
export function collectGarbageSoon(): void {
  if (scheduled) return;
  const wait = Math.max(0, last + MIN_INTERVAL_MS - performance.now());
  scheduled = setTimeout(() => {
    scheduled = undefined;
    last = performance.now();
    void collectGarbage();
  }, wait);
  scheduled.unref();
}

export function collectGarbage(): Promise<void> {
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called with process as `this` below, and put back as it was
  const emitWarning = process.emitWarning;
  process.emitWarning = (warning: string | Error, ...rest: unknown[]) => {
    if (!String(warning).includes('measureMemory'))
      (emitWarning as (...args: unknown[]) => void).call(process, warning, ...rest);
  };
  try {
    return measureMemory({ mode: 'summary', execution: 'eager' }).then(
      () => undefined,
      () => undefined,
    );
  } finally {
    process.emitWarning = emitWarning;
  }
}
