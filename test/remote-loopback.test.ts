// The remote plugin against a real proxy session with no sockets: the client's connector hands
// it one end of an in-memory LoopbackTransport pair and the proxy serves the other, so every
// request goes through the typed encoders, the frame codec, the proxy's decodeRequest, its
// dispatch and its host device, and back.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Offload, type Device, type Runtime } from '../src/index.js';
import { EAGER_BYTES } from '../src/protocol/wire.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startLoopbackProxy, type LoopbackProxy } from './helpers/loopback-proxy.js';

const MiB = 1024 * 1024;

describe('the remote plugin over an in-memory transport', { timeout: 120_000 }, () => {
  let proxy: LoopbackProxy;
  let runtime: Runtime;
  let device: Device;

  before(async () => {
    proxy = await startLoopbackProxy({ memoryBytes: 64 * MiB });
    runtime = await Offload.init({ host: false, webgpu: false, proxies: [], mpi: false });
    device = runtime.devices[0]!;
  });
  after(async () => {
    await runtime?.shutdown();
    await proxy?.stop();
  });

  it('connects through the injected connector, and the device is the proxy host device', () => {
    assert.deepEqual(proxy.connected, ['memory:proxy']);
    assert.equal(runtime.devices.length, 1);
    assert.equal(device.info.plugin, 'remote');
    assert.equal(device.info.location, 'memory:proxy');
    assert.equal(proxy.server.clients, 1);
  });

  it('writes, launches and reads back, eager and streamed', async () => {
    const library = await runtime.register(await fixtureBundle(['test/fixtures/kernels.ts']));
    const saxpy = await device.kernel(library, 'saxpy');
    for (const n of [1000, EAGER_BYTES / 4 + 3000]) {
      const x = await device.alloc(n * 4);
      const y = await device.alloc(n * 4);
      const hostX = Float32Array.from({ length: n }, (_, i) => i);
      const hostY = new Float32Array(n).fill(1);
      const q = device.queue();
      q.write(x, hostX);
      q.write(y, hostY);
      q.launch(saxpy, { teams: 4 }, [n, 2, x, y]);
      const out = new Float32Array(n);
      q.read(y, out);
      await q.finish();
      assert.ok(
        out.every((value, i) => value === 2 * i + 1),
        `saxpy over ${n} elements`,
      );
      await q.destroy();
      await x.free();
      await y.free();
    }
    await library.unregister();
  });

  it('parks a queue at a gate for a host function and goes on after it', async () => {
    const q = device.queue();
    const order: string[] = [];
    const buffer = await device.alloc(16);
    q.write(buffer, new Uint8Array(16).fill(7));
    q.hostFunction(async () => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      order.push('host function');
    });
    const out = new Uint8Array(16);
    void q.read(buffer, out).done.then(() => order.push('read'));
    await q.finish();
    assert.deepEqual(order, ['host function', 'read']);
    assert.ok(out.every((byte) => byte === 7));
    await q.destroy();
    await buffer.free();
  });

  it('fails a bad operation with its code, and the connection stays up', async () => {
    const buffer = await device.alloc(64);
    const q = device.queue();
    await rejectsWith(q.write(buffer, new Uint8Array(32), { offset: 48 }).done, 'OUT_OF_BOUNDS');
    await q.destroy();
    await buffer.free();
    assert.equal((await device.memoryInfo()).totalBytes > 0, true);
  });
});
