/**
 * Fixture kernels built once per content (see src/cli/kernel-cache.ts): the bundle lands in
 * test/fixtures/build/<name>-<hash>.offload and later test files (separate processes) reuse it.
 */
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedBundle } from '../../src/cli/kernel-cache.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Path of the bundle built from `source` (relative to the repository root). */
export async function fixtureBundle(source = 'test/fixtures/kernels.ts'): Promise<string> {
  const bundle = await cachedBundle(join(root, source), { label: basename(source, '.ts'), dir: join(root, 'test/fixtures/build') });
  return bundle.path;
}
