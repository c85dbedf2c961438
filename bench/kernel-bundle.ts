/**
 * Builds bench/kernels.ts into a bundle once per content. The bundle lives under the system's
 * temporary directory, keyed by a hash of everything that shapes it, so later runs reuse it and
 * the repository stays clean.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBundle } from '../src/build/compile.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = 'bench/kernels.ts';

/** Path of the `.offload` bundle built from bench/kernels.ts. */
export async function benchBundle(): Promise<string> {
  const hash = createHash('sha256');
  for (const file of [source, 'assembly/device.ts', ...readdirSync(join(root, 'src/build')).map((f) => `src/build/${f}`)]) {
    hash.update(readFileSync(join(root, file)));
  }
  const output = join(tmpdir(), 'offload-ts-bench', `kernels-${hash.digest('hex').slice(0, 12)}`);
  if (!existsSync(`${output}.offload`)) await buildBundle({ sources: [join(root, source)], output });
  return `${output}.offload`;
}
