/**
 * Type-checks a file a test wrote, the way a program that uses offload-ts is checked: strict,
 * NodeNext, `offload-ts` resolved to the sources (dist/ exists only after `npm run build`).
 */
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const ROOT = path.join(import.meta.dirname, '..', '..');
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');

/** tsc's diagnostics of `file` (in `dir`, which should hold a package.json of type module), its own lines only. */
export async function typeCheck(dir: string, file: string): Promise<string[]> {
  const config = path.join(dir, `tsconfig.${path.basename(file, '.ts')}.json`);
  await writeFile(
    config,
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        lib: ['ES2022', 'ES2024.SharedMemory', 'ESNext.Disposable', 'DOM', 'DOM.Iterable'],
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noEmit: true,
        typeRoots: [path.join(ROOT, 'node_modules', '@types')],
        types: ['node'],
        paths: { 'offload-ts': [path.join(ROOT, 'src', 'index.ts')] },
      },
      files: [file],
    }),
  );
  const { stdout } = await promisify(execFile)(process.execPath, [TSC, '-p', config, '--pretty', 'false'], {
    cwd: dir,
  }).catch((error: { stdout: string }) => error);
  // tsc also checks src/, which may have errors of its own; only the files written there are under test.
  return stdout.split('\n').filter((line) => /^(\w+)\.(d\.)?ts\(/.test(line));
}
