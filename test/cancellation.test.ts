/**
 * Cancellation and time limits: Offload.init against a proxy that accepts and never answers is
 * DEVICE_LOST after connectTimeoutMs, and gives up at once on its AbortSignal; queue.finish and
 * event.wait end on theirs while the work goes on.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Offload, OffloadError, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';

const TOKEN = 'a-token-of-sixteen-bytes-or-more';
/** Accepts every connection and never sends a byte: a hung proxy, or some other server on that port. */
let silent: net.Server;
let address: string;
const held: net.Socket[] = [];

const init = (options: Parameters<typeof Offload.init>[0]) =>
  Offload.init({ host: false, webgpu: false, mpi: false, token: TOKEN, proxies: [address], ...options });

describe('cancellation and time limits', { timeout: 60_000 }, () => {
  before(async () => {
    // It reads (and drops) what comes, so it sees the client's FIN.
    silent = net.createServer((socket) => held.push(socket.resume()));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    address = `127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  });
  after(async () => {
    for (const socket of held) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  it('fails init with DEVICE_LOST when a proxy accepts and does not answer within connectTimeoutMs', async () => {
    const started = performance.now();
    await rejectsWith(
      init({ connectTimeoutMs: 300 }),
      'DEVICE_LOST',
      new RegExp(`proxy ${address} accepted the connection but did not answer within 300 ms`),
    );
    const took = performance.now() - started;
    assert.ok(took >= 290 && took < 5000, `init gave up after ${took.toFixed(0)} ms`);
  });

  it('gives init up on its signal: ABORTED with the reason, TIMEOUT for AbortSignal.timeout', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('the user pressed Ctrl-C')), 100);
    const started = performance.now();
    await rejectsWith(
      init({ signal: controller.signal }),
      'ABORTED',
      /Offload.init was aborted by its signal \(the user pressed Ctrl-C\)/,
    );
    assert.ok(performance.now() - started < 5000);
    await rejectsWith(init({ signal: AbortSignal.timeout(150) }), 'TIMEOUT', /Offload.init/);
    const before = held.length;
    await rejectsWith(init({ signal: AbortSignal.abort() }), 'ABORTED');
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(held.length, before, 'an init aborted before it began opened no connection');
  });

  it('closes the connections an aborted init had opened', async () => {
    const controller = new AbortController();
    const count = held.length;
    const initializing = init({ signal: controller.signal });
    const deadline = Date.now() + 10_000;
    while (held.length === count && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(held.length, count + 1, 'init connected');
    const socket = held.at(-1)!;
    const closed = new Promise((resolve) => socket.once('close', resolve));
    controller.abort();
    await rejectsWith(initializing, 'ABORTED');
    await closed;
  });

  it('refuses a signal that is not an AbortSignal and a bad connectTimeoutMs, naming them', async () => {
    await rejectsWith(
      init({ signal: {} as AbortSignal }),
      'INVALID_ARGUMENT',
      /options\.signal must be an AbortSignal/,
    );
    await rejectsWith(init({ connectTimeoutMs: -1 }), 'INVALID_ARGUMENT', /connectTimeoutMs/);
  });

  describe('waits on the host device', () => {
    let rt: Runtime;
    before(async () => {
      rt = await Offload.init({ proxies: [], webgpu: false, mpi: false, host: { threads: 2 } });
    });
    after(() => rt.shutdown());

    it('ends queue.finish and event.wait on their signals while the launch goes on to its own end', async () => {
      const device = rt.devices[0]!;
      const lib = await rt.register(await fixtureBundle());
      const spin = await device.kernel(lib, 'spin');
      const flag = await device.alloc(4);
      const q = device.queue();
      q.write(flag, new Int32Array(1));
      const launch = q.launch(spin, { teams: 1, timeoutMs: 1500 }, [flag]);
      const started = performance.now();
      await rejectsWith(q.finish({ signal: AbortSignal.timeout(100) }), 'TIMEOUT', /queue\.finish/);
      const controller = new AbortController();
      const waiting = launch.wait({ signal: controller.signal });
      controller.abort('enough');
      await rejectsWith(waiting, 'ABORTED', /event\.wait was aborted by its signal \(enough\)/);
      assert.ok(performance.now() - started < 1000, 'the waits ended before the launch');
      assert.equal(launch.query(), false, 'the launch still runs');
      await rejectsWith(launch.done, 'TIMEOUT', /time limit of 1500 ms/);
      await rejectsWith(q.finish(), 'TIMEOUT');
      await assert.rejects(launch.wait({ signal: 'no' as unknown as AbortSignal }), (error: unknown) =>
        OffloadError.is(error, 'INVALID_ARGUMENT'),
      );
      await flag.free();
    });
  });
});
