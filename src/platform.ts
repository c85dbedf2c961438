/**
 * What a shared module needs that differs between Node and a page, without importing either:
 * the environment variables (a page has none), standard error (the console in a page), and
 * letting a timer go (Node's `unref`; a page's timers hold nothing). Files are
 * platform-files.ts's, which package.json's "browser" field replaces in a page's build.
 */
import type { Environment } from './units.js';

/**
 * The clock, read once: Node 20's global `performance` is a lazy getter (every read a call, two of
 * an inline launch's 0.45 us), and a page has no node:perf_hooks; the object itself is the same.
 */
export const performance: Performance = globalThis.performance;

interface NodeProcess {
  env: Environment;
  stdout?: { write(text: string): unknown };
  stderr?: { write(text: string): unknown };
  emitWarning?: (text: string) => void;
  /**
   * Node >= 20.16: a built-in module without an import, which a page's build would have to
   * resolve; named without the `node:` scheme so that no page bundle holds a Node specifier.
   */
  getBuiltinModule?: (id: 'fs') => FileSystem;
}

/** What endsMidLine needs of node:fs. */
interface FileSystem {
  fstatSync(fd: number): { size: number; isFile(): boolean };
  openSync(path: string, flags: string): number;
  readSync(fd: number, buffer: Uint8Array, offset: number, length: number, position: number): number;
  closeSync(fd: number): void;
}

/** Node's `process`, or undefined in a page (looked up, never imported). */
function nodeProcess(): NodeProcess | undefined {
  return (globalThis as { process?: NodeProcess }).process;
}

/** The process's environment (OFFLOAD_* settings); empty in a page, where options say it all. */
export function environment(): Environment {
  return nodeProcess()?.env ?? {};
}

/**
 * Whether the regular file behind `fd` (1 stdout, 2 stderr) ends inside a line, as another writer
 * left it: Dawn's device log (dawn.node prints "warning:\n" and the message, with no newline,
 * through C's stdout, which a file buffers 4 KiB at a time). Read back through /dev/fd, as `fd`
 * itself is write-only. False for a terminal or a pipe, which cannot be read back, wherever
 * /dev/fd cannot reopen it (macOS duplicates the write-only descriptor), and in a page.
 */
export function endsMidLine(fd: number): boolean {
  const fs = nodeProcess()?.getBuiltinModule?.('fs');
  if (!fs) return false;
  try {
    const stats = fs.fstatSync(fd);
    if (!stats.isFile() || stats.size === 0) return false;
    const reader = fs.openSync(`/dev/fd/${fd}`, 'r');
    try {
      const last = new Uint8Array(1);
      return fs.readSync(reader, last, 0, 1, stats.size - 1) === 1 && last[0] !== 0x0a;
    } finally {
      fs.closeSync(reader);
    }
  } catch {
    return false; // closed, or not reopenable: nothing known, nothing added
  }
}

/**
 * Writes `text` (lines with their newline) to standard error, or to the console in a page, in one
 * write, on a line of its own: where another writer (Dawn) left the file half a line, a newline
 * first (see endsMidLine).
 */
export function writeStderr(text: string): void {
  const stderr = nodeProcess()?.stderr;
  if (stderr) stderr.write(endsMidLine(2) ? `\n${text}` : text);
  else console.error(text.endsWith('\n') ? text.slice(0, -1) : text);
}

/** writeStderr's twin for standard output (the console's log in a page). */
export function writeStdout(text: string): void {
  const stdout = nodeProcess()?.stdout;
  if (stdout) stdout.write(endsMidLine(1) ? `\n${text}` : text);
  else console.log(text.endsWith('\n') ? text.slice(0, -1) : text);
}

/** A process warning (Node's `process.emitWarning`; the console's warning in a page). */
export function warn(text: string): void {
  const node = nodeProcess();
  if (node?.emitWarning) node.emitWarning(text);
  else console.warn(text);
}

/** Lets `timer` go: it does not keep a Node process alive by itself (nothing to do in a page). */
export function letGo<T>(timer: T): T {
  (timer as { unref?: () => void }).unref?.();
  return timer;
}

/** Calls `callback` after the current turn's I/O (Node's setImmediate; a zero timeout in a page). */
export function afterThisTurn(callback: () => void): void {
  const immediate = (globalThis as { setImmediate?: (callback: () => void) => unknown }).setImmediate;
  letGo(immediate ? immediate(callback) : setTimeout(callback, 0));
}
