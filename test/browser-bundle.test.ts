// The package's browser build: a 20-line page program importing 'offload-ts', bundled by esbuild
// for the browser as a user's bundler would (through package.json's "browser" condition and
// field, no plugin, no shim), holds no Node built-in, none of the Node-only modules (TCP, TLS,
// MPI, Node's worker threads for the host device, the CLI, the compilers, the `ws` and `webgpu`
// packages), and the page's own files in their place; the host device's page worker bundles too.
// Bundles the built package (dist/, built first if missing).
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { bundleHostWorker, bundlePage, PAGE_PROGRAM } from './helpers/browser.js';

/**
 * Fails naming the match and a line around it, never the whole bundle: a failure message of half a
 * megabyte stalls node:test's reporter in the parent process for good.
 */
function assertAbsent(text: string, pattern: RegExp, what: string): void {
  const found = pattern.exec(text);
  if (!found) return;
  const around = text.slice(Math.max(0, found.index - 160), found.index + 160);
  assert.fail(`${what}: found ${JSON.stringify(found[0])} in ...${around}...`);
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
    assertAbsent(code, /["'`]node:[a-z_/]+["'`]/, 'no node: specifier in the bundle');
    assertAbsent(code, /\brequire\(/, 'no require() left to resolve at run time');
    const inputs = Object.keys(metafile.inputs);
    const externals = Object.values(metafile.inputs).flatMap((input) =>
      input.imports.filter((imported) => imported.external).map((imported) => imported.path),
    );
    assert.deepEqual(externals, [], 'nothing left for the page to resolve');
    const nodeOnly = inputs.filter((input) =>
      /dist\/(transport\/(tcp|websocket-node|poll-window|connect)\.js|transport\/mpi\/|plugins\/host\/(host-threads|garbage|worker)\.js|plugins\/webgpu\/gpu\.js|plugins\/builtin\.js|platform-files\.js|cli\/|proxy\/|build\/(?!wasm-code-shape\.js|wasm-module-info\.js))|node_modules\/(ws|webgpu)\//.test(
        input,
      ),
    );
    assert.deepEqual(nodeOnly, [], 'no Node-only module in the page graph');
    for (const pageFile of [
      'dist/browser.js',
      'dist/platform-files.browser.js',
      'dist/plugins/builtin.browser.js',
      'dist/plugins/host/host-threads.browser.js',
      'dist/plugins/host/plugin.js',
      'dist/plugins/webgpu/gpu.browser.js',
      'dist/transport/connect.browser.js',
      'dist/transport/websocket.js',
    ])
      assert.ok(
        inputs.some((input) => input.endsWith(pageFile)),
        `${pageFile} is in the page graph`,
      );
    const worker = await bundleHostWorker(dir);
    assertAbsent(worker, /["'`]node:[a-z_/]+["'`]/, "no node: specifier in the host device's page worker");
    assertAbsent(worker, /\brequire\(/, "no require() in the host device's page worker");
  });
});
