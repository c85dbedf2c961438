/**
 * The package as a user gets it: `npm pack`'s tarball, unpacked into a new project's
 * node_modules (its dependencies linked from ours: nothing is downloaded), then required,
 * imported and type-checked with skipLibCheck off; what the tarball holds and leaves out. And
 * the whole first-time path with npm itself (init, install, offload init, build, start, launch),
 * its registry a local one serving this checkout's locked packages (test/helpers/local-registry.ts).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { userCacheDir } from '../src/cli/kernel-cache.js';
import { measure, readmeFigures, stale, type PackedSize } from '../scripts/install-size.js';
import { startLocalRegistry } from './helpers/local-registry.js';

const exec = promisify(execFile);
const ROOT = path.join(import.meta.dirname, '..');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

let work: string;
let app: string;
let files: string[];
let tarball: string;
let packedSize: PackedSize;

/** `dir`/node_modules: the tarball unpacked as offload-ts, every other package linked from ours, and the bins npm would link. */
async function install(dir: string, omit: readonly string[] = []): Promise<void> {
  const installed = path.join(dir, 'node_modules', 'offload-ts');
  await mkdir(installed, { recursive: true });
  await run('tar', ['-xzf', tarball, '-C', installed, '--strip-components=1'], work);
  for (const entry of await readdir(path.join(ROOT, 'node_modules'))) {
    if (entry.startsWith('.') || omit.includes(entry)) continue;
    await symlink(path.join(ROOT, 'node_modules', entry), path.join(dir, 'node_modules', entry));
  }
  await mkdir(path.join(dir, 'node_modules', '.bin'));
  await symlink('../offload-ts/dist/cli/main.js', path.join(dir, 'node_modules', '.bin', 'offload'));
  await symlink('../typescript/bin/tsc', path.join(dir, 'node_modules', '.bin', 'tsc'));
}

async function run(command: string, args: string[], cwd: string): Promise<string> {
  const { stdout } = await exec(command, args, { cwd, maxBuffer: 64 << 20 }).catch(
    (error: { stdout: string; stderr: string }) => {
      throw new Error(`${command} ${args.join(' ')} failed:\n${error.stdout}\n${error.stderr}`);
    },
  );
  return stdout;
}

