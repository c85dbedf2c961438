/**
 * What installing offload-ts costs on disk, measured rather than typed: README's figures come from
 * here.
 *
 * - The tarball and the package unpacked: `npm pack --dry-run --json` of this checkout (built:
 *   `npm run build` first).
 * - Each package npm installs with it: its `dependencies` and `optionalDependencies`, followed
 *   through package-lock.json as Node resolves them (node_modules/<name> nearest first), each
 *   package's folder in this checkout's node_modules summed by file size (a nested node_modules is
 *   its own package, counted once). The folders are as npm left them after install scripts, so
 *   the figures are what a user's disk holds (webgpu ships Dawn for five platforms).
 *
 *   npm run install-size              prints the README paragraph
 *   npm run install-size -- --json    prints the figures in bytes
 *   npm run install-size -- --write   rewrites the paragraph between README's markers
 *   npm run install-size -- --check   exits 1 when a README figure is more than 25% off
 *
 * test/package.test.ts checks README's figures against these, with the tarball it packs.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const ROOT = path.join(import.meta.dirname, '..');
const README = path.join(ROOT, 'README.md');
const BEGIN = '<!-- install-size: figures from `npm run install-size -- --write` -->';
const END = '<!-- /install-size -->';
/** How far a README figure may drift before --check fails: packages grow a little with most changes. */
const TOLERANCE = 0.25;

/** Bytes of the files under `dir`, not following links, leaving out nested node_modules. */
function folderBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules') continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) total += folderBytes(full);
    else if (entry.isFile()) total += lstatSync(full).size;
  }
  return total;
}

/** The lockfile keys (node_modules/...) of `names` and everything they need, as resolved from `from`. */
function closure(lock: Lockfile, names: readonly string[], from = ''): Set<string> {
  const seen = new Set<string>();
  const visit = (name: string, parent: string): void => {
    // Node's resolution: parent/node_modules/name, then each package folder above it, then the root.
    let base = parent;
    for (;;) {
      const key = base === '' ? `node_modules/${name}` : `${base}/node_modules/${name}`;
      const entry = lock.packages[key];
      if (entry) {
        if (seen.has(key)) return;
        seen.add(key);
        const peers = Object.keys(entry.peerDependencies ?? {}).filter(
          (peer) => entry.peerDependenciesMeta?.[peer]?.optional !== true,
        );
        for (const dep of [
          ...Object.keys(entry.dependencies ?? {}),
          ...Object.keys(entry.optionalDependencies ?? {}),
          ...peers,
        ])
          visit(dep, key);
        return;
      }
      if (base === '') return; // not in the lockfile: an optional package of another platform
      base = base.includes('/node_modules/') ? base.slice(0, base.lastIndexOf('/node_modules/')) : '';
    }
  };
  for (const name of names) visit(name, from);
  return seen;
}

/** Bytes on disk of the packages `keys` names, those not installed here (another platform's) left out. */
function packagesBytes(keys: Iterable<string>): number {
  let total = 0;
  for (const key of keys) {
    const dir = path.join(ROOT, key);
    if (existsSync(dir)) total += folderBytes(dir);
  }
  return total;
}

interface LockEntry {
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

interface Lockfile {
  packages: Record<string, LockEntry>;
}

/** `npm pack`'s figures for the tarball: `size` packed, `unpackedSize` on disk. */
export interface PackedSize {
  size: number;
  unpackedSize: number;
}

/** Bytes, each figure README states. */
export interface InstallSizes {
  tarballBytes: number;
  packageBytes: number;
  runtimeOnlyBytes: number;
  webgpuBytes: number;
  compilerBytes: number;
  installedBytes: number;
}

/** `npm pack --dry-run` of this checkout as it is built now. */
export function packDryRun(): PackedSize {
  if (!existsSync(path.join(ROOT, 'dist', 'index.js'))) {
    throw new Error('dist/ is not built: run `npm run build` first (the figures are of the built package)');
  }
  const output = execFileSync(
    process.platform === 'win32' ? 'npm.cmd' : 'npm',
    ['pack', '--dry-run', '--json', '--ignore-scripts'],
    { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] },
  );
  return (JSON.parse(output) as PackedSize[])[0]!;
}

