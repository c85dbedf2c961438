/**
 * The kernels of `npm run bench`: bench/kernels.ts (what only the benchmarks need) and the
 * example kernels they share with `offload demo`, in one bundle cached by content under the
 * system's temporary directory (src/cli/kernel-cache.ts), so the repository stays clean.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedBundle } from '../src/cli/kernel-cache.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Path of the bench bundle; `checked`: built with bounds checks (offload build --checked). */
export async function benchBundle(checked = false): Promise<string> {
  const bundle = await cachedBundle([join(root, 'bench/kernels.ts'), join(root, 'examples/kernels.ts')], {
    label: 'offload-bench-kernels',
    checked,
  });
  return bundle.path;
}