describe('the published package', { timeout: 600_000 }, () => {
  before(async () => {
    work = await mkdtemp(path.join(os.tmpdir(), 'offload-package-'));
    // npm pack runs `prepare` (the build) first, as publishing does.
    const packed = JSON.parse(await run(npm, ['pack', '--json', '--pack-destination', work], ROOT)) as (PackedSize & {
      filename: string;
      files: { path: string }[];
    })[];
    files = packed[0]!.files.map((file) => file.path);
    packedSize = packed[0]!;
    app = path.join(work, 'app');
    tarball = path.join(work, packed[0]!.filename);
    await install(app);
    await writeFile(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  });

  after(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('ships a LICENSE, the docs the README links to, and no source map pointing at unshipped sources', async () => {
    assert.ok(files.includes('LICENSE'));
    assert.match(
      await readFile(path.join(app, 'node_modules/offload-ts/LICENSE'), 'utf8'),
      /Apache License\s+Version 2\.0/,
    );
    assert.deepEqual(
      files.filter((file) => file.endsWith('.map')),
      [],
    );
    assert.deepEqual(
      files.filter((file) => file.startsWith('src/')),
      [],
    );
    const readme = await readFile(path.join(ROOT, 'README.md'), 'utf8');
    const linked = [...readme.matchAll(/\]\(((?:docs|bench)\/[^)#]+)\)|`((?:docs|bench)\/[\w./-]+\.md)`/g)].map(
      (match) => match[1] ?? match[2]!,
    );
    assert.ok(linked.length > 0);
    for (const file of linked)
      assert.ok(files.includes(file), `README links to ${file}, which the package does not ship`);
  });

  it('is required from a CommonJS file (its own package "type": "commonjs") and imported from an ES module', async () => {
    // Node loads the ES module for require() from 20.19 and 22.12 on: the range `engines` names.
    const cjs = path.join(work, 'commonjs-app');
    await mkdir(path.join(cjs, 'node_modules'), { recursive: true });
    await symlink(path.join(app, 'node_modules', 'offload-ts'), path.join(cjs, 'node_modules', 'offload-ts'));
    await writeFile(path.join(cjs, 'package.json'), JSON.stringify({ name: 'cjs', private: true, type: 'commonjs' }));
    await writeFile(
      path.join(cjs, 'main.js'),
      `const o = require('offload-ts');
console.log(typeof o.Offload.init, typeof o.map.to, o.OffloadError.name, require.resolve('offload-ts').endsWith('dist/index.js'));
`,
    );
    const { stdout, stderr } = await exec(process.execPath, ['main.js'], { cwd: cjs });
    assert.equal(stdout.trim(), 'function function OffloadError true');
    assert.doesNotMatch(stderr, /Warning/, 'require(esm) warns');
    const imported = await run(
      process.execPath,
      ['--input-type=module', '-e', "const o = await import('offload-ts'); console.log(typeof o.Offload.init)"],
      app,
    );
    assert.equal(imported.trim(), 'function');
  });

  it('has the package.json fields and the files a registry needs, and npm publish --dry-run says nothing to fix', async () => {
    const manifest = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
      description: string;
      repository: { type: string; url: string };
      keywords: string[];
      engines: { node: string };
      exports: Record<string, string | Record<string, string>>;
      bin: Record<string, string>;
      browser: Record<string, string>;
      types: string;
      main: string;
    };
    assert.equal(manifest.repository.type, 'git');
    assert.match(manifest.repository.url, /^git\+https:\/\/.+\.git$/);
    assert.ok(manifest.keywords.includes('webgpu') && manifest.keywords.includes('webassembly'));
    assert.equal(manifest.engines.node, '^20.19.0 || >=22.12.0', 'the versions whose require() loads an ES module');
    assert.doesNotMatch(manifest.description, /later/, 'the description names what the package does today');
    const root = manifest.exports['.'] as Record<string, string>;
    assert.deepEqual(
      Object.keys(root),
      ['types', 'browser', 'import', 'require', 'default'],
      'types first, default last',
    );
    assert.equal(root.require, './dist/index.js');
    assert.deepEqual(manifest.exports['./device'], { types: './assembly/device.ts', default: './assembly/device.ts' });
    // Everything package.json points at is in the tarball.
    const targets = [
      manifest.main,
      manifest.types,
      ...Object.values(manifest.bin),
      ...Object.entries(manifest.browser).flat(),
      ...Object.values(manifest.exports).flatMap((target) =>
        typeof target === 'string' ? [target] : Object.values(target),
      ),
    ];
    for (const target of targets) assert.ok(files.includes(path.posix.normalize(target)), `${target} is not packed`);
    // Nothing a user does not need: no tests, sources, benchmarks' code, build folders or scripts but the install's.
    const allowed =
      /^(dist\/.+\.(js|d\.ts)|assembly\/[\w.]+|examples\/.+|docs\/.+|bench\/README\.md|README\.md|LICENSE|package\.json|native\/mpi\/(offload_mpi\.c|binding\.gyp)|scripts\/build-mpi\.mjs)$/;
    assert.deepEqual(
      files.filter((file) => !allowed.test(file)),
      [],
    );
    assert.ok(files.length > 100 && files.length < 600, `${files.length} files`);
    // --offline: the dry run reads no registry (its one warning is that nobody is logged in).
    const publish = await exec(npm, ['publish', '--dry-run', '--offline', '--ignore-scripts', '--json'], {
      cwd: ROOT,
      env: {
        ...process.env,
        npm_config_registry: 'http://127.0.0.1:9/',
        npm_config_userconfig: path.join(work, 'npmrc'),
      },
      maxBuffer: 16 << 20,
    });
    const warnings = publish.stderr
      .split('\n')
      .filter((line) => /^npm (warn|error)/.test(line) && !/logged in/.test(line));
    assert.deepEqual(warnings, [], 'npm pkg fix would change package.json');
    const published = JSON.parse(publish.stdout) as Record<string, { files: { path: string }[] }>;
    assert.deepEqual(published['offload-ts']!.files.map((file) => file.path).sort(), [...files].sort());
  });

  it('states in README the install sizes that scripts/install-size.ts measures (tarball, package, dependencies)', () => {
    const measured = measure(packedSize);
    assert.ok(measured.installedBytes > measured.runtimeOnlyBytes && measured.runtimeOnlyBytes > measured.packageBytes);
    assert.deepEqual(stale(measured, readmeFigures()), [], 'README is out of date: npm run install-size -- --write');
    assert.match(
      stale(measured, { ...measured, webgpuBytes: measured.webgpuBytes * 2 }).join(),
      /^webgpuBytes: README says/,
    );
  });

  it('type-checks with skipLibCheck off and shows no internal member', async () => {
    await writeFile(
      path.join(app, 'main.ts'),
      `import { Offload, OffloadError, map, type Device, type RuntimeOptions } from 'offload-ts';
const options: RuntimeOptions = { webgpu: { fallback: true } };
const rt = await Offload.init(options);
const device: Device = rt.devices[0]!;
const data = new Float32Array(4);
await rt.targetData(device, [map.tofrom(data)], async () => {});
// @ts-expect-error internal: not in the published declarations
rt.contextCount;
const buffer = await device.alloc(16);
// @ts-expect-error a TypeScript-private member is not in the published declarations either
buffer.isFreed;
const kind: 'cpu' | 'gpu' = device.info.kind;
// @ts-expect-error the kinds are a string-literal union: a misspelt one is a type error
if (device.info.plugin === 'Host') console.log(kind);
console.log(device.info.name, OffloadError.name);
await rt.shutdown();
`,
    );
    // A CommonJS module of the user's (tsc turns its import into require()) gets the same types.
    await writeFile(
      path.join(app, 'legacy.cts'),
      `import { Offload, type DeviceBuffer } from 'offload-ts';
export async function first(): Promise<DeviceBuffer> {
  const rt = await Offload.init();
  return rt.devices[0]!.alloc(16);
}
`,
    );
    await writeFile(
      path.join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2022'],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: false,
          noEmit: true,
          types: ['node'],
        },
        files: ['main.ts', 'legacy.cts'],
      }),
    );
    const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const { stdout } = await exec(process.execPath, [tsc, '-p', 'tsconfig.json', '--pretty', 'false'], {
      cwd: app,
    }).catch((error: { stdout: string }) => error);
    assert.equal(stdout, '', 'tsc found errors');
    const declarations = await readFile(path.join(app, 'node_modules/offload-ts/dist/api/runtime.d.ts'), 'utf8');
    assert.doesNotMatch(declarations, /contextCount|mappedRanges/);
    for (const file of files.filter((name) => name.endsWith('.d.ts'))) {
      const text = await readFile(path.join(app, 'node_modules/offload-ts', file), 'utf8');
      assert.doesNotMatch(text, /^\s*private (?!constructor\(\))/m, `${file} shows a private member`);
    }
  });

  it('compiles a program that uses every exported name without @types/node and without the DOM library', async () => {
    const bare = path.join(work, 'no-node-types');
    await install(bare, ['@types']);
    await writeFile(path.join(bare, 'package.json'), JSON.stringify({ name: 'bare', private: true, type: 'module' }));
    const index = await readFile(path.join(bare, 'node_modules/offload-ts/dist/index.d.ts'), 'utf8');
    const values = new Set(
      Object.keys((await import(path.join(bare, 'node_modules/offload-ts/dist/index.js'))) as object),
    );
    const names = [...index.matchAll(/export (type )?\{([^}]*)\}/g)].flatMap((match) =>
      match[2]!
        .split(',')
        .map((name) => name.trim().replace(/^type /, ''))
        .filter((name) => name !== '')
        .map((name) => name.split(/\s+as\s+/).pop()!),
    );
    assert.ok(names.length > 40 && names.includes('DeviceBuffer') && names.includes('Buffer'), names.join(' '));
    const imported = names.map((name) => (values.has(name) ? name : `type ${name}`));
    await writeFile(
      path.join(bare, 'main.ts'),
      `import { ${imported.join(', ')} } from 'offload-ts';
export { ${names.join(', ')} };
const rt = await Offload.init({ signal: undefined });
await using buffer: DeviceBuffer = await rt.devices[0]!.alloc(16);
const old: Buffer = buffer;
await rt[Symbol.asyncDispose]();
export const used = [old.byteLength, map.to(new Float32Array(1))];
`,
    );
    await writeFile(
      path.join(bare, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2022'],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: false,
          noEmit: true,
          types: [],
        },
        files: ['main.ts'],
      }),
    );
    const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const { stdout } = await exec(process.execPath, [tsc, '-p', 'tsconfig.json', '--pretty', 'false'], {
      cwd: bare,
    }).catch((error: { stdout: string }) => error);
    assert.equal(stdout, '', 'tsc found errors');
  });

  it('installs as a user does: npm init -y, npm install the tarball, offload init (npm installs its devDependencies), check:kernels, build, start, launch', async () => {
    // npm's registry is one on 127.0.0.1 serving this checkout's locked packages from its
    // node_modules: nothing is downloaded, and the versions are those CI tested.
    const registry = await startLocalRegistry(ROOT);
    const project = path.join(work, 'project');
    await mkdir(project);
    const env = {
      ...process.env,
      npm_config_registry: registry.url,
      npm_config_cache: path.join(work, 'npm-cache'),
      npm_config_audit: 'false',
      npm_config_fund: 'false',
      npm_config_update_notifier: 'false',
      OFFLOAD_WEBGPU: 'off',
      OFFLOAD_PROXIES: '',
      OFFLOAD_HOST_THREADS: '1',
      OFFLOAD_CACHE_DIR: path.join(work, 'cache'),
    };
    const sh = async (command: string, args: string[]) => {
      const { stdout } = await exec(command, args, { cwd: project, env, maxBuffer: 16 << 20 }).catch(
        (error: { stdout: string; stderr: string }) => {
          throw new Error(`${command} ${args.join(' ')} failed:\n${error.stdout}\n${error.stderr}`);
        },
      );
      return stdout;
    };
    const npx = process.platform === 'win32' ? 'npx.cmd' : 'npx';
    try {
      await sh(npm, ['init', '-y']);
      await sh(npm, ['install', tarball]);
      assert.match(
        await sh(npx, ['offload', 'init']),
        /wrote +kernels\/tsconfig\.json[\s\S]*changed +package\.json "type": "commonjs" -> "module"[\s\S]*scripts +build:kernels, check:kernels, build, start[\s\S]*install +npm install/,
      );
      const manifest = JSON.parse(await readFile(path.join(project, 'package.json'), 'utf8')) as {
        devDependencies: Record<string, string>;
      };
      assert.deepEqual(Object.keys(manifest.devDependencies).sort(), ['@types/node', 'tsx', 'typescript']);
      // The kernels (and offload-ts/device) type-check under AssemblyScript's settings; the app's tsc never sees them.
      await sh(npm, ['run', '--silent', 'check:kernels']);
      await sh(npm, ['run', '--silent', 'build']);
      const expected = /^device 0 host .*: sum of 0\.\.999 = 499500$/m;
      assert.match(await sh(npm, ['start']), expected);
      const launched = await sh(npx, ['offload', 'launch', '-np', '2', 'dist/main.js']);
      assert.equal(launched.match(/sum of 0\.\.999 = 499500$/gm)?.length, 3, launched);
      // The TypeScript program itself, through the tsx that init installed.
      const typescript = await sh(npx, ['offload', 'launch', '-np', '1', 'src/main.ts']);
      assert.equal(typescript.match(/sum of 0\.\.999 = 499500$/gm)?.length, 2, typescript);
      // A kernel that touches no memory builds too.
      await writeFile(path.join(project, 'kernels', 'empty.ts'), 'export function empty(): void {}\n');
      assert.match(await sh(npx, ['offload', 'build', 'kernels/empty.ts', '-o', 'build/empty']), /kernel +empty\(\)/);
    } finally {
      await registry.close();
    }
    // Every package came from the local registry, none from elsewhere (there is no elsewhere offline).
    assert.ok(
      registry.requests.includes('/typescript') && registry.requests.includes('/ws'),
      registry.requests.join(' '),
    );
  });

  it('runs without its optional dependencies (webgpu, assemblyscript): prebuilt kernels on the host device', async () => {
    const lean = path.join(work, 'runtime-only');
    await mkdir(lean);
    await install(lean, ['webgpu', 'assemblyscript', 'binaryen']);
    await writeFile(path.join(lean, 'package.json'), JSON.stringify({ name: 'lean', private: true, type: 'module' }));
    const env = {
      ...process.env,
      OFFLOAD_PROXIES: '',
      OFFLOAD_HOST_THREADS: '1',
      OFFLOAD_CACHE_DIR: path.join(work, 'cache'),
    };
    // Kernels built where the compiler is installed, run where it is not.
    await exec(
      process.execPath,
      [
        'node_modules/offload-ts/dist/cli/main.js',
        'build',
        'node_modules/offload-ts/examples/kernels.ts',
        '-o',
        path.join(lean, 'kernels'),
      ],
      { cwd: app, env },
    );
    const script = `import { Offload, map } from 'offload-ts';
const rt = await Offload.init({ webgpu: { fallback: true } });
const k = await rt.devices[0].kernel(await rt.register('kernels.offload'), 'saxpy');
const x = Float32Array.of(1, 2, 3), y = Float32Array.of(10, 20, 30);
await rt.target(rt.devices[0], k, { teams: 1 }, [3, 2, map.to(x), map.tofrom(y)]);
console.log(rt.devices.map((d) => d.info.kind).join(','), Array.from(y).join(','));
await rt.shutdown();`;
    const { stdout } = await exec(process.execPath, ['--input-type=module', '-e', script], { cwd: lean, env });
    assert.equal(stdout.trim(), 'cpu 12,24,36', 'the host device only: no WebGPU engine to find a GPU with');
    const build = await exec(
      process.execPath,
      [
        'node_modules/offload-ts/dist/cli/main.js',
        'build',
        'node_modules/offload-ts/examples/kernels.ts',
        '-o',
        'again',
      ],
      { cwd: lean, env },
    ).catch((error: { code: number; stderr: string }) => error);
    assert.equal((build as { code?: number }).code, 1);
    assert.match(
      (build as { stderr: string }).stderr,
      /UNSUPPORTED.*AssemblyScript compiler, which is not installed: npm install assemblyscript@/,
    );
  });

  it("keeps built kernels in the user's cache directory, not the shared temporary one", () => {
    assert.equal(userCacheDir({}, 'linux', '/home/ada'), '/home/ada/.cache/offload-ts');
    assert.equal(userCacheDir({ XDG_CACHE_HOME: '/var/cache/ada' }, 'linux', '/home/ada'), '/var/cache/ada/offload-ts');
    assert.equal(userCacheDir({ XDG_CACHE_HOME: 'relative' }, 'linux', '/home/ada'), '/home/ada/.cache/offload-ts');
    assert.equal(userCacheDir({}, 'darwin', '/Users/ada'), '/Users/ada/Library/Caches/offload-ts');
    assert.equal(userCacheDir({ OFFLOAD_CACHE_DIR: '/tmp/k' }, 'linux', '/home/ada'), '/tmp/k');
  });
});
