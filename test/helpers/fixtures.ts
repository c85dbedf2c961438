/**
 * Fixture kernels built once per content (see src/cli/kernel-cache.ts): the bundle lands in
 * test/fixtures/build/<name>-<hash>.offload and later test files (separate processes) reuse it.
 */
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cachedBundle } from '../../src/cli/kernel-cache.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * Path of the bundle built from `sources` (relative to the repository root). The default is the
 * conformance suite's bundle: a wasm and a wgsl image of the same kernels.
 */
export async function fixtureBundle(
  sources: string | string[] = ['test/fixtures/kernels.ts', 'test/fixtures/kernels.wgsl'],
): Promise<string> {
  const list = typeof sources === 'string' ? [sources] : sources;
  const label = basename(list[0]!).replace(/\.(ts|wgsl)$/, '');
  const bundle = await cachedBundle(
    list.map((source) => join(root, source)),
    { label, dir: join(root, 'test/fixtures/build') },
  );
  return bundle.path;
}
