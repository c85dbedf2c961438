/**
 * One error policy (src/errors.ts): an OffloadError passes through asOffloadError as it is; any
 * other exception thrown inside the runtime is a bug of ours and reaches the program as INTERNAL,
 * saying so, with the original as its cause, never as DEVICE_LOST; a caller names another code
 * only where a foreign error means something else.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Offload, OffloadError } from '../src/index.js';
import { asOffloadError, errors } from '../src/errors.js';
import { registerPlugin, unregisterPlugin } from '../src/runtime/plugin-registry.js';

const MiB = 1024 * 1024;

/** Whether `error` is INTERNAL, says it is a bug, names `context` and keeps `cause`. */
function isInternal(error: unknown, cause: unknown, context: RegExp, device?: number): boolean {
  assert.ok(OffloadError.is(error, 'INTERNAL'), `expected INTERNAL, got ${String(error)}`);
  assert.equal(error.cause, cause);
  assert.match(error.message, /bug in offload-ts/);
  assert.match(error.message, context);
  assert.equal(error.device, device);
  return true;
}

describe('errors', { timeout: 120_000 }, () => {
  it('asOffloadError passes an OffloadError through and makes anything else INTERNAL, keeping it as the cause', () => {
    const known = errors.outOfBounds('a copy past the end', 2);
    assert.equal(asOffloadError(known, 'copying'), known);
    assert.equal(asOffloadError(known, 'copying', { device: 3 }).device, 3);
    assert.equal(asOffloadError(known, 'copying', { device: 3 }).code, 'OUT_OF_BOUNDS');

    const bug = new TypeError("Cannot read properties of undefined (reading 'address')");
    const internal = asOffloadError(bug, 'copying to device 0', { device: 0 });
    assert.ok(
      isInternal(internal, bug, /^internal error while copying to device 0: TypeError: Cannot read properties/, 0),
    );

    const thrown = asOffloadError('a string', 'loading');
    assert.ok(isInternal(thrown, 'a string', /loading: a string/));
    assert.ok(
      asOffloadError(new Error('x'.repeat(5000)), 'reading').message.length < 1000,
      'a foreign message is cut short',
    );
  });

  it('asOffloadError gives the code a caller names, for a foreign error that means something else', () => {
    const socket = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    const lost = asOffloadError(socket, 'cannot reach 127.0.0.1:1', { code: 'DEVICE_LOST' });
    assert.equal(lost.code, 'DEVICE_LOST');
    assert.equal(lost.message, 'cannot reach 127.0.0.1:1: connect ECONNREFUSED 127.0.0.1:1');
    assert.equal(lost.cause, socket);
  });

  it('a foreign exception inside a queue operation fails it as INTERNAL with its cause, and the queue goes on', async () => {
    const runtime = await Offload.init({
      host: { threads: 1, memoryBytes: 4 * MiB, inline: 'never' },
      webgpu: false,
      proxies: [],
    });
    try {
      const device = runtime.devices[0]!;
      const buffer = await device.alloc(16);
      const queue = device.queue();
      const bug = new TypeError('a bug planted in the host queue');
      const plugin = queue.plugin as unknown as { address: (...args: unknown[]) => number };
      const address = plugin.address;
      plugin.address = () => {
        throw bug;
      };
      const write = queue.write(buffer, new Uint8Array(16).fill(7));
      await assert.rejects(write.done, (error) => isInternal(error, bug, /running an operation of a/, device.id));
      await assert.rejects(queue.finish(), (error) => isInternal(error, bug, /running an operation of a/, device.id));
      // Not DEVICE_LOST: the device and the queue still work.
      plugin.address = address;
      const out = new Uint8Array(16);
      queue.write(buffer, new Uint8Array(16).fill(9));
      queue.read(buffer, out);
      await queue.finish();
      assert.deepEqual(out, new Uint8Array(16).fill(9));
    } finally {
      await runtime.shutdown();
    }
  });

  it('a foreign rejection of a device operation reaches the program as INTERNAL, attributed to the device', async () => {
    const runtime = await Offload.init({ host: { threads: 1, memoryBytes: 4 * MiB }, webgpu: false, proxies: [] });
    try {
      const device = runtime.devices[0]!;
      const bug = new RangeError('a bug planted in memoryInfo');
      (device.plugin as { memoryInfo: () => Promise<unknown> }).memoryInfo = () => Promise.reject(bug);
      await assert.rejects(device.memoryInfo(), (error) => isInternal(error, bug, /memory of device 0/, device.id));
    } finally {
      await runtime.shutdown();
    }
  });

  it('a plugin factory that throws a foreign exception fails Offload.init as INTERNAL', async () => {
    const bug = new TypeError('a bug planted in a plugin factory');
    registerPlugin(
      'planted-bug',
      () => {
        throw bug;
      },
      10,
    );
    try {
      await assert.rejects(
        Offload.init({ host: { threads: 1, memoryBytes: 4 * MiB }, webgpu: false, proxies: [] }),
        (error) => isInternal(error, bug, /Offload\.init/),
      );
    } finally {
      unregisterPlugin('planted-bug');
    }
  });
});
