/**
 * Files in a page (package.json's "browser" field puts this in place of platform-files.ts): a
 * "path" is a URL, fetched, relative to the page. A URL is fetched once per page: registering
 * the same bundle again (another runtime, a context) reuses its bytes; a fetch that failed is
 * forgotten, so the next try fetches again. A page writes no files.
 */
import { errors } from './errors.js';

const fetched = new Map<string, Promise<Uint8Array>>();

/** Fetches `url`; fails as Node's file reads fail (`code` ENOENT for a 404), saying the URL and status. */
export function readBytes(location: string | URL): Promise<Uint8Array> {
  const url = String(location);
  let bytes = fetched.get(url);
  if (!bytes) {
    bytes = fetch(url).then(async (response) => {
      if (!response.ok)
        throw Object.assign(new Error(`fetching ${url} answered HTTP ${response.status} ${response.statusText}`), {
          code: response.status === 404 ? 'ENOENT' : `HTTP_${response.status}`,
        });
      return new Uint8Array(await response.arrayBuffer());
    });
    fetched.set(url, bytes);
    bytes.catch(() => fetched.delete(url));
  }
  return bytes;
}

export async function readText(url: string): Promise<string> {
  return new TextDecoder().decode(await readBytes(url));
}

export function writeTextNow(path: string): void {
  throw errors.unsupported(
    `a page cannot write the file ${path}: writing a trace file needs Node (leave the trace option unset in a page)`,
  );
}
