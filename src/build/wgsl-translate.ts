/**
 * Translates the kernel subset of AssemblyScript to WGSL, by the WGSL kernel ABI
 * (docs/wgsl-abi.md), so that one kernel source runs on the host and the WebGPU devices. It reads
 * the compiler's own syntax trees and resolved types (compiler-worker.js sends them as
 * FunctionSyntax); README "One kernel source for every device" states the subset.
 *
 * How memory maps: a pointer parameter (`usize`) is a storage buffer of 32-bit words bound from
 * the pointer's offset, so in WGSL the pointer's value is 0 and an address traced back to it
 * (`x + offset`, a local computed from it) is a byte offset into its binding; `load<T>`/`store<T>`
 * at such an address index the binding's words (1- and 2-byte accesses shift and mask within
 * them, stores atomically so that neighbouring bytes written by other invocations survive). A
 * kernel that does anything else (i64, f64, addresses not traced to one parameter, traps,
 * printing, allocation) is not translated: the build reports it as a TranslationNote and the
 * kernel stays on the devices that run wasm.
 *
 * This file assembles the module (header, support functions, helpers, entry points). One
 * function's translation is a stack of layers, each extending the one below:
 * wgsl-translation-state.ts (scopes, pending statements), wgsl-expressions.ts, wgsl-memory.ts,
 * wgsl-calls.ts, wgsl-statements.ts and wgsl-function.ts (entry point and bindings); the tables
 * they read are wgsl-builtins.ts and wgsl-simd.ts, and wgsl-types.ts, wgsl-literals.ts,
 * wgsl-operators.ts and wgsl-names.ts hold the small pure pieces.
 */
import type { ConstantSyntax, FunctionSyntax, KernelSignature } from './compiler-job.js';
import type { TranslationNote } from '../image/manifest.js';
import { FAULT_BINDING_NAME, POINTER_BYTES_PREFIX } from '../image/manifest.js';
import { TEAM_MEMORY_OVERRIDE } from './wgsl-kernels.js';
import {
  GRID_VARS,
  ITEM_VARS,
  SUPPORT_CALLS,
  SUPPORT_FUNCTIONS,
  type SupportName,
  TEAM_MEMORY_WORDS,
  TRANSLATED_THREADS,
  TRANSLATED_THREADS_XYZ,
} from './wgsl-builtins.js';
import { FunctionTranslator } from './wgsl-function.js';
import { isPlainName } from './wgsl-names.js';
import type { MemoryUse } from './wgsl-translation-state.js';
import { Untranslatable } from './wgsl-types.js';

export type { TranslationNote };

/** What a translated function's WGSL needs the module to declare. */
interface ModuleNeeds {
  support: ReadonlySet<SupportName>;
  teamMemory: boolean;
}

export interface Translation {
  /** The WGSL module of the translated kernels ('' when none translates). */
  wgsl: string;
  /** The kernels translated, in the order given. */
  kernels: string[];
  /** One per kernel that stays wasm-only, in the order given. */
  notes: TranslationNote[];
}

/**
 * Translates every kernel of `kernels` that the subset covers (all but those in `skip`, which a
 * hand-written WGSL file defines).
 * @param display turns a compiler source path into the path to show in notes.
 */
