/**
 * The build tool: compiles AssemblyScript kernel sources into a `wasm` image and reads a WGSL
 * source into a `wgsl` image, each checked against its kernel ABI (DESIGN section 4,
 * docs/wgsl-abi.md), and writes them as one bundle. The wasm image is assemblyscript-build.ts's
 * (AssemblyScript) or native-build.ts's (C, C++, Rust); the WGSL one joins the .wgsl source's
 * kernels (wgsl-kernels.ts) and the translated ones (wgsl-translate.ts).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { OffloadError, errors } from '../errors.js';
import { BUNDLE_EXTENSION, decodeBundle, encodeBundle } from '../image/bundle.js';
import { formatTranslationNote, type EntryInfo, type ImageInfo, type Manifest } from '../image/manifest.js';
import { STATIC_ALIGN, STATIC_WINDOW_END, STATIC_WINDOW_START } from '../image/wasm-abi.js';
import { buildWasmImage } from './assemblyscript-build.js';
import { displayPath, readSourceFile } from './kernel-sources.js';
import { buildNativeImage } from './native-build.js';
import { nativeLanguageOf } from './native-signatures.js';
import { wrapperSource, wrapperTypes } from './wrappers.js';
import { joinEntries, TEAM_MEMORY_OVERRIDE, WGSL_TRIPLE, wgslKernels } from './wgsl-kernels.js';
import { translateKernels, type TranslationNote } from './wgsl-translate.js';

export interface BuildOptions {
  /**
   * AssemblyScript entry files (`.ts`; every exported function of them becomes a kernel) and at
   * most one WGSL file (`.wgsl`; every `@compute` entry point becomes a kernel).
   */
  sources: string[];
  /**
   * Output path without extension; the bundle is written to `<output>.offload`, its typed host
   * wrappers to `<output>.js` and `<output>.d.ts`.
   */
  output: string;
  /** Bundle name, for diagnostics. Defaults to the basename of `output`. */
  name?: string;
  /**
   * Address of the image's static data, a multiple of STATIC_ALIGN inside the static window.
   * Defaults to a slot chosen by a hash of the name and the sources.
   */
  staticBase?: number;
  /** Optimize with -O3 (default true). */
  optimize?: boolean;
  /** Keep debug information (function names) in the image (default false). */
  debug?: boolean;
  /**
   * The WGSL translation of the AssemblyScript kernels (README "One kernel source for every
   * device"): `'auto'` (default) translates every kernel the subset covers and notes the others
   * (BuildResult.notes); `'require'` fails the build when a kernel does not translate; `'off'`
   * translates nothing. A kernel the `.wgsl` source defines is never translated: the hand-written
   * one wins (checked against the same signature).
   */
  wgsl?: 'auto' | 'require' | 'off';
  /**
   * How long one run of the AssemblyScript compiler may take, in milliseconds (default
   * DEFAULT_COMPILE_TIMEOUT_MS, 5 minutes): past it the build fails with TIMEOUT.
   */
  timeoutMs?: number;
  /**
   * Bounds-checked kernels (default false): every `ptr<T>` access checks its index against the
   * buffer passed for that parameter, and one outside fails the launch with KERNEL_TRAP naming
   * the kernel, the parameter, the index and the buffer's length (docs/kernels.md). On the host
   * device; the WGSL translation takes the lengths but does not check (WebGPU clamps instead).
   */
  checked?: boolean;
}

export interface BuildResult {
  /** The bundle file written. */
  path: string;
  manifest: Manifest;
  /** The bundle's bytes, as written. */
  bundle: Uint8Array;
  /** The typed host wrappers written next to the bundle (see wrappers.ts). */
  wrappers: { js: string; dts: string };
  /** The kernels that stay wasm-only (no WGSL translation), each with where and why. */
  notes: TranslationNote[];
}

/**
 * Compiles `options.sources` (AssemblyScript into a wasm image; one WGSL file, checked by the
 * WGSL kernel ABI, into a wgsl image) and writes the bundle to `<options.output>.offload` and its typed
 * wrappers to `<options.output>.js` and `.d.ts`, creating their directory.
 * @returns the paths written, the manifest and the bundle bytes.
 * @throws (rejects) OffloadError NOT_FOUND when a source is missing; INVALID_ARGUMENT for bad
 *   options, compiler errors (as `file:line:col: error CODE: message` lines), kernels with
 *   unsupported signatures or named like a member of the wrappers (library, unload, then),
 *   kernels that allocate or import what a device does not provide, top-level code (a start
 *   function), and static data that does not fit the static window.
 */
