/**
 * Kernels the `offload` commands compile for themselves (the demo's, the proxy apps'), cached
 * under the system's temporary directory by a hash of the sources and the device library, so
 * only the first run pays the compiler.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBundle } from '../build/compile.js';

const DEVICE_LIBRARY = fileURLToPath(new URL('../../assembly/device.ts', import.meta.url));

/** The bundle of `source`; `compileMs` is set when it was compiled now. */
export async function cachedBundle(source: string, name: string): Promise<{ path: string; compileMs?: number }> {
  const hash = createHash('sha256');
  for (const file of [source, DEVICE_LIBRARY]) hash.update(await readFile(file));
  const dir = path.join(os.tmpdir(), `offload-${name}-${hash.digest('hex').slice(0, 12)}`);
  const bundlePath = path.join(dir, 'kernels.offload');
  if (existsSync(bundlePath)) return { path: bundlePath };

  await mkdir(dir, { recursive: true });
  const started = performance.now();
  // Built under a private name and renamed, so a concurrent run never reads a partial file.
  const built = await buildBundle({ sources: [source], output: path.join(dir, `kernels-${process.pid}`), name });
  await rename(built.path, bundlePath);
  // The commands launch through the API, not the typed wrappers buildBundle writes beside the bundle.
  await Promise.all([rm(built.wrappers.js, { force: true }), rm(built.wrappers.dts, { force: true })]);
  return { path: bundlePath, compileMs: performance.now() - started };
}
