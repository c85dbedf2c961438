/**
 * AssemblyScript kernels into the bundle's wasm image: compiled with asc (in a worker,
 * compiler-job.ts) with static data at the image's base, the kernel signatures checked, and the
 * module checked for what a device refuses (kernel-module-checks.ts).
 */
import type { EntryInfo, ImageInfo } from '../image/manifest.js';
import { BARRIER_IMPORT, DEVICE_IMPORT_MODULE, MAX_PAGES, WASM_TRIPLE } from '../image/wasm-abi.js';
import { errors } from '../errors.js';
import { runCompiler, type ConstantSyntax, type FunctionSyntax, type KernelSignature } from './compiler-job.js';
import { kernelEntries } from './kernel-signatures.js';
import {
  allocationError,
  checkAllocations,
  checkExports,
  checkImports,
  checkModuleVariables,
  entryFiles,
  memoryImportOf,
  STUB_RUNTIME_PREFIX,
} from './kernel-module-checks.js';
import { displaySource, LIBRARY_PREFIX, readSources, type SourceSet } from './kernel-sources.js';
import { checkFitsWindow, fnv1a32, pickStaticBase, staticSizeOf } from './static-placement.js';
import { exportedAddresses, readWasmModuleInfo } from './wasm-module-info.js';

/** The build options an AssemblyScript image depends on (BuildOptions has them). */
export interface AssemblyScriptOptions {
  staticBase?: number;
  optimize?: boolean;
  debug?: boolean;
  checked?: boolean;
  timeoutMs?: number;
}

const WASM_FILE = 'image.wasm';
const WAT_FILE = 'image.wat';

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

/** Compiles the AssemblyScript sources into the bundle's wasm image. */
export async function buildWasmImage(files: string[], name: string, options: AssemblyScriptOptions) {
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

/** Compiles the sources with static data at `staticBase`, and checks the kernel signatures. */
async function compileImage(
  sources: SourceSet,
  staticBase: number,
  options: AssemblyScriptOptions,
): Promise<CompiledImage> {
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
  options: AssemblyScriptOptions,
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
