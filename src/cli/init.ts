/** `offload init`: sets a project up for kernels (see init-files.ts for what and why). */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { errors } from '../errors.js';
import {
  APP_TSCONFIG,
  DEV_DEPENDENCIES,
  EXAMPLE_APP,
  EXAMPLE_KERNEL,
  KERNEL_FILE,
  KERNELS_DIR,
  KERNELS_TSCONFIG,
  SCRIPTS,
} from './init-files.js';
import { wrapHelp } from './format.js';

export const summary = 'Set a project up for kernels: a kernels folder, an example, npm scripts';

const HELP = wrapHelp(`Usage: offload init [dir]

${summary}. In dir (default: here) it writes
  kernels/tsconfig.json  AssemblyScript's settings: 'tsc -p kernels' checks the kernels,
                         and the application's tsc never sees them
  kernels/example.ts     An example kernel: a sum reduced with atomics
  src/main.ts            A program that launches the sum on every device
  tsconfig.json          The application's: src/ to dist/ (only if there is none)
  package.json           The scripts build:kernels, check:kernels, build, start (those it
                         lacks), the devDependencies they need (typescript ~5.9,
                         @types/node, tsx; those it lacks), and "type": "module" when the
                         project has no code yet (npm init -y writes "commonjs")
Files that exist are kept. Then it runs npm install for the devDependencies it added.
Then: npm run check:kernels && npm run build && npm start.

Options:
  --no-install  Only write the devDependencies into package.json; do not run npm install
  -h, --help    Show this help`);

export async function run(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h' }, 'no-install': { type: 'boolean' } },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const dir = path.resolve(positionals[0] ?? '.');
  const fresh = !(await hasCode(dir));
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
  const added = await addScripts(path.join(dir, 'package.json'), path.basename(dir), fresh);
  await warnIfAppSeesKernels(path.join(dir, 'tsconfig.json'));
  if (added.length === 0) return 0;
  if (values['no-install']) {
    console.log(`note     run npm install for the devDependencies added (${added.join(', ')})`);
    return 0;
  }
  console.log(`install  npm install (devDependencies ${added.join(', ')})`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const installed = spawnSync(npm, ['install', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit' });
  if (installed.status !== 0) {
    console.error(
      `offload init: npm install failed (${installed.error?.message ?? `status ${installed.status ?? installed.signal}`}); run it yourself, then npm run build`,
    );
    return 1;
  }
  return 0;
}

/** Whether `dir` holds code of its own already (a .js or .ts file at its top or in src/): then its module type is the project's choice. */
async function hasCode(dir: string): Promise<boolean> {
  for (const folder of [dir, path.join(dir, 'src')]) {
    const names = await readdir(folder).catch(() => [] as string[]);
    if (names.some((name) => /\.(c|m)?(j|t)sx?$/.test(name))) return true;
  }
  return false;
}

/** Adds the scripts and dev dependencies `package.json` lacks; returns the dependencies added. */
async function addScripts(file: string, name: string, fresh: boolean): Promise<string[]> {
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
  const devDependencies = (manifest.devDependencies ??= {}) as Record<string, string>;
  const dependencies = (manifest.dependencies ?? {}) as Record<string, string>;
  const deps = Object.entries(DEV_DEPENDENCIES).filter(
    ([dependency]) => devDependencies[dependency] === undefined && dependencies[dependency] === undefined,
  );
  for (const [dependency, range] of deps) devDependencies[dependency] = range;
  if (manifest.type !== 'module' && fresh) {
    console.log(
      `changed  package.json "type": ${JSON.stringify(manifest.type ?? null)} -> "module" (the project has no code yet; src/main.ts uses top-level await, which needs it)`,
    );
    manifest.type = 'module';
  }
  await writeFile(file, `${JSON.stringify(manifest, null, 2)}\n`);
  console.log(
    `scripts  ${added.length > 0 ? added.map(([script]) => script).join(', ') : 'none added'} in package.json`,
  );
  if (deps.length > 0)
    console.log(`devDeps  ${deps.map(([dependency, range]) => `${dependency}@${range}`).join(', ')}`);
  if (manifest.type !== 'module')
    console.log('note     package.json has no "type": "module"; src/main.ts uses top-level await, which needs it');
  return deps.map(([dependency]) => dependency);
}

/** A tsconfig without include/files takes every .ts file, kernels/ too: say how to keep them apart. */
async function warnIfAppSeesKernels(file: string): Promise<void> {
  const text = await readFile(file, 'utf8').catch(() => ''); // unreadable: the note is as useful
  if (/"(include|files)"\s*:/.test(text)) return;
  console.log(
    `note     tsconfig.json has no "include": it also checks ${KERNELS_DIR}/, which only AssemblyScript can; add "exclude": ["${KERNELS_DIR}"]`,
  );
}