export function measure(packed: PackedSize = packDryRun()): InstallSizes {
  const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
  };
  const lock = JSON.parse(readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as Lockfile;
  const required = closure(lock, Object.keys(manifest.dependencies ?? {}));
  const onlyIn = (names: readonly string[]): string[] => [...closure(lock, names)].filter((key) => !required.has(key));
  const webgpu = packagesBytes(onlyIn(['webgpu']));
  const compiler = packagesBytes(onlyIn(['assemblyscript']));
  const runtimeOnly = packed.unpackedSize + packagesBytes(required);
  return {
    tarballBytes: packed.size,
    packageBytes: packed.unpackedSize,
    runtimeOnlyBytes: runtimeOnly,
    webgpuBytes: webgpu,
    compilerBytes: compiler,
    installedBytes: runtimeOnly + packagesBytes(onlyIn(Object.keys(manifest.optionalDependencies ?? {}))),
  };
}

/** npm's units (decimal): two significant figures under 10 MB, whole MB above. */
const mb = (bytes: number): string =>
  bytes >= 10e6 ? `${Math.round(bytes / 1e6)} MB` : `${(bytes / 1e6).toFixed(1)} MB`;
const kb = (bytes: number): string => `${Math.round(bytes / 1e3)} kB`;

/** README's paragraph on what an install takes; --check reads the figures back in this order. */
export function paragraph(sizes: InstallSizes): string {
  return `Installed, the package needs about ${mb(sizes.installedBytes)}, nearly all of it two *optional*
dependencies: the WebGPU engine (\`webgpu\`, Dawn for five platforms, ${mb(sizes.webgpuBytes)}) and the kernel
compiler (\`assemblyscript\` with its optimiser \`binaryen\`, ${mb(sizes.compilerBytes)}), loaded only when a
program looks for a GPU or builds kernels. \`npm install --omit=optional offload-ts\` is a
runtime-only install of about ${mb(sizes.runtimeOnlyBytes)} (the package itself is ${mb(sizes.packageBytes)}, a ${kb(sizes.tarballBytes)}
tarball) that runs prebuilt bundles on the host device and on proxies; \`offload build\` there
says which package to add.`;
}

const FIGURES: readonly (keyof InstallSizes)[] = [
  'installedBytes',
  'webgpuBytes',
  'compilerBytes',
  'runtimeOnlyBytes',
  'packageBytes',
  'tarballBytes',
];

/** The figures README states now, in bytes, in paragraph()'s order. */
export function readmeFigures(text = readFileSync(README, 'utf8')): InstallSizes {
  const begin = text.indexOf(BEGIN);
  const end = text.indexOf(END);
  if (begin < 0 || end < begin) throw new Error(`README.md has no ${BEGIN} ... ${END} section`);
  const numbers = [...text.slice(begin + BEGIN.length, end).matchAll(/([\d.]+) (MB|kB)/g)].map(
    ([, value, unit]) => Number(value!) * (unit === 'MB' ? 1e6 : 1e3),
  );
  if (numbers.length !== FIGURES.length)
    throw new Error(`README's install-size section has ${numbers.length} figures, not ${FIGURES.length}`);
  return Object.fromEntries(FIGURES.map((name, index) => [name, numbers[index]!])) as unknown as InstallSizes;
}

/** The README figures more than TOLERANCE away from the measured ones (a small one may be 0.3 MB off). */
export function stale(measured: InstallSizes, stated: InstallSizes): string[] {
  return FIGURES.filter((name) => {
    const off = Math.abs(stated[name] - measured[name]);
    return off > TOLERANCE * measured[name] && off > 0.3e6;
  }).map((name) => `${name}: README says ${stated[name]} bytes, measured ${measured[name]}`);
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  const flag = process.argv[2];
  const sizes = measure();
  if (flag === '--json') {
    console.log(JSON.stringify(sizes, null, 2));
  } else if (flag === '--write') {
    const text = readFileSync(README, 'utf8');
    if (!text.includes(BEGIN) || !text.includes(END)) throw new Error(`README.md has no ${BEGIN} ... ${END} section`);
    const begin = text.indexOf(BEGIN) + BEGIN.length;
    writeFileSync(README, `${text.slice(0, begin)}\n${paragraph(sizes)}\n${text.slice(text.indexOf(END))}`);
    console.log(paragraph(sizes));
  } else if (flag === '--check') {
    const off = stale(sizes, readmeFigures());
    if (off.length > 0) {
      console.error(
        `README.md's install sizes are out of date (node scripts/install-size.mjs --write):\n${off.join('\n')}`,
      );
      process.exitCode = 1;
    } else console.log(JSON.stringify(sizes));
  } else if (flag === undefined) {
    console.log(paragraph(sizes));
  } else {
    console.error(`unknown option ${flag} (--json, --write or --check)`);
    process.exitCode = 2;
  }
}
