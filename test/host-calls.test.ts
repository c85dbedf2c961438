/**
 * Calls from kernels to the program (hostCall) beyond the conformance suite: through a real proxy
 * process, a client whose function never answers (the proxy's launch time limit ends it, and the
 * replaced worker calls again cleanly), numbers JSON cannot carry (NaN), a raw client that
 * answers calls nobody made, and a hostile proxy's malformed 'host-call' frames.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Offload, OffloadError } from '../src/index.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { fakeProxy } from './helpers/fake-proxy.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startProxy } from './helpers/proxy.js';
import { RawClient } from './helpers/raw-client.js';

describe('host calls', { timeout: 120_000 }, () => {
  it("through a proxy: a function that never answers ends at the proxy's time limit, the next call is answered, NaN travels", async () => {
    const proxy = await startProxy({ threads: 1, args: ['--launch-timeout', '1500'] });
    const runtime = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
    try {
      const device = runtime.devices[0]!;
      const callHost = await device.kernel(await runtime.register(await fixtureBundle()), 'call_host');
      const out = await device.alloc(8);
      const q = device.queue();
      let release: (value: number) => void = () => {};
      runtime.hostFunctions.add('scale', () => new Promise<number>((resolve) => (release = resolve)));
      await rejectsWith(q.launch(callHost, { teams: 1 }, [0, 1, out]).done, 'TIMEOUT', /call_host/);
      await q.finish().catch(() => {});
      release(5); // the late answer of the killed worker's call is dropped (host-calls.ts M4)
      runtime.hostFunctions.delete('scale');
      runtime.hostFunctions.add('scale', (team, factor) => team + factor * 2);
      runtime.hostFunctions.add('scale_later', () => Number.NaN);
      const got = new Float64Array(1);
      q.launch(callHost, { teams: 1 }, [0, 3, out]);
      q.read(out, got);
      await q.finish();
      assert.equal(got[0], 6);
      q.launch(callHost, { teams: 1 }, [1, 3, out]);
      q.read(out, got);
      await q.finish();
      assert.ok(Number.isNaN(got[0]), `NaN came back as ${got[0]}`);
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('closes a raw client that answers a call nobody made, with PROTOCOL, and serves others', async () => {
    const proxy = await startProxy({ threads: 1 });
    try {
      const raw = await RawClient.open(proxy.address);
      raw.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: proxy.token });
      assert.equal(await raw.error(1), undefined);
      raw.send({ op: 'host-call-result', call: 77, value: 1 });
      const refused = await raw.error(0);
      assert.equal(refused?.code, 'PROTOCOL');
      assert.match(refused.message, /call 77, which is not waiting/);
      await raw.closedWithin(5000);
      const runtime = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
      const buffer = await runtime.devices[0]!.alloc(16);
      await runtime.devices[0]!.queue().write(buffer, new Uint8Array(16)).done;
      await runtime.shutdown();
    } finally {
      await proxy.stop();
    }
  });

  it("takes a hostile proxy's malformed 'host-call' frame as a protocol error of that proxy", async () => {
    const proxy = await fakeProxy();
    const runtime = await Offload.init({
      host: false,
      webgpu: false,
      proxies: [proxy.address],
      token: 'x'.repeat(16),
    });
    try {
      let called = 0;
      runtime.hostFunctions.add('f', () => ++called);
      const queue = runtime.devices[0]!.queue();
      await new Promise((resolve) => setTimeout(resolve, 100)); // the proxy has seen the queue
      proxy.client().send({ op: 'host-call', call: 1, queue: 1, kernel: 'k', name: 'f', args: Array(7).fill(1) });
      await new Promise((resolve) => setTimeout(resolve, 100));
      const refused = await queue.record().done.then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(
        refused instanceof OffloadError &&
          refused.code === 'DEVICE_LOST' &&
          /arguments that are not up to 6 numbers/.test(refused.message),
        String(refused),
      );
      assert.equal(called, 0, 'the malformed call reached no function');
    } finally {
      await runtime.shutdown();
      await proxy.close();
    }
  });
});
