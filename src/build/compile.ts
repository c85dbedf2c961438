/**
 * The build tool: compiles AssemblyScript kernel sources into a `wasm` image and reads a WGSL
 * source into a `wgsl` image, each checked against its kernel ABI (DESIGN section 4,
 * docs/wgsl-abi.md), and writes them as one bundle.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { OffloadError, errors } from '../errors.js';
import { BUNDLE_EXTENSION, decodeBundle, encodeBundle } from '../image/bundle.js';
import { formatTranslationNote, type EntryInfo, type ImageInfo, type Manifest } from '../image/manifest.js';
import {
  ASYNCIFY_EXPORTS,
  BARRIER_IMPORT,
  DEVICE_IMPORTS,
  DEVICE_IMPORT_MODULE,
  ENV_IMPORTS,
  MAX_PAGES,
  STATIC_ALIGN,
  STATIC_WINDOW_END,
  STATIC_WINDOW_START,
  WASM_TRIPLE,
} from '../image/wasm-abi.js';
import { checkSourceNesting } from './source-nesting.js';
import { runCompiler, type ConstantSyntax, type FunctionSyntax, type KernelSignature } from './compiler-job.js';
import { kernelEntries } from './kernel-signatures.js';
import { buildNativeImage } from './native-build.js';
import { nativeLanguageOf } from './native-signatures.js';
import { checkFitsWindow, fnv1a32, pickStaticBase, staticSizeOf } from './static-placement.js';
import { exportedAddresses, readWasmModuleInfo, type MemoryLimits, type WasmModuleInfo } from './wasm-module-info.js';
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
 * The device library kernels import as `offload-ts/device`. src/build and dist/build sit at the
 * same depth below the package root, so this holds for sources run directly and compiled output.
 */
const DEVICE_LIBRARY = fileURLToPath(new URL('../../assembly/device.ts', import.meta.url));
/** The compiler's name for the device library once resolved (see compiler-worker.js). */
const DEVICE_LIBRARY_NAME = '~lib/offload-ts/device.ts';
const LIBRARY_PREFIX = '~lib/';
/** What the stub runtime's allocator is named in the compiled module. */
const STUB_RUNTIME_PREFIX = '~lib/rt/stub/';
const ALLOWED_IMPORTS = new Set([
  ...ENV_IMPORTS.map((name) => `env.${name}`),
  ...DEVICE_IMPORTS.map((name) => `${DEVICE_IMPORT_MODULE}.${name}`),
]);
const WASM_FILE = 'image.wasm';
const WAT_FILE = 'image.wat';

/** The kernel sources of one build, as the compiler sees them. */
interface SourceSet {
  /** asc's base directory: the deepest directory holding every entry file. */
  baseDir: string;
  /** Entry files relative to baseDir, with forward slashes, as asc takes them. */
  entries: string[];
  /** Entry file texts by absolute path. */
  texts: Record<string, string>;
  deviceText: string;
}

