/**
 * Kernel bundles built on demand and cached by content: the `offload` commands' own kernels (the
 * demo's, the proxy apps'), the benchmarks' and the tests'. A bundle is keyed by a hash of its
 * sources, the device library and the build tool, so it is rebuilt exactly when one of them
 * changes and only the first run pays the compiler.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { buildBundle } from '../build/compile.js';

const DEVICE_LIBRARY = fileURLToPath(new URL('../../assembly/device.ts', import.meta.url));
/** The device library of C, C++ and Rust kernels. */
const NATIVE_DEVICE_LIBRARY = ['offload.h', 'offload_math.h', 'offload.rs'].map((file) =>
  fileURLToPath(new URL(`../../assembly/${file}`, import.meta.url)),
);
/** The build tool's own files (src/build or dist/build): a compiler change invalidates the cache. */
const BUILD_TOOL = fileURLToPath(new URL('../build/', import.meta.url));

/**
 * Where built kernels are kept between runs: OFFLOAD_CACHE_DIR, else the user's cache directory
 * by the platform's rules (XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches on macOS,
 * %LOCALAPPDATA% on Windows), in a folder `offload-ts`; the system's temporary directory only
 * where there is no home. Not the temporary directory by default: that is shared with every
 * user and emptied at reboot.
 */
export function userCacheDir(
  env: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
  home: string = os.homedir(),
): string {
  if (env.OFFLOAD_CACHE_DIR) return path.resolve(env.OFFLOAD_CACHE_DIR);
  if (platform === 'win32' && env.LOCALAPPDATA) return path.join(env.LOCALAPPDATA, 'offload-ts', 'Cache');
  if (!home) return path.join(os.tmpdir(), 'offload-ts-cache');
  if (platform === 'darwin') return path.join(home, 'Library', 'Caches', 'offload-ts');
  // XDG: a relative XDG_CACHE_HOME is invalid and ignored.
  const xdg = env.XDG_CACHE_HOME;
  return path.join(xdg && path.isAbsolute(xdg) ? xdg : path.join(home, '.cache'), 'offload-ts');
}

export interface CacheOptions {
  /** Names the cached file: `<label>-<hash>.offload`. */
  label: string;
  /** The bundle's name in its manifest (OFFLOAD_INFO shows it). Default: `<label>-<hash>`. */
  name?: string;
  /** Where the bundles are kept. Default: `userCacheDir()`. */
  dir?: string;
  /** Files the sources include (a C kernel's headers): a change to one rebuilds the bundle too. */
  includes?: readonly string[];
  /** Build with bounds checks (BuildOptions.checked); cached apart from the unchecked bundle. */
  checked?: boolean;
}

/** The bundle of `sources`; `compileMs` is set when it was compiled now. */
export async function cachedBundle(
  sources: string | readonly string[],
  options: CacheOptions,
): Promise<{ path: string; compileMs?: number }> {
  const list = typeof sources === 'string' ? [sources] : [...sources];
  const tool = (await readdir(BUILD_TOOL)).sort().map((file) => path.join(BUILD_TOOL, file));
  const hash = createHash('sha256');
  for (const file of [...list, ...(options.includes ?? []), DEVICE_LIBRARY, ...NATIVE_DEVICE_LIBRARY, ...tool])
    hash.update(await readFile(file));
  if (options.checked === true) hash.update('checked');
  const key = `${options.label}-${hash.digest('hex').slice(0, 12)}`;
  const dir = options.dir ?? userCacheDir();
  const bundlePath = path.join(dir, `${key}.offload`);
  if (existsSync(bundlePath)) return { path: bundlePath };

  await mkdir(dir, { recursive: true });
  const started = performance.now();
  // Built under a private name and renamed, so a concurrent run never reads a partial file.
  const built = await buildBundle({
    sources: list,
    output: path.join(dir, `${key}-${process.pid}`),
    name: options.name ?? key,
    ...(options.checked === true ? { checked: true } : {}),
  });
  await rename(built.path, bundlePath);
  // Callers launch through the API, not the typed wrappers buildBundle writes beside the bundle.
  await Promise.all([rm(built.wrappers.js, { force: true }), rm(built.wrappers.dts, { force: true })]);
  return { path: bundlePath, compileMs: performance.now() - started };
}
