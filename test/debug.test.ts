/**
 * OFFLOAD_DEBUG: the variable itself (a child process with it set writes the runtime's decisions
 * and dropped errors to stderr; without it, nothing) and its bad values. What the lines say on
 * every device is in the conformance suite.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import { Offload, OffloadError } from '../src/index.js';

const program = `
import { Offload } from './src/index.js';
const rt = await Offload.init({ host: { threads: 1, memoryBytes: 4 * 1024 * 1024 }, webgpu: false, proxies: [] });
const q = rt.devices[0].queue();
const buffer = await rt.devices[0].alloc(8);
q.read(buffer, new Uint8Array(16)).done.catch(() => {}); // out of bounds: fails, then nobody asks
await q.destroy();
await rt.shutdown();
`;

function run(env: NodeJS.ProcessEnv): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', program], {
      env: { ...process.env, ...env },
      cwd: new URL('..', import.meta.url),
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe('OFFLOAD_DEBUG', { timeout: 120_000 }, () => {
  it('=1 writes the plugins loaded and skipped and the errors dropped to stderr; unset, nothing', async () => {
    const on = await run({ OFFLOAD_DEBUG: '1' });
    assert.equal(on.code, 0, on.stderr);
    assert.match(on.stderr, /^offload-ts debug: plugin host: loaded with 1 device, ids 0 to 0$/m);
    assert.match(on.stderr, /^offload-ts debug: plugin webgpu: not loaded: the WebGPU plugin is turned off/m);
    assert.match(
      on.stderr,
      /^offload-ts debug: queue \d+ of device 0: its work .* failed, and the error was dropped: OUT_OF_BOUNDS: read from buffer of 8 bytes/m,
    );
    const off = await run({ OFFLOAD_DEBUG: '' });
    assert.equal(off.code, 0, off.stderr);
    assert.doesNotMatch(off.stderr, /offload-ts debug/);
  });

  it('refuses values other than 0 and 1 at Offload.init, naming the variable', async () => {
    const saved = process.env.OFFLOAD_DEBUG;
    process.env.OFFLOAD_DEBUG = 'verbose\n'.repeat(20);
    try {
      const error = await Offload.init({ host: { threads: 1, memoryBytes: 4 * 1024 * 1024 } }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(error instanceof OffloadError && error.code === 'INVALID_ARGUMENT', String(error));
      assert.match(error.message, /OFFLOAD_DEBUG must be 1/);
      assert.ok(error.message.length < 200, 'the bad value is quoted short');
    } finally {
      if (saved === undefined) delete process.env.OFFLOAD_DEBUG;
      else process.env.OFFLOAD_DEBUG = saved;
    }
  });
});
