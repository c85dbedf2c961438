/** `offload init`: sets a project up for kernels (see init-files.ts for what and why). */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { errors } from '../errors.js';
import {
  APP_TSCONFIG,
  EXAMPLE_APP,
  EXAMPLE_KERNEL,
  KERNEL_FILE,
  KERNELS_DIR,
  KERNELS_TSCONFIG,
  SCRIPTS,
} from './init-files.js';

export const summary = 'Set a project up for kernels: a kernels folder, an example, npm scripts';

const HELP = `Usage: offload init [dir]

${summary}. In dir (default: here) it writes
  kernels/tsconfig.json  AssemblyScript's settings: 'tsc -p kernels' checks the kernels,
                         and the application's tsc never sees them
  kernels/example.ts     An example kernel: a sum reduced with atomics
  src/main.ts            A program that launches the sum on every device
  tsconfig.json          The application's: src/ to dist/ (only if there is none)
  package.json           The scripts build:kernels, check:kernels, build, start (those it
                         lacks; a package.json of type module if there is none)
Files that exist are kept. Then: npm run build:kernels && npm run build && npm start.

Options:
  -h, --help  Show this help`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const dir = path.resolve(positionals[0] ?? '.');
  await mkdir(path.join(dir, KERNELS_DIR), { recursive: true });
  await mkdir(path.join(dir, 'src'), { recursive: true });
  for (const [file, text] of [
    [`${KERNELS_DIR}/tsconfig.json`, KERNELS_TSCONFIG],
    [KERNEL_FILE, EXAMPLE_KERNEL],
    ['src/main.ts', EXAMPLE_APP],
    ['tsconfig.json', APP_TSCONFIG],
  ] as const) {
    const target = path.join(dir, file);
    if (existsSync(target)) {
      console.log(`kept     ${file} (it exists)`);
      continue;
    }
    await writeFile(target, text);
    console.log(`wrote    ${file}`);
  }
  await addScripts(path.join(dir, 'package.json'), path.basename(dir));
  await warnIfAppSeesKernels(path.join(dir, 'tsconfig.json'));
  return 0;
}

async function addScripts(file: string, name: string): Promise<void> {
  let manifest: Record<string, unknown> = {
    name: name.toLowerCase().replace(/[^a-z0-9._-]/g, '-'),
    private: true,
    type: 'module',
  };
  if (existsSync(file)) {
    try {
      manifest = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    } catch (error) {
      throw errors.invalidArgument(
        `offload init: package.json is not valid JSON (${(error as Error).message}); fix it and run init again`,
      );
    }
  }
  const scripts = (manifest.scripts ??= {}) as Record<string, string>;
  const added = Object.entries(SCRIPTS).filter(([script]) => scripts[script] === undefined);
  for (const [script, command] of added) scripts[script] = command;
  await writeFile(file, `${JSON.stringify(manifest, null, 2)}\n`);
  console.log(
    `scripts  ${added.length > 0 ? added.map(([script]) => script).join(', ') : 'none added'} in package.json`,
  );
  if (manifest.type !== 'module')
    console.log('note     package.json has no "type": "module"; src/main.ts uses top-level await, which needs it');
}

/** A tsconfig without include/files takes every .ts file, kernels/ too: say how to keep them apart. */
async function warnIfAppSeesKernels(file: string): Promise<void> {
  const text = await readFile(file, 'utf8').catch(() => ''); // unreadable: the note is as useful
  if (/"(include|files)"\s*:/.test(text)) return;
  console.log(
    `note     tsconfig.json has no "include": it also checks ${KERNELS_DIR}/, which only AssemblyScript can; add "exclude": ["${KERNELS_DIR}"]`,
  );
}
