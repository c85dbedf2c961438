/**
 * Reading and writing files, in Node: bundles, PEM files, trace files. A page's build has
 * platform-files.browser.ts in its place (package.json's "browser" field), which fetches URLs.
 */
import { writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

/** The bytes of the file at `path`, a path or a `file:` URL (Node's errors as they are: `code` ENOENT for none). */
export function readBytes(path: string | URL): Promise<Uint8Array> {
  return readFile(path);
}

export function readText(path: string): Promise<string> {
  return readFile(path, 'utf8');
}

/** Writes `text` to `path` at once (a trace at exit, when nothing asynchronous runs any more). */
export function writeTextNow(path: string, text: string): void {
  writeFileSync(path, text);
}
