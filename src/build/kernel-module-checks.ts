/**
 * What a device refuses of a compiled kernel module, each refusal naming the files, functions or
 * variables at fault: code that allocates, mutable module-level variables not declared private per
 * team, imports a device does not provide, and exports that are not kernels.
 */
import path from 'node:path';
import { errors } from '../errors.js';
import type { EntryInfo } from '../image/manifest.js';
import {
  ASYNCIFY_EXPORTS,
  BARRIER_IMPORT,
  DEVICE_IMPORTS,
  DEVICE_IMPORT_MODULE,
  ENV_IMPORTS,
  MAX_PAGES,
} from '../image/wasm-abi.js';
import { displaySource, LIBRARY_PREFIX, type SourceSet } from './kernel-sources.js';
import type { MemoryLimits, WasmModuleInfo } from './wasm-module-info.js';

/** What the stub runtime's allocator is named in the compiled module. */
export const STUB_RUNTIME_PREFIX = '~lib/rt/stub/';
const ALLOWED_IMPORTS = new Set([
  ...ENV_IMPORTS.map((name) => `env.${name}`),
  ...DEVICE_IMPORTS.map((name) => `${DEVICE_IMPORT_MODULE}.${name}`),
]);

/**
 * A device has no heap: the stub runtime would bump-allocate from the end of static data, over
 * device buffers, and no two workers would agree on its state. Any trace of the stub allocator
 * in the optimized module means some kernel code allocates.
 */
export function checkAllocations(wat: string, sources: SourceSet, hasStart: boolean): void {
  if (!wat.includes(`$${STUB_RUNTIME_PREFIX}`)) return;
  const allocating = new Set<string>();
  let current = '';
  for (const line of wat.split('\n')) {
    const func = /^ \(func \$(\S+)/.exec(line);
    if (func !== null) current = func[1]!;
    // Skip module-level lines, compiler functions and top-level code (`~start`, `start:<file>`).
    else if (
      line.includes(`$${STUB_RUNTIME_PREFIX}`) &&
      current !== '' &&
      !current.startsWith('~') &&
      !current.startsWith('start:')
    ) {
      allocating.add(current);
    }
  }
  // Internal function names are `<source path without .ts>/<name>`.
  const places = [...allocating].map((internal) => {
    const slash = internal.lastIndexOf('/');
    return `${displaySource(sources.baseDir, `${internal.slice(0, slash)}.ts`)} (function '${internal.slice(slash + 1)}')`;
  });
  // No kernel names the allocator itself: the start function (top-level code, or the runtime's
  // set-up for allocating code) does, and refuseTopLevelCode tells which.
  if (places.length === 0 && hasStart) return;
  throw allocationError(places.length > 0 ? places.join(', ') : entryFiles(sources));
}

export function allocationError(where: string) {
  return errors.invalidArgument(
    `kernel code allocates managed memory in ${where}: a device has no heap, so kernels must not use ` +
      `new, arrays, typed arrays, strings or closures; use device pointers (usize) with load<T>/store<T> instead`,
  );
}

export function entryFiles(sources: SourceSet): string {
  return sources.entries.map((e) => displaySource(sources.baseDir, e)).join(', ');
}

/** A source line that declares module-level variables per running team: `// offload: private a, b`. */
const PRIVATE_LINE = /^[ \t]*\/\/[ \t]*offload:[ \t]*private[ \t]+(.+)$/gm;

/**
 * A mutable module-level variable (`let x` at the top of a kernel file) is a wasm global: each
 * worker's instance of the image has its own, so a counter a kernel bumps would count per worker
 * (and per replaced worker), silently unlike a GPU, where a module-level variable is one per
 * device. Such variables are refused, named, unless the file declares them private per running
 * team (`// offload: private wRe, wIm`, as WGSL's var<private>): scratch a team writes before it
 * reads, whose value no other team or launch sees. Variables the optimizer proved constant (or
 * unused) are gone from the module by now, and the device library's own are not the program's.
 */
export function checkModuleVariables(wat: string, sources: SourceSet): void {
  const declared = new Set<string>();
  for (const [file, text] of Object.entries(sources.texts)) {
    const internal = path.relative(sources.baseDir, file).split(path.sep).join('/').replace(/\.ts$/, '');
    for (const [, names] of text.matchAll(PRIVATE_LINE)) {
      for (const name of names!.split(',')) if (name.trim() !== '') declared.add(`${internal}/${name.trim()}`);
    }
  }
  const shared = [...wat.matchAll(/^ \(global \$(\S+) \(mut /gm)]
    .map(([, internal]) => internal!)
    .filter((internal) => !internal.startsWith(LIBRARY_PREFIX) && !internal.startsWith('~') && !declared.has(internal));
  if (shared.length === 0) return;
  const places = shared.map((internal) => {
    const slash = internal.lastIndexOf('/');
    return `${displaySource(sources.baseDir, `${internal.slice(0, slash)}.ts`)} (variable '${internal.slice(slash + 1)}')`;
  });
  throw errors.invalidArgument(
    `mutable module-level variables in ${places.join(', ')}: each worker of the host device would hold its own copy, not one per ` +
      `device as on a GPU; keep state that teams or launches share in device memory (a buffer passed to the kernel), make a value ` +
      `that never changes a const, or, for scratch a team writes before it reads, declare it private per team with a ` +
      `'// offload: private <name>, ...' line in its file`,
  );
}

export function checkImports(info: WasmModuleInfo): void {
  for (const { module, name } of info.imports) {
    if (!ALLOWED_IMPORTS.has(`${module}.${name}`)) {
      throw errors.invalidArgument(
        `the kernels import '${module}.${name}', which a device does not provide ` +
          `(allowed: ${[...ALLOWED_IMPORTS].join(', ')}); remove the @external/declare'd function or the API that needs it`,
      );
    }
  }
  const memory = memoryImportOf(info);
  // Kernels that touch no memory compile (optimised) to a module without the import: nothing to check.
  if (memory !== undefined && (!memory.shared || memory.maximum !== MAX_PAGES)) {
    throw errors.invalidArgument(`the compiled module's memory import is not shared with maximum ${MAX_PAGES} pages`);
  }
}

/** The module's env.memory import; undefined when its code touches no memory (the optimiser drops the import then). */
export function memoryImportOf(info: WasmModuleInfo): MemoryLimits | undefined {
  return info.imports.find((i) => i.module === 'env' && i.name === 'memory' && i.kind === 'memory')?.memory;
}

/**
 * The module's function exports must be exactly the kernels the manifest lists (and, in a module
 * with barriers, the functions asyncify adds for the host device).
 */
export function checkExports(info: WasmModuleInfo, entries: EntryInfo[]): void {
  const exported = new Set(info.exports.filter((e) => e.kind === 'function').map((e) => e.name));
  if (info.imports.some((i) => i.module === DEVICE_IMPORT_MODULE && i.name === BARRIER_IMPORT)) {
    for (const name of ASYNCIFY_EXPORTS) exported.delete(name);
  }
  for (const entry of entries) {
    if (!exported.delete(entry.name))
      throw errors.invalidArgument(`kernel '${entry.name}' is missing from the compiled module's exports`);
  }
  const [extra] = exported;
  if (extra !== undefined) {
    throw errors.invalidArgument(
      `the compiled module exports function '${extra}', which is not a kernel of the entry files`,
    );
  }
}
