/**
 * The event loop's polling window (src/transport/poll-window.ts): the loop keeps turning for
 * OFFLOAD_POLL_US when a frame is expected and then sleeps, 0 turns it off, and a bad value is
 * INVALID_ARGUMENT naming the variable, for a client and for a proxy.
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { after, describe, it } from 'node:test';
import { OffloadError } from '../src/errors.js';
import { Offload } from '../src/index.js';
import { spawnProxy } from '../src/proxy/spawn.js';
import { connectTcp } from '../src/transport/tcp.js';
import { configurePollWindow, DEFAULT_POLL_US, pollForAWhile, pollMicros } from '../src/transport/poll-window.js';
import { startProxy } from './helpers/proxy.js';

const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

/** The share of `ms` milliseconds from now that this thread's event loop spends awake (not waiting in epoll). */
async function utilization(ms: number): Promise<number> {
  const start = performance.eventLoopUtilization();
  await new Promise((resolve) => setTimeout(resolve, ms));
  return performance.eventLoopUtilization(start).utilization;
}

const BAD = ['soon', '-1', '100001', 'Infinity', 'NaN', '1e9', `${'9'.repeat(100_000)}`];

describe('the polling window while a frame is expected', { timeout: 120_000 }, () => {
  after(() => configurePollWindow());

  it('reads OFFLOAD_POLL_US: 50 us by default, 0 to 100000, anything else INVALID_ARGUMENT naming it, briefly', () => {
    assert.equal(pollMicros({}), DEFAULT_POLL_US);
    assert.equal(pollMicros({ OFFLOAD_POLL_US: '' }), DEFAULT_POLL_US);
    assert.equal(pollMicros({ OFFLOAD_POLL_US: '0' }), 0);
    assert.equal(pollMicros({ OFFLOAD_POLL_US: '12.5' }), 12.5);
    assert.equal(pollMicros({ OFFLOAD_POLL_US: '100000' }), 100_000);
    for (const value of BAD) {
      assert.throws(
        () => pollMicros({ OFFLOAD_POLL_US: value }),
        (error: unknown) =>
          OffloadError.is(error, 'INVALID_ARGUMENT') &&
          /OFFLOAD_POLL_US must be a number of microseconds from 0 to 100000/.test(error.message) &&
          error.message.length < 300,
        value.slice(0, 20),
      );
    }
  });

  it('keeps the event loop turning for the window when a frame is expected, then lets it sleep; 0 never turns it', async () => {
    await utilization(100); // whatever this process was still doing (loading, compiling) settles
    configurePollWindow({ OFFLOAD_POLL_US: '0' });
    pollForAWhile();
    const off = await utilization(60);
    // 40 ms of window, watched over 60 ms: awake for most of it (whatever else runs on the machine).
    configurePollWindow({ OFFLOAD_POLL_US: '40000' });
    pollForAWhile();
    const on = await utilization(60);
    const afterwards = await utilization(60);
    // Relative to the sleeping loop's own figure: a loaded machine wakes it now and then too.
    const seen = `awake ${off.toFixed(2)} of the time without a window, ${on.toFixed(2)} with, ${afterwards.toFixed(2)} after it`;
    assert.ok(on > 0.4 && on - off > 0.3, `window 40 ms: the loop kept turning (${seen})`);
    assert.ok(on - afterwards > 0.3, `past the window the loop slept again (${seen})`);
  });

  it('refuses a bad OFFLOAD_POLL_US where a client connects and where a proxy starts', async () => {
    const proxy = await startProxy({ threads: 1 });
    const saved = process.env.OFFLOAD_POLL_US;
    try {
      process.env.OFFLOAD_POLL_US = 'soon';
      await assert.rejects(
        connectTcp(proxy.address),
        (error: unknown) =>
          OffloadError.is(error, 'INVALID_ARGUMENT') && /OFFLOAD_POLL_US must be a number/.test(error.message),
      );
      await assert.rejects(
        Offload.init({ host: false, proxies: [proxy.address], token: proxy.token }),
        (error: unknown) => error instanceof Error && /OFFLOAD_POLL_US must be a number/.test(error.message),
      );
    } finally {
      if (saved === undefined) delete process.env.OFFLOAD_POLL_US;
      else process.env.OFFLOAD_POLL_US = saved;
      await proxy.stop();
    }
    await assert.rejects(
      spawnProxy({
        cli: ['--import', 'tsx', main],
        token: 'x'.repeat(32),
        env: { ...process.env, OFFLOAD_POLL_US: '-5', OFFLOAD_PROXIES: '', OFFLOAD_WEBGPU: 'off' },
      }),
      (error: unknown) =>
        OffloadError.is(error, 'DEVICE_LOST') &&
        /exited before listening[\s\S]*OFFLOAD_POLL_US must be/.test(error.message),
    );
  });
});
