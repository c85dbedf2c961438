/** Where the `offload` commands get the proxies' token: a file, else OFFLOAD_TOKEN. */
import { readFile } from 'node:fs/promises';
import { errors } from '../errors.js';

export async function readToken(file: string | undefined, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  if (file === undefined) return env.OFFLOAD_TOKEN || undefined;
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw errors.invalidArgument(`cannot read the token file ${file}: ${(error as Error).message}`);
  }
  const token = text.trim();
  if (token === '') throw errors.invalidArgument(`the token file ${file} is empty`);
  return token;
}
