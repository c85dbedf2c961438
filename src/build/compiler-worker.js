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

// Specifiers in variables, so that tsc (allowJs) does not load the compiler's declarations: they
// declare AssemblyScript's globals (i32, console, ...) and break type checking of the project.
const ASC = 'assemblyscript/asc';
const BINARYEN = 'assemblyscript/binaryen';
const COMPILER = 'assemblyscript';
const TRANSFORM = 'assemblyscript/transform';
const [{ default: asc }, { CommonFlags, ElementKind, SourceKind }, { Transform }] = await Promise.all([
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

/** Collects the raw signature of every exported function of the user entry files. */
class KernelSignatureCollector extends Transform {
  kernels = [];

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
    }
  }
}

function signatureOf(program, name, prototype) {
  const source = prototype.declaration.range.source.normalizedPath;
  const generic = prototype.is(CommonFlags.Generic);
  // Unresolvable types are reported by the compiler itself.
  const instance = generic ? null : program.resolver.resolveFunction(prototype, null);
  if (instance === null) return { name, source, generic, resolved: false, params: [], returnType: '', requiredParameters: 0 };
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
    return null;
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
/**
 * Runs binaryen's asyncify over a module that imports `offload.barrier`, instrumenting only the
 * functions that can reach it, so the host device can switch between a team's threads there
 * (src/plugins/host/team-threads.ts); then optimizes again, as asyncify's authors advise. The
 * text output stays asc's: the build's checks read the code as written, before instrumentation.
 */
async function withBarriers(wasm) {
  if (wasm === undefined || wasm === null) return wasm;
  const { default: binaryen } = await import(BINARYEN);
  const module = binaryen.readBinary(wasm);
  try {
    module.setFeatures(binaryen.Features.All);
    let importsBarrier = false;
    for (let i = 0; i < module.getNumFunctions(); i++) {
      const info = binaryen.getFunctionInfo(module.getFunctionByIndex(i));
      if (info.module === job.barrierImport.module && info.base === job.barrierImport.name) importsBarrier = true;
    }
    if (!importsBarrier) return wasm;
    binaryen.setPassArgument('asyncify-imports', `${job.barrierImport.module}.${job.barrierImport.name}`);
    module.runPasses(['asyncify']);
    if (job.optimize) {
      binaryen.setOptimizeLevel(3);
      binaryen.setShrinkLevel(0);
      module.optimize();
    }
    if (!module.validate()) throw new Error('asyncify produced an invalid module');
    return module.emitBinary();
  } finally {
    module.dispose();
  }
}

parentPort.postMessage({
  error: result.error === null ? null : `${result.error.message}\n${result.stderr.toString()}`,
  diagnostics,
  kernels: collector.kernels,
  wasm: result.error === null && diagnostics.length === 0 ? await withBarriers(outputs.get(job.wasmFile)) : (outputs.get(job.wasmFile) ?? null),
  wat: outputs.get(job.watFile) ?? null,
});
