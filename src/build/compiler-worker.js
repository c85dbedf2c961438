/**
 * Runs one AssemblyScript compilation (asc.main, the compiler's programmatic API) inside a worker
 * thread, for compiler-job.ts. The message types are declared there (CompileJob, CompileOutput).
 *
 * Why a worker, and why plain JavaScript: the worker is started without the parent's loader
 * hooks, because a TypeScript loader (tsx) rewrites binaryen's 13 MB module on every load, which
 * takes seconds; and asc calls process.exit() when it crashes, which here ends only the worker.
 * Without hooks the worker cannot load TypeScript, so it stays small and reports raw facts; the
 * checks and messages live in TypeScript on the other side.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { asyncifyBarriers } from './asyncify.js';

// Specifiers in variables, so that tsc (allowJs) does not load the compiler's declarations: they
// declare AssemblyScript's globals (i32, console, ...) and break type checking of the project.
const ASC = 'assemblyscript/asc';
const BINARYEN = 'assemblyscript/binaryen';
const COMPILER = 'assemblyscript';
const TRANSFORM = 'assemblyscript/transform';
const [{ default: asc }, { CommonFlags, ElementKind, NodeKind, Parser, SourceKind, Token }, { Transform }] =
  await Promise.all([import(ASC), import(COMPILER), import(TRANSFORM)]);

/** asc resolves a package import `offload-ts/device` to `<dir>/node_modules/offload-ts/device.ts`. */
const DEVICE_REQUEST = /(^|\/)node_modules\/offload-ts\/device\.ts$/;
/** The compiler's name for the device library once resolved. */
const DEVICE_LIBRARY_NAME = '~lib/offload-ts/device.ts';
const DIAGNOSTIC_ERROR = 3;

const job = workerData;
/** Text of every user source served to the compiler, by absolute path. */
const texts = new Map(Object.entries(job.sources));
/**
 * Kernels the build generated around a body (per-item kernels, and in a checked build every kernel
 * with a ptr<T> parameter), by export name: `{ body, perItem, lengths }` (see KernelSignature.wrapped).
 */
const wrapped = new Map();

/** The type name a per-item kernel's first parameter is declared with (assembly/device.ts). */
const ITEM_TYPE = 'item';
/** The device library's typed pointer (assembly/device.ts). */
const POINTER_TYPE = 'ptr';
/** What the build names a kernel's body: `<kernel>__item` (per-item) or `<kernel>__checked`. */
const ITEM_BODY_SUFFIX = '__item';
const CHECKED_BODY_SUFFIX = '__checked';
/** The parameters the build appends to a per-item kernel (src/image/manifest.ts, ITEM_COUNT_PARAMS). */
const ITEM_COUNTS = ['offload_items_x', 'offload_items_y', 'offload_items_z'];
/** What a checked build appends per ptr<T> parameter: the bytes of its buffer from it (src/image/manifest.ts). */
const BYTES_PREFIX = 'offload_bytes_';
/** Typed pointers a checked kernel registers (assembly/device.ts keeps eight). */
const MAX_CHECKED_POINTERS = 8;

/**
 * Kernels the build writes around the source's (docs/kernels.md). The source's exported function
 * becomes the body, `@inline function <kernel>__item(...)` (or `__checked`), and the kernel is a
 * generated function of the same name:
 * - a per-item kernel (first parameter declared `name: item`) takes the other parameters and the
 *   item counts, and runs the body for its invocation's items: with one thread per team (the
 *   host device) a contiguous block of them per team, in a tight loop around the inlined body,
 *   so that it compiles to what a hand-written block loop does; else one item per invocation,
 *   striding by the grid;
 * - in a checked build (`offload build --checked`), a kernel with ptr<T> parameters also takes,
 *   before any item counts, the bytes each one's buffer has from it (`offload_bytes_<name>`,
 *   passed by the launch), and registers them for the checks of x[i] (assembly/device.ts).
 * The source is edited where the parser says the declaration is, on the same line (so that
 * messages keep their lines), and the generated kernels are appended after the last line.
 */
