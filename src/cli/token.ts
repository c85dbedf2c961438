/** Where the `offload` commands get the proxies' token: a file, else OFFLOAD_TOKEN. */
import { readFile, stat } from 'node:fs/promises';
import { errors } from '../errors.js';

/** The largest --tenants file read: a few thousand tenants' lines; a larger one is refused unread. */
export const MAX_TENANTS_FILE_BYTES = 1024 * 1024;
/** The shortest tenant token: 16 bytes, 128 bits (as for --token-file). */
const MIN_TENANT_TOKEN_BYTES = 16;
/** A tenant's name: what metrics and logs may show of it. */
const TENANT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/**
 * The named tokens of a --tenants file: a private file (as --token-file) of lines `name:token`;
 * blank lines and lines starting with # are skipped. A bad line (no colon, a bad or repeated name,
 * a short or repeated token) is refused with INVALID_ARGUMENT naming the line, never the token.
 */
export async function readTenants(file: string): Promise<{ name: string; token: string }[]> {
  let text: string;
  try {
    const { mode, size } = await stat(file);
    if (process.platform !== 'win32' && (mode & 0o077) !== 0) {
      throw errors.invalidArgument(
        `the tenants file ${file} can be read by others (mode ${(mode & 0o777).toString(8)}); make it private: chmod 600 ${file}`,
      );
    }
    if (size > MAX_TENANTS_FILE_BYTES) {
      throw errors.invalidArgument(
        `the tenants file ${file} is ${size} bytes; at most ${MAX_TENANTS_FILE_BYTES} are read (one name:token line per tenant)`,
      );
    }
    text = await readFile(file, 'utf8');
  } catch (error) {
    if (error instanceof Error && 'code' in error && (error as { code: unknown }).code === 'INVALID_ARGUMENT')
      throw error;
    throw errors.invalidArgument(`cannot read the tenants file ${file}: ${(error as Error).message}`);
  }
  // Read again in case it grew between stat and read.
  if (Buffer.byteLength(text) > MAX_TENANTS_FILE_BYTES)
    throw errors.invalidArgument(`the tenants file ${file} is over ${MAX_TENANTS_FILE_BYTES} bytes`);
  const tenants: { name: string; token: string }[] = [];
  const names = new Map<string, number>();
  const tokens = new Map<string, number>();
  const lines = text.split('\n');
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index]!.trim();
    if (line === '' || line.startsWith('#')) continue;
    const at = `the tenants file ${file}, line ${index + 1}`;
    const colon = line.indexOf(':');
    if (colon < 0) throw errors.invalidArgument(`${at}: expected name:token (no colon found)`);
    const name = line.slice(0, colon).trim();
    const token = line.slice(colon + 1).trim();
    if (!TENANT_NAME.test(name)) {
      throw errors.invalidArgument(
        `${at}: a tenant's name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit` +
          (name.length <= 64 && /^[\x20-\x7e]*$/.test(name) ? ` (got '${name}')` : ''),
      );
    }
    const bytes = Buffer.byteLength(token);
    if (bytes < MIN_TENANT_TOKEN_BYTES) {
      throw errors.invalidArgument(
        `${at}: the token of tenant ${name} is ${bytes} bytes; it must be at least ${MIN_TENANT_TOKEN_BYTES} ` +
          '(make one with: head -c 32 /dev/urandom | base64)',
      );
    }
    const before = names.get(name);
    if (before !== undefined) throw errors.invalidArgument(`${at}: tenant ${name} is named on line ${before} too`);
    const same = tokens.get(token);
    if (same !== undefined) {
      throw errors.invalidArgument(
        `${at}: tenant ${name} has the same token as line ${same}; each tenant needs its own`,
      );
    }
    names.set(name, index + 1);
    tokens.set(token, index + 1);
    tenants.push({ name, token });
  }
  if (tenants.length === 0) throw errors.invalidArgument(`the tenants file ${file} names no tenant (lines name:token)`);
  return tenants;
}

export async function readToken(
  file: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string | undefined> {
  if (file === undefined) return env.OFFLOAD_TOKEN || undefined;
  let text: string;
  try {
    // A secret others on the machine can read is not one (POSIX modes; Windows has ACLs instead).
    const { mode } = await stat(file);
    if (process.platform !== 'win32' && (mode & 0o077) !== 0) {
      throw errors.invalidArgument(
        `the token file ${file} can be read by others (mode ${(mode & 0o777).toString(8)}); make it private: chmod 600 ${file}`,
      );
    }
    text = await readFile(file, 'utf8');
  } catch (error) {
    if (error instanceof Error && 'code' in error && (error as { code: unknown }).code === 'INVALID_ARGUMENT')
      throw error;
    throw errors.invalidArgument(`cannot read the token file ${file}: ${(error as Error).message}`);
  }
  const token = text.trim();
  if (token === '') throw errors.invalidArgument(`the token file ${file} is empty`);
  return token;
}