interface CompiledImage {
  wasm: Uint8Array;
  /** Text format of the optimized module; it keeps function and global names. */
  wat: string;
  entries: EntryInfo[];
  /** The kernels' signatures and the user functions' syntax, for the WGSL translation. */
  kernels: KernelSignature[];
  functions: FunctionSyntax[];
  constants: ConstantSyntax[];
  display: (source: string) => string;
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

/** Compiles the AssemblyScript sources into the bundle's wasm image. */
async function buildWasmImage(files: string[], name: string, options: BuildOptions) {
  const sources = await readSources(files);
  const hash = fnv1a32([name, ...Object.values(sources.texts)]);
  const compile = async (staticBase: number) => {
    const image = await compileImage(sources, staticBase, options);
    const info = readWasmModuleInfo(image.wasm);
    return { image, info, staticSize: staticSizeOf(info.dataSegments, staticBase) };
  };

  // The default base depends on the static size, known only after compiling; the first guess
  // (data within one STATIC_ALIGN slot) almost always holds, otherwise compile once more.
  let staticBase = options.staticBase ?? pickStaticBase(hash, 1);
  let compiled = await compile(staticBase);
  if (options.staticBase === undefined && pickStaticBase(hash, compiled.staticSize) !== staticBase) {
    staticBase = pickStaticBase(hash, compiled.staticSize);
    compiled = await compile(staticBase);
  }
  const { image, info, staticSize } = compiled;
  checkFitsWindow(staticBase, staticSize);
  checkAllocations(image.wat, sources, info.hasStart);
  if (info.hasStart) await refuseTopLevelCode(sources, staticBase, options, image.wat);
  checkModuleVariables(image.wat, sources);
  checkImports(info);
  checkExports(info, image.entries);
  // Exported module-level data (`export const table: StaticArray<f32> = [...]`): device globals.
  const globals = [...exportedAddresses(info)].filter(
    ([, address]) => address >= staticBase && address < staticBase + staticSize,
  );
  const entries: EntryInfo[] = [
    ...image.entries,
    ...globals.map(([name]): EntryInfo => ({ name, kind: 'global', params: [] })),
  ];
  const imageInfo: ImageInfo = {
    format: 'wasm',
    triple: WASM_TRIPLE,
    offset: 0,
    size: image.wasm.length,
    staticBase,
    staticSize,
    minPages: memoryImportOf(info)?.minimum ?? 0,
  };
  return { image: { info: imageInfo, bytes: image.wasm }, entries, texts: sources.texts, compiled: image };
}

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

async function readSources(files: string[]): Promise<SourceSet> {
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

async function readSourceFile(file: string): Promise<string> {
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

/** Compiles the sources with static data at `staticBase`, and checks the kernel signatures. */
async function compileImage(sources: SourceSet, staticBase: number, options: BuildOptions): Promise<CompiledImage> {
  const argv = [
    ...sources.entries,
    '--baseDir',
    sources.baseDir,
    '--outFile',
    WASM_FILE,
    '--textFile',
    WAT_FILE,
    '--runtime',
    'stub',
    // Threads (shared memory, atomics) and 128-bit SIMD (v128, f64x2 and the rest): every engine a
    // host device runs on has both (Node 16.4+, every current browser); a kernel using SIMD stays
    // wasm-only (wgsl-translate.ts notes why).
    '--enable',
    'threads,simd',
    '--importMemory',
    '--sharedMemory',
    '--maximumMemory',
    String(MAX_PAGES),
    '--noExportMemory',
    '--memoryBase',
    String(staticBase),
    '--noColors',
    ...(options.optimize === false ? [] : ['-O3']),
    ...(options.debug === true ? ['--debug'] : []),
    // assembly/device.ts checks ptr<T> accesses where this constant is defined.
    ...(options.checked === true ? ['--use', 'OFFLOAD_CHECKED=1'] : []),
  ];
  const output = await runCompiler(
    {
      argv,
      baseDir: sources.baseDir,
      sources: sources.texts,
      deviceText: sources.deviceText,
      wasmFile: WASM_FILE,
      watFile: WAT_FILE,
      barrierImport: { module: DEVICE_IMPORT_MODULE, name: BARRIER_IMPORT },
      optimize: options.optimize !== false,
      checked: options.checked === true,
    },
    sources.entries.join(', '),
    options.timeoutMs,
  );
  const display = (source: string) => displaySource(sources.baseDir, source);
  if (output.diagnostics.length > 0) {
    const lines = output.diagnostics.map(({ code, message, source, line, column }) => {
      const where = source === null ? '' : `${display(source)}:${line}:${column}: `;
      // asc numbers its own messages below 1000 (AS100) and TypeScript's from 1000 (TS1005).
      return `${where}error ${code < 1000 ? 'AS' : 'TS'}${code}: ${message}`;
    });
    throw errors.invalidArgument(`AssemblyScript compilation failed:\n${lines.join('\n')}`);
  }
  if (output.error !== null) throw errors.invalidArgument(`AssemblyScript compilation failed: ${output.error}`);
  const entries = kernelEntries(output.kernels, display);
  if (output.wasm === null || output.wat === null)
    throw errors.invalidArgument('AssemblyScript compilation produced no module');
  return {
    wasm: output.wasm,
    wat: output.wat,
    entries,
    kernels: output.kernels,
    functions: output.functions,
    constants: output.constants,
    display,
  };
}

/** The path to show for a compiler source path (relative to baseDir, or a library path). */
function displaySource(baseDir: string, source: string): string {
  if (source === DEVICE_LIBRARY_NAME) return displayPath(DEVICE_LIBRARY);
  if (source.startsWith(LIBRARY_PREFIX)) return source;
  return displayPath(path.resolve(baseDir, source));
}

/** `file` relative to the working directory when inside it, else absolute. */
function displayPath(file: string): string {
  const relative = path.relative(process.cwd(), file);
  return relative.startsWith('..') || path.isAbsolute(relative) ? file : relative;
}

/**
 * A device has no heap: the stub runtime would bump-allocate from the end of static data, over
 * device buffers, and no two workers would agree on its state. Any trace of the stub allocator
 * in the optimized module means some kernel code allocates.
 */
function checkAllocations(wat: string, sources: SourceSet, hasStart: boolean): void {
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

function allocationError(where: string) {
  return errors.invalidArgument(
    `kernel code allocates managed memory in ${where}: a device has no heap, so kernels must not use ` +
      `new, arrays, typed arrays, strings or closures; use device pointers (usize) with load<T>/store<T> instead`,
  );
}

function entryFiles(sources: SourceSet): string {
  return sources.entries.map((e) => displaySource(sources.baseDir, e)).join(', ');
}

/**
 * A start function runs on every worker each time the image loads, outside any launch (no
 * timeout can stop it), and devices refuse images that have one. AssemblyScript emits one for
 * top-level code: a global initialised by a call, a top-level statement or loop. The optimized
 * module inlines each file's part into `~start`; an unoptimized build keeps them as
 * `start:<file>` functions, which name the files.
 * @throws (rejects) OffloadError INVALID_ARGUMENT, always.
 */
async function refuseTopLevelCode(
  sources: SourceSet,
  staticBase: number,
  options: BuildOptions,
  wat: string,
): Promise<never> {
  const plain =
    options.optimize === false ? wat : (await compileImage(sources, staticBase, { ...options, optimize: false })).wat;
  // A file's `start:` function that only calls others' (its imports') has no code of its own.
  const files = [...plain.matchAll(/^ \(func \$start:(\S+)\n((?: {2}.*\n)*) \)$/gm)]
    .filter(([, file, body]) => !file!.startsWith(LIBRARY_PREFIX) && !/^(?: {2}call \$start:\S+\n)*$/.test(body!))
    .map(([, file]) => displaySource(sources.baseDir, `${file}.ts`));
  // No file has top-level code: the start function only sets up the allocator, for kernel code that allocates.
  if (files.length === 0 && wat.includes(`$${STUB_RUNTIME_PREFIX}`)) throw allocationError(entryFiles(sources));
  const where = files.length > 0 ? files.join(', ') : entryFiles(sources);
  throw errors.invalidArgument(
    `${where}: top-level code (a global initialised by a call, a top-level statement or loop) would run ` +
      `each time the image loads, on every worker, outside any launch; devices refuse images with a start ` +
      `function: move that code into a kernel, or make the value a constant (a literal)`,
  );
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
function checkModuleVariables(wat: string, sources: SourceSet): void {
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

function checkImports(info: WasmModuleInfo): void {
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
function memoryImportOf(info: WasmModuleInfo): MemoryLimits | undefined {
  return info.imports.find((i) => i.module === 'env' && i.name === 'memory' && i.kind === 'memory')?.memory;
}

/**
 * The module's function exports must be exactly the kernels the manifest lists (and, in a module
 * with barriers, the functions asyncify adds for the host device).
 */
function checkExports(info: WasmModuleInfo, entries: EntryInfo[]): void {
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
