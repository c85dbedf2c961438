/**
 * The system compilers that build C, C++ and Rust kernels: clang (with lld's wasm-ld) and a
 * rustc that has the wasm32-unknown-unknown standard library. None ships with offload-ts, and
 * the runtime needs none of them; the build finds them on PATH or where OFFLOAD_CLANG,
 * OFFLOAD_RUSTC and OFFLOAD_WASM_LD say, and names the Debian packages when they are missing.
 */
import { execFile } from 'node:child_process';
import { access, stat } from 'node:fs/promises';
import path from 'node:path';
import { errors } from '../errors.js';

/** The most a compiler run may take: a kernel file compiles in well under a second. */
const RUN_TIMEOUT_MS = 120_000;
const RUST_TARGET = 'wasm32-unknown-unknown';
const DEBIAN_C = 'apt-get install clang-16 lld-16';
const DEBIAN_RUST = 'apt-get install rustc libstd-rust-dev-wasm32 lld-16';

/** What one run of a tool printed, and how it ended. */
export interface ToolRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The tool could not be started (not found, not executable). */
  missing: boolean;
}

/** Runs `file` with `args` (no shell), whatever its exit status. */
export function runTool(file: string, args: readonly string[], cwd?: string): Promise<ToolRun> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { cwd, timeout: RUN_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024, encoding: 'utf8' },
      (error, stdout, stderr) => {
        const errno = (error as NodeJS.ErrnoException | null)?.code;
        resolve({
          code: error === null ? 0 : typeof error.code === 'number' ? error.code : null,
          stdout,
          stderr: error !== null && typeof errno === 'string' && stderr === '' ? error.message : stderr,
          missing: errno === 'ENOENT' || errno === 'EACCES',
        });
      },
    );
  });
}

/** Directories of PATH, in order. */
function pathDirs(env: NodeJS.ProcessEnv): string[] {
  return (env.PATH ?? '').split(path.delimiter).filter((dir) => dir !== '');
}

async function executable(file: string): Promise<boolean> {
  try {
    await access(file);
    return (await stat(file)).isFile();
  } catch {
    return false;
  }
}

/** The first of `names` found in PATH's directories (or as given, for a path), then of `fallbacks`. */
async function which(names: readonly string[], env: NodeJS.ProcessEnv, fallbacks: readonly string[] = []) {
  for (const name of names) {
    if (name.includes('/')) {
      if (await executable(name)) return name;
      continue;
    }
    for (const dir of pathDirs(env)) if (await executable(path.join(dir, name))) return path.join(dir, name);
  }
  for (const file of fallbacks) if (await executable(file)) return file;
  return undefined;
}

/**
 * The clang that compiles C and C++ kernels: OFFLOAD_CLANG, else clang-16 or clang on PATH.
 * @throws (rejects) OffloadError UNSUPPORTED naming the Debian packages when there is none.
 */
export async function findClang(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const given = env.OFFLOAD_CLANG;
  const found = await which(given !== undefined && given !== '' ? [given] : ['clang-16', 'clang'], env);
  if (found !== undefined) return found;
  throw errors.unsupported(
    `building C and C++ kernels needs clang with wasm-ld, and ${given ? `OFFLOAD_CLANG=${given} is not an executable` : 'neither clang-16 nor clang is on PATH'}: ` +
      `on Debian, ${DEBIAN_C} (or set OFFLOAD_CLANG to a clang that targets wasm32); running prebuilt kernels needs no compiler`,
  );
}

/** A rustc with the wasm32 standard library, and the wasm-ld it links with. */
export interface RustToolchain {
  rustc: string;
  linker: string;
}

/**
 * The rustc that compiles Rust kernels: OFFLOAD_RUSTC, else the first rustc on PATH (then
 * /usr/bin/rustc) whose sysroot holds the wasm32-unknown-unknown standard library (a rustup
 * toolchain without that target is passed over); and wasm-ld: OFFLOAD_WASM_LD, else wasm-ld-16
 * or wasm-ld on PATH, or LLVM 16's.
 * @throws (rejects) OffloadError UNSUPPORTED naming the Debian packages when either is missing.
 */
export async function findRust(env: NodeJS.ProcessEnv = process.env): Promise<RustToolchain> {
  const given = env.OFFLOAD_RUSTC;
  const candidates: string[] = [];
  if (given !== undefined && given !== '') candidates.push(given);
  else {
    for (const dir of pathDirs(env)) candidates.push(path.join(dir, 'rustc'));
    candidates.push('/usr/bin/rustc');
  }
  const seen = new Set<string>();
  const without: string[] = [];
  let rustc: string | undefined;
  for (const candidate of candidates) {
    if (seen.has(candidate) || !(await executable(candidate))) continue;
    seen.add(candidate);
    const sysroot = await runTool(candidate, ['--print', 'sysroot']);
    if (sysroot.code === 0 && (await exists(path.join(sysroot.stdout.trim(), 'lib', 'rustlib', RUST_TARGET, 'lib')))) {
      rustc = candidate;
      break;
    }
    without.push(candidate);
  }
  if (rustc === undefined) {
    const why =
      without.length > 0
        ? `${without.join(', ')} ha${without.length === 1 ? 's' : 've'} no standard library for ${RUST_TARGET}`
        : given
          ? `OFFLOAD_RUSTC=${given} is not an executable`
          : 'no rustc is on PATH';
    throw errors.unsupported(
      `building Rust kernels needs rustc with the ${RUST_TARGET} standard library, and ${why}: on Debian, ${DEBIAN_RUST} ` +
        `(or set OFFLOAD_RUSTC to such a rustc); running prebuilt kernels needs no compiler`,
    );
  }
  const linkerGiven = env.OFFLOAD_WASM_LD;
  const linker = await which(
    linkerGiven !== undefined && linkerGiven !== '' ? [linkerGiven] : ['wasm-ld-16', 'wasm-ld'],
    env,
    linkerGiven ? [] : ['/usr/lib/llvm-16/bin/wasm-ld'],
  );
  if (linker === undefined) {
    throw errors.unsupported(
      `building Rust kernels needs wasm-ld (lld's wasm linker), and ${linkerGiven ? `OFFLOAD_WASM_LD=${linkerGiven} is not an executable` : 'neither wasm-ld-16 nor wasm-ld is on PATH'}: ` +
        `on Debian, apt-get install lld-16 (or set OFFLOAD_WASM_LD)`,
    );
  }
  return { rustc, linker };
}

async function exists(file: string): Promise<boolean> {
  try {
    await access(file);
    return true;
  } catch {
    return false;
  }
}