export function translateKernels(
  sources: { functions: FunctionSyntax[]; constants: ConstantSyntax[] },
  kernels: KernelSignature[],
  display: (source: string) => string,
  skip: ReadonlySet<string> = new Set(),
  options: { teamMemoryDeclared?: boolean } = {},
): Translation {
  const { functions } = sources;
  const byInternal = new Map(functions.map((fn) => [fn.internalName, fn]));
  const constants = new Map(sources.constants.map((constant) => [constant.internalName, constant]));
  const helpers = new Map<string, { code: string; barrier: boolean; needs: ModuleNeeds } | { error: Untranslatable }>();
  const chunks: string[] = [];
  const needs: ModuleNeeds[] = [];
  const translated: string[] = [];
  const notes: TranslationNote[] = [];
  /** Translates a called function of the sources once; its failure is the caller's, naming where in it. */
  const helper = (internalName: string, stack: string[]): { fn: FunctionSyntax; barrier: boolean } => {
    const fn = byInternal.get(internalName)!;
    let known = helpers.get(internalName);
    if (known === undefined) {
      if (stack.includes(internalName))
        throw new Untranslatable(fn.line, `calls '${fn.name}' recursively (WGSL has no recursion)`);
      try {
        if (fn.body === null || fn.params === null) throw new Untranslatable(fn.line, fn.error ?? 'has no body');
        const translator = new FunctionTranslator(
          fn,
          'helper',
          byInternal,
          constants,
          (name) => helper(name, [...stack, internalName]),
          { written: new Set(), atomic: new Set() },
        );
        const code = translator.translate();
        known = { code, barrier: translator.barriers > 0, needs: translator };
      } catch (error) {
        if (!(error instanceof Untranslatable)) throw error;
        known = {
          error: new Untranslatable(
            error.line,
            `calls '${fn.name}', which at ${display(fn.source)}:${error.line} ${error.message}`,
          ),
        };
      }
      helpers.set(internalName, known);
    }
    if ('error' in known) throw known.error;
    return { fn, barrier: known.barrier };
  };
  for (const kernel of kernels) {
    if (skip.has(kernel.name)) continue;
    // A per-item kernel: its body (the function the build renamed) is the entry point's, once per item.
    const body = kernel.wrapped === undefined ? undefined : byInternal.get(kernel.wrapped.body);
    const fn =
      body !== undefined
        ? { ...body, name: kernel.name }
        : functions.find((candidate) => candidate.name === kernel.name && candidate.source === kernel.source);
    const file = display(kernel.source);
    if (!isPlainName(kernel.name)) {
      notes.push({
        kernel: kernel.name,
        file,
        line: fn?.line ?? 1,
        reason: `is named '${kernel.name}', which WGSL reserves or the translation uses (a WGSL entry point keeps the kernel's name)`,
      });
      continue;
    }
    if (fn === undefined || fn.body === null || fn.params === null) {
      notes.push({
        kernel: kernel.name,
        file,
        line: fn?.line ?? 1,
        reason: fn?.error ?? 'its syntax tree is not available',
      });
      continue;
    }
    try {
      const use: MemoryUse = { written: new Set(), atomic: new Set(), raw: new Set() };
      const helperCall = (name: string) => helper(name, [fn.internalName]);
      const role = kernel.wrapped?.perItem ? 'items' : 'kernel';
      // Checked builds' pointer lengths: every ptr<T> access tests its index against them (offload_in_bounds).
      const lengths = (kernel.wrapped?.lengths ?? []).map((name) => `${POINTER_BYTES_PREFIX}${name}`);
      // The first pass learns which bindings are written and which need atomics; the second emits with that.
      new FunctionTranslator(fn, role, byInternal, constants, helperCall, use, lengths).translate();
      const translator = new FunctionTranslator(fn, role, byInternal, constants, helperCall, use, lengths);
      chunks.push(translator.translate());
      needs.push(translator);
      translated.push(kernel.name);
    } catch (error) {
      // Source nested deeper than the translator's recursion reaches stays wasm-only too.
      if (error instanceof RangeError)
        notes.push({ kernel: kernel.name, file, line: fn.line, reason: 'is nested too deeply to translate' });
      else if (error instanceof Untranslatable)
        notes.push({ kernel: kernel.name, file, line: error.line, reason: error.message });
      else throw error;
    }
  }
  if (translated.length === 0) return { wgsl: '', kernels: [], notes };
  const used = [...helpers.values()].flatMap((helper) => ('code' in helper ? [helper.code] : []));
  needs.push(...[...helpers.values()].flatMap((helper) => ('needs' in helper ? [helper.needs] : [])));
  const header = [
    `// Translated by offload build from AssemblyScript (docs/wgsl-abi.md): ${translated.join(', ')}.`,
    `override ${TRANSLATED_THREADS}: u32 = 64;`,
    ...TRANSLATED_THREADS_XYZ.slice(1).map((name) => `override ${name}: u32 = 1;`),
    ...[...GRID_VARS, ...ITEM_VARS].map((name) => `var<private> ${name}: vec3u;`),
  ];
  if (needs.some((need) => need.teamMemory)) {
    // A hand-written file may declare the override already: one module holds both.
    if (!options.teamMemoryDeclared) header.push(`override ${TEAM_MEMORY_OVERRIDE}: u32 = 16;`);
    header.push(`var<workgroup> ${TEAM_MEMORY_WORDS}: array<u32, ${TEAM_MEMORY_OVERRIDE} / 4u>;`);
  }
  // The support functions the kernels call, and those these call (offload_is_nan, which comes first).
  const called = new Set<SupportName>();
  const add = (name: SupportName): void => {
    if (called.has(name)) return;
    called.add(name);
    for (const callee of SUPPORT_CALLS[name] ?? []) add(callee);
  };
  for (const need of needs) for (const name of need.support) add(name);
  const support = Object.entries(SUPPORT_FUNCTIONS).flatMap(([name, code]) =>
    called.has(name as SupportName) ? [code] : [],
  );
  if (called.has('offload_fault_at'))
    header.push(
      `@group(1) @binding(0) var<storage, read_write> ${FAULT_BINDING_NAME}: array<atomic<u32>, 8>;`,
      'var<private> offload_spent: u32;',
      'var<private> offload_budget: u32;',
    );
  return { wgsl: [...header, ...support, ...used, ...chunks].join('\n') + '\n', kernels: translated, notes };
}