function withGeneratedKernels(text, file) {
  // `file` as asc names it: relative to the base directory, as internal names are.
  const parser = new Parser();
  parser.parseFile(text, file, true);
  const source = parser.sources[0];
  if (source === undefined) return text;
  const edits = [];
  const kernels = [];
  const named = (type, name) =>
    type?.kind === NodeKind.NamedType && type.name.identifier.text === name && type.name.next === null;
  for (const statement of source.statements) {
    if (statement.kind !== NodeKind.FunctionDeclaration || !statement.is(CommonFlags.Export)) continue;
    if (statement.body === null || statement.typeParameters?.length) continue; // the compiler reports these
    const params = statement.signature.parameters;
    const perItem = named(params[0]?.type, ITEM_TYPE);
    const own = (perItem ? params.slice(1) : params).map((param) => ({
      name: param.name.text,
      type: text.slice(param.type.range.start, param.type.range.end),
      pointer: named(param.type, POINTER_TYPE) && param.type.typeArguments?.length === 1,
    }));
    const pointers = job.checked ? own.filter((param) => param.pointer).slice(0, MAX_CHECKED_POINTERS) : [];
    if (!perItem && pointers.length === 0) continue;
    const start = statement.range.start;
    if (text.slice(start, start + 6) !== 'export') continue;
    const name = statement.name.text;
    const body = `${name}${perItem ? ITEM_BODY_SUFFIX : CHECKED_BODY_SUFFIX}`;
    edits.push({ start, end: start + 6, text: '@inline' });
    edits.push({ start: statement.name.range.start, end: statement.name.range.end, text: body });
    kernels.push({ name, body, perItem, params: own, pointers });
  }
  if (kernels.length === 0) return text;
  let out = text;
  for (const edit of edits.sort((a, b) => b.start - a.start))
    out = out.slice(0, edit.start) + edit.text + out.slice(edit.end);
  const internal = file.split(path.sep).join('/').replace(/\.ts$/, '');
  for (const kernel of kernels)
    wrapped.set(kernel.name, {
      body: `${internal}/${kernel.body}`,
      perItem: kernel.perItem,
      lengths: kernel.pointers.map((param) => param.name),
    });
  return `${out}\n${generatedSource(kernels)}`;
}

