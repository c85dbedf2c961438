/**
 * A progress bar on stderr for the long steps of `offload bench` (making the data, the lookups):
 * drawn only on a terminal, and only once a step has taken `delayMs` (short runs stay quiet).
 */
import { performance } from 'node:perf_hooks';

export interface ProgressBar {
  /** `fraction` of the step done, in [0, 1]. */
  update(fraction: number): void;
  /** Clears the bar's line, if one was drawn. */
  done(): void;
}

export function progressBar(
  label: string,
  stream: Pick<NodeJS.WriteStream, 'isTTY' | 'write'> = process.stderr,
  delayMs = 2000,
): ProgressBar {
  const started = performance.now();
  let drawn = false;
  let shown = -1;
  return {
    update(fraction) {
      if (!stream.isTTY || performance.now() - started < delayMs) return;
      const percent = Math.floor(Math.min(1, Math.max(0, fraction)) * 100);
      if (percent === shown) return;
      shown = percent;
      const width = 30;
      const filled = Math.round((percent / 100) * width);
      stream.write(`\r  ${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${percent}%`);
      drawn = true;
    },
    done() {
      if (drawn) stream.write('\r\x1b[K');
    },
  };
}