export async function buildBundle(options: BuildOptions): Promise<BuildResult> {
  checkOptions(options);
  const name = options.name ?? path.basename(options.output);
  const tsSources = options.sources.filter((source) => source.endsWith('.ts'));
  const wgslSource = options.sources.find((source) => source.endsWith('.wgsl'));
  const nativeSources = options.sources.filter((source) => nativeLanguageOf(source) !== undefined);
  const images: { info: ImageInfo; bytes: Uint8Array }[] = [];
  let entries: EntryInfo[] = [];
  const texts: Record<string, string> = {};
  let wasm: Awaited<ReturnType<typeof buildWasmImage>> | undefined;
  let nativeNotes: TranslationNote[] = [];
  if (nativeSources.length > 0) {
    // C, C++ and Rust kernels: one wasm image, no WGSL translation (each kernel gets a note).
    const files = [...new Set(nativeSources.map((source) => path.resolve(source)))];
    for (const file of files) texts[file] = await readSourceFile(file);
    const native = await buildNativeImage(files, texts, name, options, displayPath);
    images.push(native.image);
    nativeNotes = native.notes;
    const noteOf = new Map(native.notes.map((note) => [note.kernel, formatNote(note)]));
    entries = native.entries.map((entry) => ({ ...entry, wasmOnly: noteOf.get(entry.name)! }));
  } else if (tsSources.length > 0) {
    wasm = await buildWasmImage(tsSources, name, options);
    images.push(wasm.image);
    entries = wasm.entries;
    Object.assign(texts, wasm.texts);
  }
  // The WGSL image: the hand-written kernels first (they win), then the translated ones.
  let wgslText = '';
  let shown = `${path.basename(tsSources[0] ?? name).replace(/\.ts$/, '')}.translated.wgsl`;
  let handWritten = new Set<string>();
  if (wgslSource !== undefined) {
    const file = path.resolve(wgslSource);
    wgslText = await readSourceFile(file);
    shown = path.basename(file);
    texts[file] = wgslText;
    handWritten = new Set(wgslKernels(wgslText, shown).map((kernel) => kernel.name));
  }
  let notes: TranslationNote[] = nativeNotes;
  if (options.wgsl === 'require' && notes.length > 0) {
    throw errors.invalidArgument(
      `--wgsl=require: ${notes.length} kernel(s) cannot be translated to WGSL:\n${notes.map(formatNote).join('\n')}`,
    );
  }
  if (wasm !== undefined && options.wgsl !== 'off') {
    const built = new Set(entries.map((entry) => entry.name));
    const kernels = wasm.compiled.kernels.filter((kernel) => built.has(kernel.name));
    const teamMemoryDeclared = new RegExp(`\\boverride\\s+${TEAM_MEMORY_OVERRIDE}\\b`).test(wgslText);
    const translation = translateKernels(
      { functions: wasm.compiled.functions, constants: wasm.compiled.constants },
      kernels,
      wasm.compiled.display,
      handWritten,
      {
        teamMemoryDeclared,
      },
    );
    notes = translation.notes;
    if (options.wgsl === 'require' && notes.length > 0) {
      throw errors.invalidArgument(
        `--wgsl=require: ${notes.length} kernel(s) cannot be translated to WGSL:\n${notes.map(formatNote).join('\n')}`,
      );
    }
    if (translation.wgsl !== '') wgslText = wgslText === '' ? translation.wgsl : `${wgslText}\n${translation.wgsl}`;
  }
  if (wgslText !== '') {
    const joined = joinEntries(entries, wgslKernels(wgslText, shown), shown);
    entries = joined.entries;
    const bytes = new TextEncoder().encode(wgslText);
    images.push({
      info: {
        format: 'wgsl',
        triple: WGSL_TRIPLE,
        offset: 0,
        size: bytes.length,
        staticBase: 0,
        staticSize: 0,
        minPages: 0,
        source: shown,
        kernels: joined.kernels,
      },
      bytes,
    });
  }
  const bundle = encodeBundle(
    { name, images: images.map((image) => image.info), entries, ...(notes.length > 0 ? { notes } : {}) },
    images.map((image) => image.bytes),
  );
  // The manifest as written: encodeBundle places each image (its offset in the payload).
  const { manifest } = decodeBundle(bundle);
  const file = options.output + BUNDLE_EXTENSION;
  const wrappers = { js: `${options.output}.js`, dts: `${options.output}.d.ts` };
  // The header names the sources relative to the wrapper, so the text does not depend on the working directory.
  const shownSources = Object.keys(texts).map((source) =>
    path.relative(path.dirname(file), source).split(path.sep).join('/'),
  );
  // Generated before anything is written: a kernel name the wrappers cannot take fails the whole build.
  const outputs: [string, string | Uint8Array][] = [
    [file, bundle],
    [wrappers.js, wrapperSource(manifest, path.basename(file), shownSources)],
    [wrappers.dts, wrapperTypes(manifest)],
  ];
  let target = path.dirname(file);
  try {
    await mkdir(target, { recursive: true });
    for (const [output, contents] of outputs) {
      target = output;
      await writeFile(output, contents);
    }
  } catch (cause) {
    throw new OffloadError('INVALID_ARGUMENT', `cannot write ${target}: ${(cause as Error).message}`, { cause });
  }
  return { path: file, manifest, bundle, wrappers, notes };
}

