/** TLS material from files (the proxy's certificate and key, a client's CA): read once, errors that say which file. */
import { errors } from '../errors.js';
import { environment } from '../platform.js';
import { readText } from '../platform-files.js';
import type { TlsClientOptions } from './tcp.js';

/** A PEM file's text; INVALID_ARGUMENT naming the file and what it is for when it cannot be read. */
export async function readPem(file: string, what: string): Promise<string> {
  let text: string;
  try {
    text = await readText(file);
  } catch (error) {
    throw errors.invalidArgument(`cannot read ${what} ${file}: ${(error as Error).message}`);
  }
  if (!text.includes('-----BEGIN ')) throw errors.invalidArgument(`${what} ${file} is not PEM (no '-----BEGIN' line)`);
  return text;
}

/** OFFLOAD_TLS_CA: a PEM file of the CAs a client trusts; with it set, every TCP proxy is reached over TLS. */
export async function tlsFromEnv(env: NodeJS.ProcessEnv = environment()): Promise<TlsClientOptions | undefined> {
  const file = env.OFFLOAD_TLS_CA;
  if (file === undefined || file === '') return undefined;
  return { ca: await readPem(file, 'OFFLOAD_TLS_CA, the CA certificate file,') };
}
