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
const [{ default: asc }, { CommonFlags, ElementKind, NodeKind, SourceKind, Token }, { Transform }] = await Promise.all([
  import(ASC),
  import(COMPILER),
  import(TRANSFORM),
]);

/** asc resolves a package import `offload-ts/device` to `<dir>/node_modules/offload-ts/device.ts`. */
const DEVICE_REQUEST = /(^|\/)node_modules\/offload-ts\/device\.ts$/;
/** The compiler's name for the device library once resolved. */
const DEVICE_LIBRARY_NAME = '~lib/offload-ts/device.ts';
const DIAGNOSTIC_ERROR = 3;

const job = workerData;
/** Text of every user source served to the compiler, by absolute path. */
const texts = new Map(Object.entries(job.sources));

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
  return { name, source, generic, resolved: true, params, returnType: returnType.toString(), requiredParameters };
}

async function readSource(filename, baseDir) {
  // Only sources: a build takes no asconfig.json from wherever it runs.
  if (!filename.endsWith('.ts')) return null;
  if (DEVICE_REQUEST.test(filename.replace(/\\/g, '/'))) return job.deviceText;
  const file = path.resolve(baseDir, filename);
  const known = texts.get(file);
  if (known !== undefined) return known;
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