/** The generated kernels of withGeneratedKernels. */
function generatedSource(kernels) {
  const lines = [
    '// Generated by offload build (docs/kernels.md): the kernels around the bodies of this file.',
    'import { numTeams as offload_numTeams, numThreads as offload_numThreads, teamId as offload_teamId, threadId as offload_threadId, offload_item_counts, offload_item, offload_item_x, offload_bound } from "offload-ts/device";',
  ];
  for (const { name, body, perItem, params, pointers } of kernels) {
    const [nx, ny, nz] = ITEM_COUNTS;
    const declared = [
      ...params.map((p) => `${p.name}: ${p.type}`),
      ...pointers.map((p) => `${BYTES_PREFIX}${p.name}: i32`),
      ...(perItem ? ITEM_COUNTS.map((count) => `${count}: i32`) : []),
    ];
    const args = params.map((p) => p.name).join(', ');
    lines.push(`export function ${name}(${declared.join(', ')}): void {`);
    pointers.forEach((p, k) => {
      const where = JSON.stringify(`kernel '${name}': parameter '${p.name}' (${p.type})`);
      lines.push(`  offload_bound(${k}, changetype<usize>(${p.name}), ${BYTES_PREFIX}${p.name}, ${where});`);
    });
    if (!perItem) {
      lines.push(`  ${body}(${args});`, '}');
      continue;
    }
    const call = (x) => `${body}(${[x, ...(args === '' ? [] : [args])].join(', ')});`;
    lines.push(
      `  offload_item_counts(${nx}, ${ny}, ${nz});`,
      `  const offload_total = <u32>${nx} * <u32>${ny} * <u32>${nz};`,
      '  const offload_threads = <u32>offload_numThreads();',
      `  if (offload_threads == 1 && ${ny} == 1 && ${nz} == 1) {`,
      // The host device's 1-D case as a loop of its own, stepping by a constant 1 and setting
      // only the item's x: a per-item saxpy read 0.89-0.92 of the same loop written by hand
      // while it shared one loop with the strided case (a variable step, and y and z stored
      // for every item); alone, the optimiser drops itemX's store when the body never reads it.
      '    const offload_teams = <u32>offload_numTeams();',
      '    const offload_block = offload_total / offload_teams + <u32>(offload_total % offload_teams != 0);',
      '    const offload_first = <u32>offload_teamId() * offload_block;',
      '    const offload_last = min(offload_total, offload_first + offload_block);',
      '    offload_item(0, 0, 0);',
      '    for (let offload_i = offload_first; offload_i < offload_last; offload_i++) {',
      '      offload_item_x(<i32>offload_i);',
      `      ${call('<i32>offload_i')}`,
      '    }',
      '    return;',
      '  }',
      '  let offload_k = <u32>offload_teamId() * offload_threads + <u32>offload_threadId();',
      '  let offload_end = offload_total;',
      '  let offload_step = <u32>offload_numTeams() * offload_threads;',
      '  if (offload_threads == 1) {',
      '    const offload_teams = <u32>offload_numTeams();',
      '    const offload_block = offload_total / offload_teams + <u32>(offload_total % offload_teams != 0);',
      '    offload_k = <u32>offload_teamId() * offload_block;',
      '    offload_end = min(offload_total, offload_k + offload_block);',
      '    offload_step = 1;',
      '  }',
      '  for (; offload_k < offload_end; offload_k += offload_step) {',
      `    const offload_rest = offload_k / <u32>${nx};`,
      `    const offload_x = <i32>(offload_k % <u32>${nx});`,
      `    offload_item(offload_x, <i32>(offload_rest % <u32>${ny}), <i32>(offload_rest / <u32>${ny}));`,
      `    ${call('offload_x')}`,
      '  }',
      '}',
    );
  }
  return `${lines.join('\n')}\n`;
}

/** Collects the raw signature of every exported function of the user entry files, and every user function's syntax tree. */
class KernelSignatureCollector extends Transform {
  kernels = [];
  functions = [];
  constants = [];

  afterInitialize(program) {
    const visited = new Set();
    const collect = (file) => {
      if (visited.has(file)) return;
      visited.add(file);
      for (const [name, element] of file.exports ?? []) {
        if (element.kind === ElementKind.FunctionPrototype) this.kernels.push(signatureOf(program, name, element));
      }
      for (const reexported of file.exportsStar ?? []) collect(reexported);
    };
    for (const file of program.filesByName.values()) {
      if (file.source.sourceKind === SourceKind.UserEntry) collect(file);
      if (file.source.sourceKind === SourceKind.UserEntry || file.source.sourceKind === SourceKind.User) {
        for (const element of file.members?.values() ?? []) {
          if (element.kind === ElementKind.FunctionPrototype) this.functions.push(syntaxOf(program, element));
          if (element.kind === ElementKind.Global && element.is(CommonFlags.Const))
            this.constants.push(constantOf(program, element));
        }
      }
    }
  }
}

/** asc's LiteralKind (a const enum the compiler does not export). */
const LITERAL_KINDS = ['Float', 'Integer', 'String', 'Template', 'RegExp', 'Array', 'Object'];
/** asc's AssertionKind. */
const ASSERTION_KINDS = ['Prefix', 'As', 'NonNull', 'Const'];
/** Bounds what one function's tree may cost to send (a kernel is far smaller). */
const MAX_NODES = 100_000;
/**
 * Bounds how deep a tree nests (objects and arrays): the structured clone that sends the answer
 * to the parent reads it recursively, and a tree 1,000 `if`s deep overflowed its stack there
 * (the parent then saw only a 'messageerror' and an exit with code 0). A kernel nests far less.
 */
