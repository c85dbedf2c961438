/**
 * Builds AssemblyScript fixture kernels into bundles once per content: the bundle lands in
 * test/fixtures/build/<name>-<hash>.offload and later test files (separate processes) reuse it.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBundle } from '../../src/build/compile.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Path of the bundle built from `source` (relative to the repository root). */
export async function fixtureBundle(source = 'test/fixtures/kernels.ts'): Promise<string> {
  // Keyed by everything that shapes the bundle: the kernels, the device library and the build tool.
  const hash = createHash('sha256');
  for (const file of [source, 'assembly/device.ts', ...readdirSync(join(root, 'src/build')).map((f) => `src/build/${f}`)]) {
    hash.update(readFileSync(join(root, file)));
  }
  const key = hash.digest('hex').slice(0, 12);
  const output = join(root, 'test/fixtures/build', `${basename(source, '.ts')}-${key}`);
  if (!existsSync(`${output}.offload`)) await buildBundle({ sources: [join(root, source)], output });
  return `${output}.offload`;
}
