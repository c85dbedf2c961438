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
  stderr?: { write(text: string): unknown };
  emitWarning?: (text: string) => void;
}

/** Node's `process`, or undefined in a page (looked up, never imported). */
function nodeProcess(): NodeProcess | undefined {
  return (globalThis as { process?: NodeProcess }).process;
}

/** The process's environment (OFFLOAD_* settings); empty in a page, where options say it all. */
export function environment(): Environment {
  return nodeProcess()?.env ?? {};
}

/** Writes `text` (a line with its newline) to standard error, or to the console in a page. */
export function writeStderr(text: string): void {
  const stderr = nodeProcess()?.stderr;
  if (stderr) stderr.write(text);
  else console.error(text.endsWith('\n') ? text.slice(0, -1) : text);
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