const MAX_DEPTH = 1000;

/**
 * A user function as plain data for the WGSL translator (src/build/wgsl-translate.ts): its
 * resolved signature and its body's syntax tree, each node `{ k: NodeKind name, line, ...fields }`;
 * identifiers carry the internal name of the element they name in the function's scope, type
 * nodes the type they resolve to.
 */
/** A converter of `element`'s syntax trees to plain data (see syntaxOf), bounded by MAX_NODES. */
function converterFor(program, element) {
  const text = textOf(element.declaration.range.source.normalizedPath) ?? '';
  const lineOf = (range) => text.slice(0, range.start).split('\n').length;
  let nodes = 0;
  const resolveType = (node) => {
    try {
      return program.resolver.resolveType(node, null, element, null, 1 /* ReportMode.Swallow */)?.toString() ?? null;
    } catch {
      return null; // a type the resolver cannot name: the caller reports it as unknown
    }
  };
  const convert = (value, depth = 0) => {
    if (value === null || value === undefined) return null;
    if (typeof value === 'bigint') return value.toString();
    if (typeof value !== 'object') return value;
    if (depth > MAX_DEPTH) throw new Error(`'${element.name}' nests too deeply to translate`);
    if (Array.isArray(value)) return value.map((item) => convert(item, depth + 1));
    if (typeof value.kind !== 'number' || value.range === undefined) return null;
    if (++nodes > MAX_NODES) throw new Error(`'${element.name}' is too large to translate`);
    const kind = NodeKind[value.kind];
    const out = { k: kind, line: lineOf(value.range) };
    for (const [key, field] of Object.entries(value)) {
      if (key === 'kind' || key === 'range' || key === 'currentlyResolving' || key === 'decorators') continue;
      out[key] = convert(field, depth + 1);
    }
    if (kind === 'Binary' || kind === 'UnaryPrefix' || kind === 'UnaryPostfix') out.operator = Token[value.operator];
    if (kind === 'Literal') out.literalKind = LITERAL_KINDS[value.literalKind];
    // An integer literal's value is an i64 (a `long` object in the compiler's JS build).
    if (out.literalKind === 'Integer') out.value = value.value.toString();
    if (kind === 'Assertion') out.assertionKind = ASSERTION_KINDS[value.assertionKind];
    if (kind === 'Identifier') out.element = element.lookup(value.text)?.internalName ?? null;
    if (kind === 'NamedType') out.resolved = resolveType(value);
    return out;
  };
  return { convert, lineOf };
}

/** A top-level constant as plain data: its declared type (resolved) and initializer tree. */
function constantOf(program, global) {
  const declaration = global.declaration;
  const base = {
    name: global.name,
    internalName: global.internalName,
    source: declaration.range.source.normalizedPath,
  };
  try {
    const { convert, lineOf } = converterFor(program, global);
    return {
      ...base,
      line: lineOf(declaration.range),
      type: convert(declaration.type),
      initializer: convert(declaration.initializer),
    };
  } catch {
    return { ...base, line: 0, type: null, initializer: null };
  }
}

function syntaxOf(program, prototype) {
  const declaration = prototype.declaration;
  const source = declaration.range.source;
  const { convert, lineOf } = converterFor(program, prototype);
  const signature = prototype.is(CommonFlags.Generic)
    ? null
    : program.resolver.resolveFunction(prototype, null)?.signature;
  const base = {
    name: prototype.name,
    internalName: prototype.internalName,
    source: source.normalizedPath,
    line: lineOf(declaration.range),
  };
  if (!signature)
    return { ...base, params: null, returnType: null, body: null, error: 'generic or unresolved signature' };
  try {
    return {
      ...base,
      params: signature.parameterTypes.map((type, i) => ({
        name: declaration.signature.parameters[i]?.name.text ?? `arg${i}`,
        type: type.toString(),
      })),
      returnType: signature.returnType.toString(),
      body: convert(declaration.body),
      error: null,
    };
  } catch (error) {
    return { ...base, params: null, returnType: null, body: null, error: error.message };
  }
}

