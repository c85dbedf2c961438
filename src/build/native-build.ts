/**
 * Kernels in C, C++ and Rust: compiles the sources with the system's clang or rustc into one
 * wasm32 module linked by wasm-ld, holds it to the kernel ABI of AssemblyScript kernels (no start
 * function, no heap, no writable module state, static data inside the static window, the
 * device's shared memory imported) and describes its kernels with parameter types read from the
 * source (native-signatures.ts). The kernels are not translated to WGSL: each gets a note that it
 * runs on wasm devices only, kept in the manifest so that a WebGPU device can quote it.
 *
 * The module's static data lands at the image's static base (`--global-base`); the link map
 * (`--Map`) says which symbol each byte and function belongs to, so that every refusal names the
 * file and the function or variable.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { errors } from '../errors.js';
import type { EntryInfo, ImageInfo } from '../image/manifest.js';
import {
  DEVICE_IMPORTS,
  DEVICE_IMPORT_MODULE,
  STATIC_WINDOW_END,
  STATIC_WINDOW_START,
  WASM_TRIPLE,
} from '../image/wasm-abi.js';
import { runAsyncify } from './asyncify-job.js';
import { nativeKernels, nativeLanguageOf, type NativeKernel, type NativeLanguage } from './native-signatures.js';
import { findClang, findRust, runTool } from './native-toolchain.js';
import { fnv1a32, pickStaticBase, staticSizeOf } from './static-placement.js';
import { functionUses } from './wasm-code-shape.js';
import { functionNames, toKernelModule } from './wasm-module-edit.js';
import { readWasmModuleInfo, type WasmModuleInfo } from './wasm-module-info.js';
import type { TranslationNote } from './wgsl-translate.js';

/** The device library's header and Rust crate (src/build and dist/build sit at the same depth). */
const DEVICE_HEADER_DIR = fileURLToPath(new URL('../../assembly/', import.meta.url));
const DEVICE_CRATE = path.join(DEVICE_HEADER_DIR, 'offload.rs');

/**
 * The stack of the libraries' panic paths (see checkModule), below the static window: addresses
 * a device never hands out.
 */
const TRAP_STACK_BYTES = 16 * 1024;

/** What a kernel may call in place of allocating: said with every heap function refused. */
const HEAP_FUNCTIONS = new Set([
  'malloc',
  'calloc',
  'realloc',
  'free',
  'aligned_alloc',
  'posix_memalign',
  'memalign',
  'valloc',
  'strdup',
  '_Znwm',
  '_Znwj',
  '_Znam',
  '_Znaj',
  '_ZdlPv',
  '_ZdaPv',
  '_ZdlPvm',
  '_ZdlPvj',
  '__rust_alloc',
  '__rust_alloc_zeroed',
  '__rust_realloc',
  '__rust_dealloc',
]);
const SHOWN_HEAP_NAME = new Map([
  ['_Znwm', 'operator new'],
  ['_Znwj', 'operator new'],
  ['_Znam', 'operator new[]'],
  ['_Znaj', 'operator new[]'],
  ['_ZdlPv', 'operator delete'],
  ['_ZdaPv', 'operator delete[]'],
  ['_ZdlPvm', 'operator delete'],
  ['_ZdlPvj', 'operator delete'],
]);

export interface NativeBuildOptions {
  staticBase?: number;
  optimize?: boolean;
  debug?: boolean;
}

export interface NativeImage {
  image: { info: ImageInfo; bytes: Uint8Array };
  entries: EntryInfo[];
  notes: TranslationNote[];
}

/** One source as the build sees it. */
interface NativeSource {
  file: string;
  shown: string;
  language: NativeLanguage;
  text: string;
  kernels: NativeKernel[];
}

/** A symbol of the link map: where it lies and which source it came from. */
interface MapSymbol {
  name: string;
  section: string;
  address: number;
  size: number;
  /** The source it came from (shown), or undefined for the libraries' (Rust's core, the device crate). */
  source: string | undefined;
}

/**
 * Builds the wasm image of `files` (all C and C++, or one Rust file) with texts already read.
 * @param shownOf the path to show for a file in messages.
 * @throws (rejects) OffloadError UNSUPPORTED when the compiler is missing; INVALID_ARGUMENT for
 *   compiler errors and every breach of the kernel ABI, naming the file and the function or variable.
 */
