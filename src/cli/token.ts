/** Where the `offload` commands get the proxies' token: a file, else OFFLOAD_TOKEN. */
import { readFile, stat } from 'node:fs/promises';
import { errors } from '../errors.js';

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