function signatureOf(program, name, prototype) {
  const source = prototype.declaration.range.source.normalizedPath;
  const generic = prototype.is(CommonFlags.Generic);
  // Unresolvable types are reported by the compiler itself.
  const instance = generic ? null : program.resolver.resolveFunction(prototype, null);
  if (instance === null)
    return { name, source, generic, resolved: false, params: [], returnType: '', requiredParameters: 0 };
  const { parameterTypes, returnType, requiredParameters } = instance.signature;
  const nodes = prototype.functionTypeNode.parameters;
  const params = parameterTypes.map((type, i) => ({
    name: nodes[i]?.name.text ?? `arg${i}`,
    type: type.toString(),
    declared: nodes[i]?.type.range.toString() ?? type.toString(),
  }));
  const generated = wrapped.get(name);
  return {
    name,
    source,
    generic,
    resolved: true,
    params,
    returnType: returnType.toString(),
    requiredParameters,
    ...(generated === undefined ? {} : { wrapped: generated }),
  };
}

async function readSource(filename, baseDir) {
  // Only sources: a build takes no asconfig.json from wherever it runs.
  if (!filename.endsWith('.ts')) return null;
  if (DEVICE_REQUEST.test(filename.replace(/\\/g, '/'))) return job.deviceText;
  const file = path.resolve(baseDir, filename);
  const known = texts.get(file);
  if (known !== undefined) {
    if (!(file in job.sources)) return known;
    // An entry file: its per-item kernels get their loops (messages then read the edited text).
    const edited = withGeneratedKernels(known, filename);
    texts.set(file, edited);
    return edited;
  }
  try {
    const text = await readFile(file, 'utf8');
    texts.set(file, text);
    return text;
  } catch {
    return null; // unreadable: the compiler reports the file as not found
  }
}

function textOf(normalizedPath) {
  if (normalizedPath === DEVICE_LIBRARY_NAME) return job.deviceText;
  if (normalizedPath.startsWith(asc.libraryPrefix)) {
    return asc.libraryFiles[normalizedPath.slice(asc.libraryPrefix.length).replace(/\.ts$/, '')];
  }
  return texts.get(path.resolve(job.baseDir, normalizedPath));
}

const diagnostics = [];
function reportDiagnostic({ code, category, message, range }) {
  if (category !== DIAGNOSTIC_ERROR) return;
  if (range === null) {
    diagnostics.push({ code, message, source: null, line: 0, column: 0 });
    return;
  }
  const source = range.source.normalizedPath;
  const before = (textOf(source) ?? '').slice(0, range.start);
  const line = before.split('\n').length;
  const column = range.start - (before.lastIndexOf('\n') + 1) + 1;
  diagnostics.push({ code, message, source, line, column });
}

const outputs = new Map();
const collector = new KernelSignatureCollector();
const result = await asc.main(job.argv, {
  readFile: readSource,
  writeFile: (filename, contents) => void outputs.set(filename, contents),
  listFiles: () => [],
  reportDiagnostic,
  transforms: [collector],
});
/** The module, through asyncify when it imports the barrier (asyncify.js). */
async function withBarriers(wasm) {
  if (wasm === undefined || wasm === null) return wasm;
  const { default: binaryen } = await import(BINARYEN);
  return asyncifyBarriers(binaryen, wasm, job.barrierImport, job.optimize);
}

parentPort.postMessage({
  error: result.error === null ? null : `${result.error.message}\n${result.stderr.toString()}`,
  diagnostics,
  kernels: collector.kernels,
  functions: collector.functions,
  constants: collector.constants,
  wasm:
    result.error === null && diagnostics.length === 0
      ? await withBarriers(outputs.get(job.wasmFile))
      : (outputs.get(job.wasmFile) ?? null),
  wat: outputs.get(job.watFile) ?? null,
});
