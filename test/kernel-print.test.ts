/**
 * Kernels' print() beyond the conformance suite: the default destination (the program's stderr,
 * tagged), a listener that throws, and a hostile proxy's 'print' frames (cut, or refused).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { Offload, OffloadError } from '../src/index.js';
import { fakeProxy } from './helpers/fake-proxy.js';
import { fixtureBundle } from './helpers/fixtures.js';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('printing from kernels', { timeout: 120_000 }, () => {
  it("goes to the program's stderr by default, one tagged line each, from workers and inline", async () => {
    const bundle = await fixtureBundle();
    const script = `
      import { Offload } from './src/index.ts';
      const runtime = await Offload.init({ webgpu: false, host: { threads: 2, inline: process.argv[1] } });
      const device = runtime.devices[0];
      const say = await device.kernel(await runtime.register(${JSON.stringify(bundle)}), 'say');
      const data = await device.alloc(32);
      await device.queue().write(data, Float64Array.from([0.25, 0.75])).done;
      await device.queue().launch(say, { teams: 2 }, [2, data, -1]).done;
      await runtime.shutdown();`;
    for (const inline of ['never', 'always']) {
      const { stderr } = await promisify(execFile)(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', script, inline],
        { cwd: root, timeout: 60_000 },
      );
      const lines = stderr.split('\n').filter((line) => line.startsWith('[offload'));
      assert.deepEqual(
        lines.sort(),
        [
          "[offload device 0 'say' team 0] team, line, value: 0, 0, 0.25",
          "[offload device 0 'say' team 0] team, line, value: 0, 1, 0.25",
          "[offload device 0 'say' team 1] team, line, value: 1, 0, 0.75",
          "[offload device 0 'say' team 1] team, line, value: 1, 1, 0.75",
        ],
        `OFFLOAD_HOST_INLINE=${inline}: ${stderr}`,
      );
    }
  });

  it('a listener that throws fails neither the launch nor the device', async () => {
    const runtime = await Offload.init({
      webgpu: false,
      host: { threads: 1, inline: 'never' },
      print: () => {
        throw new Error('listener bug');
      },
    });
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.message);
    process.on('warning', onWarning);
    try {
      const device = runtime.devices[0]!;
      const say = await device.kernel(await runtime.register(await fixtureBundle()), 'say');
      const data = await device.alloc(32);
      await device.queue().launch(say, { teams: 1 }, [1, data, -1]).done;
      await device.queue().launch(say, { teams: 1 }, [1, data, -1]).done;
      await new Promise((resolve) => setImmediate(resolve));
      assert.ok(
        warnings.some((text) => /print listener threw: listener bug/.test(text)),
        warnings.join('\n'),
      );
    } finally {
      process.off('warning', onWarning);
      await runtime.shutdown();
    }
  });

  it("takes a hostile proxy's print frames cut to a line's length while a launch runs, and a malformed one as a protocol error", async () => {
    const bundle = await fixtureBundle();
    const proxy = await fakeProxy();
    const lines: { team: number; text: string; kernel: string }[] = [];
    const runtime = await Offload.init({
      host: false,
      webgpu: false,
      proxies: [proxy.address],
      token: 'x'.repeat(16),
      print: (line) => lines.push(line),
    });
    try {
      const device = runtime.devices[0]!;
      const empty = await device.kernel(await runtime.register(bundle), 'empty');
      const queue = device.queue();
      // A launch the fake proxy never answers: its lines are taken while it runs.
      queue.launch(empty, { teams: 1 }, []).done.catch(() => {});
      await new Promise((resolve) => setTimeout(resolve, 100)); // the proxy has seen the queue
      const send = (meta: Record<string, unknown>) => proxy.client().send(meta);
      send({ op: 'print', queue: 1, kernel: 'k'.repeat(4_000), team: 0, text: 'x'.repeat(4_000) });
      send({ op: 'print', queue: 99, kernel: 'k', team: 0, text: 'a queue that does not exist: dropped' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(lines.length, 1);
      assert.ok(
        lines[0]!.text.length <= 515 && lines[0]!.text.endsWith('...'),
        `a line of ${lines[0]!.text.length} characters`,
      );
      assert.ok(lines[0]!.kernel.length <= 131);
      send({ op: 'print', queue: 1, kernel: 'k', team: 'seven', text: 'x' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      const refused = await queue.record().done.then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(
        refused instanceof OffloadError && refused.code === 'DEVICE_LOST' && /names team "seven"/.test(refused.message),
        String(refused),
      );
    } finally {
      await runtime.shutdown();
      await proxy.close();
    }
  });
});