export async function buildNativeImage(
  files: string[],
  texts: Record<string, string>,
  name: string,
  options: NativeBuildOptions,
  shownOf: (file: string) => string,
): Promise<NativeImage> {
  const sources = files.map((file): NativeSource => {
    const language = nativeLanguageOf(file)!;
    const shown = shownOf(file);
    const text = texts[file]!;
    return { file, shown, language, text, kernels: nativeKernels(text, shown, language) };
  });
  checkSourceSet(sources);
  const rust = sources[0]!.language === 'Rust';
  const hash = fnv1a32([name, ...sources.map((source) => source.text)]);
  const work = await mkdtemp(path.join(tmpdir(), 'offload-build-'));
  try {
    const link = (staticBase: number) =>
      rust ? linkRust(sources[0]!, staticBase, options, work) : linkC(sources, staticBase, options, work);
    let staticBase = options.staticBase ?? pickStaticBase(hash, 1);
    let linked = await link(staticBase);
    let info = readWasmModuleInfo(linked.wasm);
    let staticSize = staticSizeOf(info.dataSegments, staticBase);
    checkStaticData(linked.symbols, staticBase, staticSize);
    if (options.staticBase === undefined && pickStaticBase(hash, staticSize) !== staticBase) {
      staticBase = pickStaticBase(hash, staticSize);
      linked = await link(staticBase);
      info = readWasmModuleInfo(linked.wasm);
      staticSize = staticSizeOf(info.dataSegments, staticBase);
    }
    const kernels = sources.flatMap((source) => source.kernels);
    checkModule(linked, info, sources, rust);
    let wasm = toKernelModule(linked.wasm, new Set(kernels.map((kernel) => kernel.entry.name)));
    if (info.imports.some((imp) => imp.module === DEVICE_IMPORT_MODULE && imp.name === 'barrier')) {
      wasm = await runAsyncify(wasm, options.optimize !== false);
    }
    info = readWasmModuleInfo(wasm);
    const missing = kernels.find(
      (kernel) => !info.exports.some((exp) => exp.kind === 'function' && exp.name === kernel.entry.name),
    );
    if (missing !== undefined) {
      throw errors.invalidArgument(
        `${missing.file}:${missing.line}: kernel '${missing.entry.name}' is missing from the linked module's exports`,
      );
    }
    const notes = kernels.map((kernel): TranslationNote => ({
      kernel: kernel.entry.name,
      file: kernel.file,
      line: kernel.line,
      reason: `is written in ${sources.find((source) => source.shown === kernel.file)!.language}; offload build translates AssemblyScript kernels only`,
    }));
    return {
      image: {
        info: {
          format: 'wasm',
          triple: WASM_TRIPLE,
          offset: 0,
          size: wasm.length,
          staticBase,
          staticSize,
          minPages: info.imports.find((imp) => imp.kind === 'memory')?.memory?.minimum ?? 0,
        },
        bytes: wasm,
      },
      entries: kernels.map((kernel) => kernel.entry),
      notes,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

function checkSourceSet(sources: NativeSource[]): void {
  const rust = sources.filter((source) => source.language === 'Rust');
  if (rust.length > 0 && sources.length > 1) {
    throw errors.invalidArgument(
      `a Rust kernel file is one crate and builds alone (got ${sources.map((source) => source.shown).join(', ')}): ` +
        `put the Rust kernels in one file (its modules may be other files), and C or C++ kernels in another bundle`,
    );
  }
  const seen = new Map<string, NativeKernel>();
  for (const kernel of sources.flatMap((source) => source.kernels)) {
    const first = seen.get(kernel.entry.name);
    if (first !== undefined) {
      throw errors.invalidArgument(
        `${kernel.file}:${kernel.line}: kernel '${kernel.entry.name}' is also declared at ${first.file}:${first.line}; kernel names must be unique in a bundle`,
      );
    }
    seen.set(kernel.entry.name, kernel);
  }
  for (const source of sources) {
    if (source.kernels.length > 0) continue;
    const how =
      source.language === 'Rust'
        ? '#[no_mangle] pub extern "C" fn name(...)'
        : 'OFFLOAD_KERNEL void name(...) (#include "offload.h")';
    throw errors.invalidArgument(`${source.shown} declares no kernel: mark each kernel as ${how}`);
  }
}

interface Linked {
  wasm: Uint8Array;
  symbols: MapSymbol[];
  /** The source (shown) each function came from, by name. */
  functionSources: Map<string, string>;
}

async function linkC(
  sources: NativeSource[],
  staticBase: number,
  options: NativeBuildOptions,
  work: string,
): Promise<Linked> {
  const clang = await findClang();
  const common = [
    '--target=wasm32-unknown-unknown',
    options.optimize === false ? '-O0' : '-O3',
    '-msimd128',
    '-mbulk-memory',
    '-ffreestanding',
    '-nostdlib',
    options.debug === true ? '-g' : '-g0',
  ];
  const objects: string[] = [];
  const objectSource = new Map<string, string>();
  for (const [i, source] of sources.entries()) {
    const object = path.join(work, `${i}.o`);
    const language = source.language === 'C++' ? ['-fno-exceptions', '-fno-rtti'] : [];
    const run = await runTool(clang, [
      ...common,
      ...language,
      '-I',
      DEVICE_HEADER_DIR,
      '-c',
      source.file,
      '-o',
      object,
    ]);
    if (run.missing) throw await findClangMissing(clang);
    if (run.code !== 0) throw errors.invalidArgument(`${source.language} compilation failed:\n${run.stderr.trim()}`);
    objects.push(object);
    objectSource.set(object, source.shown);
  }
  const wasmFile = path.join(work, 'image.wasm');
  const mapFile = path.join(work, 'image.map');
  const kernels = sources.flatMap((source) => source.kernels.map((kernel) => kernel.entry.name));
  // The link gets no -O: with one, clang runs binaryen's wasm-opt on the module when one is on
  // PATH (npm scripts put node_modules/.bin there), which drops the name section the checks
  // below read. The objects are optimised already; there is no link-time optimisation.
  const linkFlags = common.filter((flag) => !flag.startsWith('-O'));
  const run = await runTool(clang, [
    ...linkFlags,
    '-Wl,--no-entry',
    '-Wl,--import-memory',
    '-Wl,--stack-first',
    `-Wl,-zstack-size=${TRAP_STACK_BYTES}`,
    `-Wl,--global-base=${staticBase}`,
    '-Wl,--allow-undefined',
    `-Wl,--Map=${mapFile}`,
    ...kernels.map((kernel) => `-Wl,--export=${kernel}`),
    ...objects,
    '-o',
    wasmFile,
  ]);
  if (run.code !== 0) {
    const hint = /wasm-ld/.test(run.stderr) && /not found|doesn't exist|No such file/i.test(run.stderr);
    throw hint
      ? errors.unsupported(
          `linking C and C++ kernels needs lld's wasm-ld next to ${clang}, which is missing: on Debian, apt-get install lld-16\n${run.stderr.trim()}`,
        )
      : errors.invalidArgument(`linking the kernels failed:\n${run.stderr.trim()}`);
  }
  const map = parseLinkMap(await readFile(mapFile, 'utf8'), (object) => objectSource.get(object));
  return { wasm: new Uint8Array(await readFile(wasmFile)), ...map };
}

async function findClangMissing(clang: string) {
  return errors.unsupported(`cannot run ${clang}: on Debian, apt-get install clang-16 lld-16 (or set OFFLOAD_CLANG)`);
}

async function linkRust(
  source: NativeSource,
  staticBase: number,
  options: NativeBuildOptions,
  work: string,
): Promise<Linked> {
  const { rustc, linker } = await findRust();
  const common = [
    '--edition',
    '2021',
    '--target',
    'wasm32-unknown-unknown',
    '-C',
    `opt-level=${options.optimize === false ? 0 : 3}`,
    '-C',
    'panic=abort',
    '-C',
    'target-feature=+simd128,+bulk-memory',
    '-C',
    `debuginfo=${options.debug === true ? 2 : 0}`,
  ];
  const library = path.join(work, 'liboffload.rlib');
  const device = await runTool(rustc, [
    ...common,
    '--crate-type',
    'rlib',
    '--crate-name',
    'offload',
    DEVICE_CRATE,
    '-o',
    library,
  ]);
  if (device.code !== 0)
    throw errors.invalidArgument(`compiling the Rust device library failed:\n${device.stderr.trim()}`);
  const wasmFile = path.join(work, 'image.wasm');
  const mapFile = path.join(work, 'image.map');
  const run = await runTool(rustc, [
    ...common,
    '--crate-type',
    'cdylib',
    '--crate-name',
    'kernels',
    '--extern',
    `offload=${library}`,
    '-C',
    `linker=${linker}`,
    '-C',
    'link-arg=--import-memory',
    '-C',
    `link-arg=-zstack-size=${TRAP_STACK_BYTES}`,
    '-C',
    `link-arg=--global-base=${staticBase}`,
    '-C',
    `link-arg=--Map=${mapFile}`,
    source.file,
    '-o',
    wasmFile,
  ]);
  if (run.code !== 0) throw errors.invalidArgument(`Rust compilation failed:\n${run.stderr.trim()}`);
  // The crate's own objects are `kernels.<hash>-cgu.<n>.rcgu.o`; the libraries' sit inside .rlib archives.
  const map = parseLinkMap(await readFile(mapFile, 'utf8'), (object) =>
    /\.rlib\(/.test(object) || object.endsWith('.rlib') ? undefined : source.shown,
  );
  return { wasm: new Uint8Array(await readFile(wasmFile)), ...map };
}

/**
 * Reads wasm-ld's link map: each output section, the input sections (`object:(name)`) in it and
 * their symbols, with address and size.
 */
function parseLinkMap(
  text: string,
  sourceOf: (object: string) => string | undefined,
): { symbols: MapSymbol[]; functionSources: Map<string, string> } {
  const symbols: MapSymbol[] = [];
  const functionSources = new Map<string, string>();
  let section = '';
  let object = '';
  for (const line of text.split('\n').slice(1)) {
    const match = /^\s*(\S+)\s+(\S+)\s+(\S+) (.*)$/.exec(line);
    if (match === null) continue;
    const [, address, , size, rest] = match;
    const indent = rest!.length - rest!.trimStart().length;
    const what = rest!.trim();
    if (indent === 0) section = what;
    else if (indent < 16) object = what.replace(/:\([^)]*\)$/, '');
    else {
      const source = sourceOf(object);
      if (section === 'CODE') {
        if (source !== undefined) functionSources.set(what, source);
      } else if (address !== '-') {
        symbols.push({ name: what, section, address: parseInt(address!, 16), size: parseInt(size!, 16), source });
      }
    }
  }
  return { symbols, functionSources };
}

/** A symbol as messages name it: `file (variable 'name')`. */
function shownSymbol(symbol: MapSymbol, rust: boolean): string {
  return `${symbol.source ?? '(a library)'} (${rust ? 'static' : 'global'} '${symbol.name}')`;
}

/**
 * Static data must fit the static window from the image's base; when it does not, the largest
 * symbols are named.
 */
function checkStaticData(symbols: MapSymbol[], staticBase: number, staticSize: number): void {
  if (staticBase + staticSize <= STATIC_WINDOW_END) return;
  const largest = symbols
    .filter((symbol) => symbol.size > 0)
    .sort((a, b) => b.size - a.size)
    .slice(0, 3)
    .map((symbol) => `${symbol.source ?? '(a library)'} (variable '${symbol.name}', ${symbol.size} bytes)`);
  throw errors.invalidArgument(
    `the kernels' static data (${staticSize} bytes at address ${staticBase}) does not fit in the static window ` +
      `[${STATIC_WINDOW_START}, ${STATIC_WINDOW_END}); the largest: ${largest.join(', ')}: keep a large table in device ` +
      `memory instead (allocate a buffer, write the table into it from the program, and pass it to the kernel as a pointer)`,
  );
}

/** The rules AssemblyScript kernels keep too, checked on the linked module. */
function checkModule(linked: Linked, info: WasmModuleInfo, sources: NativeSource[], rust: boolean): void {
  const { wasm, symbols } = linked;
  const names = functionNames(wasm);
  const uses = functionUses(wasm);
  const functionImports = info.imports.filter((imp) => imp.kind === 'function');
  const linkedSources = sources.map((source) => source.shown).join(', ');
  const sourceOfFunction = (name: string) => linked.functionSources.get(name) ?? linkedSources;
  /** The functions (as `file (function 'name')`) that call import `index` directly. */
  const callersOf = (index: number): string[] =>
    uses
      .map((use, i) => (use.calls.has(index) ? (names.get(i + functionImports.length) ?? `#${i}`) : undefined))
      .filter((name): name is string => name !== undefined)
      .map((name) => `${sourceOfFunction(name)} (function '${name}')`);
  const allowed = new Set(DEVICE_IMPORTS.map((name) => `${DEVICE_IMPORT_MODULE}.${name}`));
  functionImports.forEach((imp, index) => {
    if (allowed.has(`${imp.module}.${imp.name}`)) return;
    const where = callersOf(index).join(', ') || linkedSources;
    if (HEAP_FUNCTIONS.has(imp.name)) {
      const called = SHOWN_HEAP_NAME.get(imp.name) ?? imp.name;
      throw errors.invalidArgument(
        `${where} calls ${called}: a device has no heap, so kernels must not allocate; allocate the memory in the ` +
          `program (device.alloc) and pass it to the kernel as a pointer parameter (${rust ? 'x: *mut f32' : 'offload_ptr(float) x'}), ` +
          `or use team_memory() for a team's scratch`,
      );
    }
    throw errors.invalidArgument(
      `${where} calls '${imp.name}'${imp.module === 'env' ? '' : ` (module '${imp.module}')`}, which a device does not provide ` +
        `(kernels have no ${rust ? 'standard' : 'C'} library; they may call the device library's functions: ${DEVICE_IMPORTS.filter((n) => n !== 'host_call').join(', ')}): ` +
        `remove the call, or write the function in the kernel's source`,
    );
  });
  // Writable module state: every worker's instance writes its data segments when the image loads
  // (again on a replaced worker), so a counter would be reset behind the program's back.
  const writable = symbols.filter((symbol) => symbol.section === '.data' || symbol.section === '.bss');
  if (writable.length > 0) {
    throw errors.invalidArgument(
      `${writable.map((symbol) => shownSymbol(symbol, rust)).join(', ')} ${writable.length === 1 ? 'is' : 'are'} writable module state: ` +
        `each worker of the host device writes the image's data when the image loads (again when a worker is replaced), so ` +
        `a value a kernel stores there does not last; make ${writable.length === 1 ? 'it' : 'them'} ${rust ? 'immutable (a static without mut, or a const)' : 'const'}, ` +
        `or keep the state in device memory (a buffer passed to the kernel as a pointer)`,
    );
  }
  // The stack pointer is the module's one mutable global. A kernel source's function that uses it
  // keeps locals in linear memory, where every worker's stack would be the same bytes: refused.
  // The libraries' functions (Rust's core) use it only on their way to a trap (building a panic's
  // PanicInfo, which the device library's panic handler drops): they get TRAP_STACK_BYTES below
  // the static window, bytes nothing else uses, where racing writes harm nothing.
  const imported = info.imports.filter((imp) => imp.kind === 'global').length;
  const mutable = new Set(
    info.globals.map((global, i) => (global.mutable ? i + imported : -1)).filter((index) => index >= 0),
  );
  const stackUsers = uses
    .map((use, i) => ([...use.globals].some((g) => mutable.has(g)) ? names.get(i + functionImports.length) : undefined))
    .filter((name): name is string => name !== undefined && (!rust || linked.functionSources.has(name)));
  if (stackUsers.length > 0) {
    throw errors.invalidArgument(
      `${stackUsers.map((name) => `${sourceOfFunction(name)} (function '${name}')`).join(', ')} keep${stackUsers.length === 1 ? 's' : ''} ` +
        `locals in memory (${rust ? 'an array, a value whose reference is taken, or a panic with a message' : 'an array, or a local whose address is taken'}), ` +
        `which needs a stack, and a device gives kernels none: keep the values in scalar locals, or the array in device ` +
        `memory (a buffer passed as a pointer, or team_memory() for a team's scratch)` +
        (rust ? `; to stop a kernel, call panic!() without a message, or core::arch::wasm32::unreachable()` : ''),
    );
  }
  if (info.hasStart) {
    throw errors.invalidArgument(
      `${linkedSources}: the linked module has a start function (C++ static constructors, or code that runs when the image ` +
        `loads, on every worker); initialise globals with constants instead`,
    );
  }
}
