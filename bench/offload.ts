/**
 * The runtime the benchmarks measure: the build in dist/, which is what a user's program runs
 * (`npm install` builds it), not src/ through tsx. tsx's transform wraps every closure made in
 * a naming helper (an Object.defineProperty each): a CPU profile put 2 of a host launch's 3.3 us
 * in that helper, which no user pays. From src/ only when there is no build.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as Api from '../src/index.js';

const built = new URL('../dist/index.js', import.meta.url);
const builtPath = fileURLToPath(built);
const srcPath = fileURLToPath(new URL('../src', import.meta.url));

const api: typeof Api = existsSync(builtPath) ? await import(built.href) : await import('../src/index.js');

/** What `npm run bench` says it measured, and whether dist/ is older than src/. */
export function runtimeSource(): string {
  if (!existsSync(builtPath))
    return "src/ through tsx (no dist/ build: figures include tsx's transform; run npm run build)";
  const newest = (dir: string): number =>
    Math.max(
      ...readdirSync(dir, { withFileTypes: true }).map((entry) =>
        entry.isDirectory() ? newest(join(dir, entry.name)) : statSync(join(dir, entry.name)).mtimeMs,
      ),
    );
  return newest(srcPath) > statSync(builtPath).mtimeMs
    ? 'dist/ (OLDER than src/: run npm run build first)'
    : 'dist/ (the build a program runs)';
}

export const { Offload, map, spread } = api;

const builtXsbench = new URL('../dist/apps/xsbench.js', import.meta.url);

/** XSBench from the same place as the runtime (its runtime.spread and spread.part must be the runtime's). */
export const xsbench: typeof import('../src/apps/xsbench.js') = existsSync(builtPath)
  ? await import(builtXsbench.href)
  : await import('../src/apps/xsbench.js');

/** A module of the runtime from the same place as the rest (`path` under src/, without extension): a bench that builds a plugin itself must use the runtime's own registry. */
export async function runtimeModule<T>(path: string): Promise<T> {
  return (await import(
    existsSync(builtPath) ? new URL(`../dist/${path}.js`, import.meta.url).href : `../src/${path}.js`
  )) as T;
}
