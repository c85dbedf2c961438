/**
 * The GPU when it is wanted: a program that does not ask for a software adapter starts no Dawn
 * where no GPU can be there, prints nothing of Dawn's, and says why under OFFLOAD_DEBUG; the
 * OFFLOAD_WEBGPU, OFFLOAD_INFO and OFFLOAD_DEBUG switches read as they say.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Offload, OffloadError } from '../src/index.js';
import { noGpuDeviceNode, webgpuOptionsFromEnv } from '../src/plugins/webgpu/adapter.js';
import { debugEnabled } from '../src/runtime/debug.js';
import { infoEnabled } from '../src/runtime/info-log.js';

const index = fileURLToPath(new URL('../src/index.ts', import.meta.url));

/** Runs a host-only program in a fresh process (OFFLOAD_WEBGPU unset); its stderr and how long init took. */
function hostOnlyProgram(env: NodeJS.ProcessEnv): Promise<{ stderr: string; initMs: number; devices: string[] }> {
  const script = `
    import { Offload } from ${JSON.stringify(index)};
    const started = performance.now();
    const rt = await Offload.init();
    const initMs = performance.now() - started;
    console.log(JSON.stringify({ initMs, devices: rt.devices.map((d) => d.info.kind) }));
    await rt.shutdown();`;
  const { OFFLOAD_WEBGPU: _, ...rest } = process.env;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    env: { ...rest, OFFLOAD_PROXIES: '', OFFLOAD_HOST_THREADS: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`status ${code}:\n${stderr}`));
      resolve({ stderr, ...JSON.parse(stdout) });
    }),
  );
}

describe('the GPU when it is wanted', { timeout: 120_000 }, () => {
  it('prints nothing of Dawn in a program that uses the host device only', async () => {
    const { stderr, devices } = await hostOnlyProgram({ OFFLOAD_DEBUG: '' });
    assert.ok(devices.includes('cpu'));
    assert.doesNotMatch(stderr, /artificially reduced|Warning:/, 'Dawn wrote to stderr');
    assert.equal(stderr, '');
  });

  it('starts no Dawn where no GPU device node exists, and says so under OFFLOAD_DEBUG', async (t) => {
    const absent = await noGpuDeviceNode();
    if (!absent) return t.skip('this machine has a GPU device node, so Dawn is rightly started to look at it');
    const { stderr, initMs } = await hostOnlyProgram({ OFFLOAD_DEBUG: '1' });
    assert.match(stderr, /offload-ts debug: webgpu: Dawn not started: no GPU device node/);
    assert.doesNotMatch(stderr, /Dawn started/);
    // Dawn alone costs 0.1-0.3 s here; a host-only init is a few ms (generous for a busy machine).
    assert.ok(initMs < 1000, `init took ${initMs} ms`);
  });

  it('tells a GPU device node apart from none by the device folder alone', async () => {
    const dev = await mkdtemp(path.join(os.tmpdir(), 'offload-dev-'));
    try {
      assert.match((await noGpuDeviceNode('linux', dev))!, /no GPU device node/);
      await mkdir(path.join(dev, 'dri'));
      await writeFile(path.join(dev, 'dri', 'card0'), '');
      assert.match(
        (await noGpuDeviceNode('linux', dev))!,
        /OFFLOAD_WEBGPU=fallback/,
        'a card node without a render node is no GPU for Vulkan',
      );
      await writeFile(path.join(dev, 'dri', 'renderD128'), '');
      assert.equal(await noGpuDeviceNode('linux', dev), undefined);
      await rm(path.join(dev, 'dri'), { recursive: true });
      await writeFile(path.join(dev, 'nvidia0'), '');
      assert.equal(await noGpuDeviceNode('linux', dev), undefined);
      assert.equal(
        await noGpuDeviceNode('darwin', path.join(dev, 'missing')),
        undefined,
        'Metal and D3D12 need no device node',
      );
    } finally {
      await rm(dev, { recursive: true, force: true });
    }
  });

  it('refuses an OFFLOAD_WEBGPU value it does not know, naming the variable', async () => {
    assert.throws(
      () => webgpuOptionsFromEnv('fallbak'),
      (error: unknown) =>
        error instanceof OffloadError &&
        error.code === 'INVALID_ARGUMENT' &&
        /OFFLOAD_WEBGPU.*'fallbak'/.test(error.message),
    );
    assert.deepEqual(webgpuOptionsFromEnv('ON', ''), { fallback: false });
    assert.deepEqual(webgpuOptionsFromEnv(' Fallback ', ''), { fallback: true });
    assert.equal(webgpuOptionsFromEnv('false', ''), false);
    const saved = process.env.OFFLOAD_WEBGPU;
    process.env.OFFLOAD_WEBGPU = 'gpu-please';
    try {
      await assert.rejects(
        Offload.init({ proxies: [] }),
        (error: unknown) =>
          error instanceof OffloadError && error.code === 'INVALID_ARGUMENT' && /OFFLOAD_WEBGPU/.test(error.message),
      );
    } finally {
      if (saved === undefined) delete process.env.OFFLOAD_WEBGPU;
      else process.env.OFFLOAD_WEBGPU = saved;
    }
  });

  it('reads OFFLOAD_INFO=false and OFFLOAD_DEBUG=off as off', () => {
    for (const off of [undefined, '', '0', 'false', 'FALSE', 'off', 'no']) {
      assert.equal(infoEnabled({ OFFLOAD_INFO: off }), false, `OFFLOAD_INFO=${off}`);
      assert.equal(debugEnabled({ OFFLOAD_DEBUG: off }), false, `OFFLOAD_DEBUG=${off}`);
    }
    for (const on of ['1', 'true', 'yes', 'all']) {
      assert.equal(infoEnabled({ OFFLOAD_INFO: on }), true);
      assert.equal(debugEnabled({ OFFLOAD_DEBUG: on }), true);
    }
  });
});
