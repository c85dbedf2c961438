// The package's browser build: a 20-line page program importing 'offload-ts', bundled by esbuild
// for the browser as a user's bundler would (through package.json's "browser" condition and
// field, no plugin, no shim), holds no Node built-in, none of the Node-only modules (TCP, TLS,
// MPI, the host device's worker threads, the CLI, the `ws` and `webgpu` packages), and the
// page's own files in their place. Bundles the built package (dist/, built first if missing).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { access, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { build, type Metafile } from 'esbuild';

const ROOT = path.join(import.meta.dirname, '..');

/** The page program, as a user writes it. */
export const PAGE_PROGRAM = `import { Offload, map } from 'offload-ts';

const params = new URLSearchParams(location.search);
const out = document.getElementById('out');
const results = {};
const rt = await Offload.init({
  host: false,
  webgpu: { fallback: true },
  proxies: params.get('proxy') ? [params.get('proxy')] : [],
  token: params.get('token') ?? undefined,
});
const lib = await rt.register(params.get('bundle') ?? 'kernels.offload');
for (const device of rt.devices) {
  const iota = await device.kernel(lib, 'iota_i32');
  const values = new Int32Array(16);
  await rt.target(device, iota, { teams: 2 }, [16, map.from(values)]);
  results[device.info.plugin] = Array.from(values);
}
out.textContent = JSON.stringify({ devices: rt.devices.map((d) => d.info.plugin), results });
await rt.shutdown();
`;

/** Bundles `program` as a page's bundler would: the package through its browser condition, nothing else configured. */
export async function bundlePage(dir: string, program = PAGE_PROGRAM): Promise<{ code: string; metafile: Metafile }> {
  try {
    await access(path.join(ROOT, 'dist/browser.js'));
  } catch {
    await promisify(execFile)(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', '--silent', 'build'], {
      cwd: ROOT,
    });
  }
  await mkdir(path.join(dir, 'node_modules'), { recursive: true });
  await symlink(ROOT, path.join(dir, 'node_modules', 'offload-ts')).catch(() => {});
  await writeFile(path.join(dir, 'main.js'), program);
  const result = await build({
    entryPoints: [path.join(dir, 'main.js')],
    absWorkingDir: dir,
    bundle: true,
    platform: 'browser',
    format: 'esm',
    target: 'es2022',
    write: false,
    metafile: true,
    logLevel: 'silent',
  });
  return { code: result.outputFiles[0]!.text, metafile: result.metafile };
}

describe("the package's browser build", { timeout: 120_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'offload-page-'));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('bundles a page program with esbuild, no plugins, and no Node built-in or Node-only module remains', async () => {
    assert.ok(PAGE_PROGRAM.trim().split('\n').length <= 20, 'a 20-line program');
    const { code, metafile } = await bundlePage(dir);
    assert.doesNotMatch(code, /["'`]node:[a-z_/]+["'`]/, 'no node: specifier in the bundle');
    assert.doesNotMatch(code, /\brequire\(/, 'no require() left to resolve at run time');
    const inputs = Object.keys(metafile.inputs);
    const externals = Object.values(metafile.inputs).flatMap((input) =>
      input.imports.filter((imported) => imported.external).map((imported) => imported.path),
    );
    assert.deepEqual(externals, [], 'nothing left for the page to resolve');
    const nodeOnly = inputs.filter((input) =>
      /dist\/(transport\/(tcp|websocket-node|poll-window|connect)\.js|transport\/mpi\/|plugins\/host\/|plugins\/webgpu\/gpu\.js|plugins\/builtin\.js|platform-files\.js|cli\/|proxy\/|build\/)|node_modules\/(ws|webgpu)\//.test(
        input,
      ),
    );
    assert.deepEqual(nodeOnly, [], 'no Node-only module in the page graph');
    for (const pageFile of [
      'dist/browser.js',
      'dist/platform-files.browser.js',
      'dist/plugins/builtin.browser.js',
      'dist/plugins/webgpu/gpu.browser.js',
      'dist/transport/connect.browser.js',
      'dist/transport/websocket.js',
    ])
      assert.ok(
        inputs.some((input) => input.endsWith(pageFile)),
        `${pageFile} is in the page graph`,
      );
  });
});
