/**
 * The kernel sources of a build: read (NOT_FOUND when missing), and named in messages as the
 * program would name them (relative to the working directory; the device library by its path).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { OffloadError, errors } from '../errors.js';
import { checkSourceNesting } from './source-nesting.js';

/**
 * The device library kernels import as `offload-ts/device`. src/build and dist/build sit at the
 * same depth below the package root, so this holds for sources run directly and compiled output.
 */
const DEVICE_LIBRARY = fileURLToPath(new URL('../../assembly/device.ts', import.meta.url));
/** The compiler's name for the device library once resolved (see compiler-worker.js). */
const DEVICE_LIBRARY_NAME = '~lib/offload-ts/device.ts';
export const LIBRARY_PREFIX = '~lib/';

/** The kernel sources of one build, as the compiler sees them. */
export interface SourceSet {
  /** asc's base directory: the deepest directory holding every entry file. */
  baseDir: string;
  /** Entry files relative to baseDir, with forward slashes, as asc takes them. */
  entries: string[];
  /** Entry file texts by absolute path. */
  texts: Record<string, string>;
  deviceText: string;
}

/** Reads the AssemblyScript entry files and the device library, and finds asc's base directory. */
export async function readSources(files: string[]): Promise<SourceSet> {
  const absolute = [...new Set(files.map((file) => path.resolve(file)))];
  const texts: Record<string, string> = {};
  for (const file of absolute) {
    texts[file] = await readSourceFile(file);
    checkSourceNesting(texts[file], displayPath(file));
  }
  const deviceText = await readSourceFile(DEVICE_LIBRARY);
  let baseDir = path.dirname(absolute[0]!);
  for (const file of absolute) {
    while (path.relative(baseDir, file).split(path.sep)[0] === '..') baseDir = path.dirname(baseDir);
  }
  const entries = absolute.map((file) => path.relative(baseDir, file).split(path.sep).join('/'));
  return { baseDir, entries, texts, deviceText };
}

export async function readSourceFile(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (cause) {
    const shown = displayPath(file);
    if ((cause as NodeJS.ErrnoException).code === 'ENOENT') throw errors.notFound(`kernel source not found: ${shown}`);
    throw new OffloadError('INVALID_ARGUMENT', `cannot read kernel source ${shown}: ${(cause as Error).message}`, {
      cause,
    });
  }
}

/** The path to show for a compiler source path (relative to baseDir, or a library path). */
export function displaySource(baseDir: string, source: string): string {
  if (source === DEVICE_LIBRARY_NAME) return displayPath(DEVICE_LIBRARY);
  if (source.startsWith(LIBRARY_PREFIX)) return source;
  return displayPath(path.resolve(baseDir, source));
}

/** `file` relative to the working directory when inside it, else absolute. */
export function displayPath(file: string): string {
  const relative = path.relative(process.cwd(), file);
  return relative.startsWith('..') || path.isAbsolute(relative) ? file : relative;
}