/** A note as the build prints it: `file:line: kernel 'name' is not translated to WGSL (...): it <reason>`. */
export const formatNote: (note: TranslationNote) => string = formatTranslationNote;

function checkOptions(options: BuildOptions): void {
  if (typeof options !== 'object' || options === null) throw errors.invalidArgument('options must be an object');
  const { sources, output, name, staticBase, optimize, debug, wgsl } = options;
  if (!Array.isArray(sources) || sources.length === 0) {
    throw errors.invalidArgument(
      'options.sources must be a non-empty array of .ts, .c, .cpp, .rs and .wgsl file paths',
    );
  }
  sources.forEach((source, i) => {
    if (
      typeof source !== 'string' ||
      !(source.endsWith('.ts') || source.endsWith('.wgsl') || nativeLanguageOf(source) !== undefined)
    ) {
      throw errors.invalidArgument(
        `options.sources[${i}] must be the path of a .ts (AssemblyScript), .c, .cpp (C, C++), .rs (Rust) or .wgsl file`,
      );
    }
  });
  const native = sources.filter((source) => nativeLanguageOf(source) !== undefined);
  const assemblyScript = sources.filter((source) => source.endsWith('.ts'));
  if (native.length > 0 && assemblyScript.length > 0) {
    throw errors.invalidArgument(
      `options.sources mixes AssemblyScript (${assemblyScript.join(', ')}) with C, C++ or Rust (${native.join(', ')}); ` +
        `a bundle holds one wasm image, from one of them: build them into two bundles`,
    );
  }
  const wgslFiles = sources.filter((source) => source.endsWith('.wgsl'));
  if (wgslFiles.length > 1)
    throw errors.invalidArgument(
      `options.sources names ${wgslFiles.length} .wgsl files (${wgslFiles.join(', ')}); a bundle holds one WGSL image`,
    );
  if (typeof output !== 'string' || output === '')
    throw errors.invalidArgument('options.output must be a non-empty path');
  if (name !== undefined && typeof name !== 'string') throw errors.invalidArgument('options.name must be a string');
  if (
    staticBase !== undefined &&
    (!Number.isSafeInteger(staticBase) ||
      staticBase % STATIC_ALIGN !== 0 ||
      staticBase < STATIC_WINDOW_START ||
      staticBase >= STATIC_WINDOW_END)
  ) {
    throw errors.invalidArgument(
      `options.staticBase must be a multiple of ${STATIC_ALIGN} in [${STATIC_WINDOW_START}, ${STATIC_WINDOW_END})`,
    );
  }
  if (optimize !== undefined && typeof optimize !== 'boolean')
    throw errors.invalidArgument('options.optimize must be a boolean');
  if (debug !== undefined && typeof debug !== 'boolean')
    throw errors.invalidArgument('options.debug must be a boolean');
  if (options.checked !== undefined && typeof options.checked !== 'boolean')
    throw errors.invalidArgument('options.checked must be a boolean');
  if (wgsl !== undefined && wgsl !== 'auto' && wgsl !== 'require' && wgsl !== 'off') {
    throw errors.invalidArgument(`options.wgsl must be 'auto', 'require' or 'off', got ${JSON.stringify(wgsl)}`);
  }
  const { timeoutMs } = options;
  if (timeoutMs !== undefined && (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1))
    throw errors.invalidArgument(
      `options.timeoutMs must be a positive integer of milliseconds, got ${String(timeoutMs)}`,
    );
}
