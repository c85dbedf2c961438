/**
 * One run of the AssemblyScript compiler, in a worker thread started without the parent's loader
 * hooks (compiler-worker.js says why), entirely in memory: the job carries the entry sources, the
 * result carries the module. This file declares the messages both sides exchange.
 */
import { finished } from 'node:stream/promises';
import { Worker } from 'node:worker_threads';
import { errors, OffloadError } from '../errors.js';

/** What the worker is asked to do (its workerData). */
export interface CompileJob {
  /** asc's command line. */
  argv: string[];
  /** asc's base directory (also in argv), to resolve source paths. */
  baseDir: string;
  /** Entry sources by absolute path; files they import are read from disk. */
  sources: Record<string, string>;
  /** Text of the device library, served for `offload-ts/device`. */
  deviceText: string;
  /** The names argv gives to the binary and text outputs. */
  wasmFile: string;
  watFile: string;
  /** A module importing this function is run through asyncify (see compiler-worker.js). */
  barrierImport: { module: string; name: string };
  /** Optimize again after asyncify (the build's -O3). */
  optimize: boolean;
  /** A bounds-checked build (`offload build --checked`): every ptr<T> access checks its index. */
  checked: boolean;
}

/** An exported function of an entry file, as the compiler resolved it. */
export interface KernelSignature {
  /** Export name. */
  name: string;
  /** Compiler path of the declaring source (relative to baseDir, or `~lib/...`). */
  source: string;
  generic: boolean;
  /** False when the compiler could not resolve the signature (it reports why). */
  resolved: boolean;
  /**
   * Parameter names, resolved type names (`i32`, `usize`, `~lib/string/String`, ...) and the
   * types as written in the source.
   */
  params: { name: string; type: string; declared: string }[];
  returnType: string;
  /** Parameters from this index on are optional. */
  requiredParameters: number;
  /**
   * A kernel the build generated around the source's function (docs/kernels.md), which it
   * renamed to `body` (its internal name): a per-item kernel (the source's first parameter was
   * `i: item`), and in a checked build one with ptr<T> parameters, whose byte lengths (of the
   * parameters named in `lengths`, `offload_bytes_<name>`) it takes before any item counts.
   */
  wrapped?: { body: string; perItem: boolean; lengths: string[] };
}

/** A syntax tree node as the worker sends it: its NodeKind name, line and fields (see compiler-worker.js). */
export interface SyntaxNode {
  k: string;
  line: number;
  [field: string]: unknown;
}

/** A user function: its resolved signature and body (null, with `error`, when it has none to translate). */
export interface FunctionSyntax {
  name: string;
  /** The compiler's name for it, `<source without .ts>/<name>`: what identifiers' `element` names. */
  internalName: string;
  /** Compiler path of the declaring source. */
  source: string;
  line: number;
  params: { name: string; type: string }[] | null;
  returnType: string | null;
  body: SyntaxNode | null;
  error: string | null;
}

/** A top-level `const`: its type as written (a NamedType node, or null) and initializer (null when it has none to translate). */
export interface ConstantSyntax {
  name: string;
  internalName: string;
  source: string;
  line: number;
  type: SyntaxNode | null;
  initializer: SyntaxNode | null;
}

/** A compiler error; `source` null when it has no location, `line` and `column` count from 1. */
export interface CompilerDiagnostic {
  code: number;
  message: string;
  source: string | null;
  line: number;
  column: number;
}

/** What the worker answers. */
export interface CompileOutput {
  /** asc's failure with its stderr, or null when it succeeded. */
  error: string | null;
  /** Error diagnostics, in the order reported. */
  diagnostics: CompilerDiagnostic[];
  kernels: KernelSignature[];
  /** Every function of the user sources, as the WGSL translator reads them. */
  functions: FunctionSyntax[];
  /** Every top-level constant of the user sources. */
  constants: ConstantSyntax[];
  /** The module, asyncified when it imports the barrier. */
  wasm: Uint8Array | null;
  /** Text format of the optimized module as asc made it (before asyncify); it keeps function and global names. */
  wat: string | null;
}

const WORKER = new URL('./compiler-worker.js', import.meta.url);

/** How long one run of the compiler may take by default, in milliseconds (BuildOptions.timeoutMs). */
export const DEFAULT_COMPILE_TIMEOUT_MS = 300_000;

/**
 * Runs `job` in a fresh worker and resolves with its answer, whatever asc made of the sources;
 * `files` names them in messages. The worker is stopped after `timeoutMs`.
 * @throws (rejects) OffloadError INVALID_ARGUMENT when the compiler crashes, cannot start, or its
 *   answer cannot be read; TIMEOUT past `timeoutMs`.
 */
export function runCompiler(
  job: CompileJob,
  files: string,
  timeoutMs = DEFAULT_COMPILE_TIMEOUT_MS,
): Promise<CompileOutput> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER, { workerData: job, execArgv: [], stdout: true, stderr: true });
    const stderr: string[] = [];
    worker.stderr.setEncoding('utf8').on('data', (chunk: string) => stderr.push(chunk));
    worker.stdout.resume();
    let answered = false;
    const fail = (error: Error) => {
      if (answered) return;
      answered = true;
      clearTimeout(timer);
      reject(error);
      void worker.terminate();
    };
    const timer = setTimeout(
      () =>
        fail(
          errors.timeout(
            `compiling ${files} took more than ${timeoutMs} ms (the build's time limit, timeoutMs): simplify the kernel source, or give a larger limit`,
          ),
        ),
      timeoutMs,
    );
    worker.once('message', (output: CompileOutput) => {
      if (answered) return;
      answered = true;
      clearTimeout(timer);
      resolve(output);
      // The answer is the worker's last act; do not let anything it left behind keep it alive.
      void worker.terminate();
    });
    // The answer arrived but could not be read back here (a structured clone past the stack).
    worker.once('messageerror', (cause) =>
      fail(
        new OffloadError(
          'INVALID_ARGUMENT',
          `the AssemblyScript compiler's answer for ${files} could not be read (${cause.message}): a function nests too deeply; flatten its nested blocks or split it into functions`,
          { cause },
        ),
      ),
    );
    worker.once('error', (cause) => {
      // The compiler is an optional dependency: a runtime-only install (npm install --omit=optional) has none.
      if ((cause as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND' && /'assemblyscript'/.test(cause.message)) {
        fail(
          errors.unsupported(
            'building kernels needs the AssemblyScript compiler, which is not installed: npm install assemblyscript@0.28.20 (an optional dependency of offload-ts; running prebuilt kernels does not need it)',
          ),
        );
      } else {
        const overflow = cause instanceof RangeError && /call stack/i.test(cause.message);
        fail(
          errors.invalidArgument(
            overflow
              ? `the AssemblyScript compiler ran out of stack compiling ${files}: a function nests too deeply; flatten its nested blocks or split it into functions`
              : `the AssemblyScript compiler failed on ${files}: ${cause.stack ?? cause.message}`,
          ),
        );
      }
    });
    worker.once('exit', (code) => {
      if (answered) return;
      // asc prints its crash report to stderr, then exits; let the report arrive first.
      const report = () => {
        const said = stderr.join('').trim();
        fail(
          errors.invalidArgument(
            `the AssemblyScript compiler stopped without an answer compiling ${files} (exit code ${code}): ${said === '' ? 'it said nothing; if a function nests deeply, flatten its nested blocks or split it into functions' : said}`,
          ),
        );
      };
      finished(worker.stderr).then(report, report);
    });
  });
}
