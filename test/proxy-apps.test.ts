// Proxy-app smoke runs on the host device and on a remote device behind a real proxy: XSBench
// (1,000 lookups of the small problem -> 3044, both acceleration grids) and RSBench (-> 3533).
// test/rsbench.test.ts checks RSBench's data and kernel in more depth on the host device.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { generateRsbench, RSBENCH, runRsbench, type RsbenchData } from '../src/apps/rsbench.js';
import { generateXsbench, runXsbench, XSBENCH, type XsData } from '../src/apps/xsbench.js';
import { Offload, type Runtime } from '../src/index.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';

describe('proxy apps', { timeout: 180_000 }, () => {
  let bundle: string;
  let proxy: ProxyProcess;
  let runtime: Runtime;
  const data = new Map<string, XsData>();
  let rsData: RsbenchData;

  before(async () => {
    // The data first: making the unionized grid holds the event loop for seconds, and a runtime
    // connected meanwhile would hear no heartbeat for that long and take its proxy as lost.
    for (const grid of ['hash', 'unionized'] as const) data.set(grid, generateXsbench('small', grid));
    rsData = generateRsbench('small');
    [bundle, proxy] = await Promise.all([
      fixtureBundle('examples/xsbench/kernels.ts'),
      startProxy({ threads: 2, memory: '512M' }),
    ]);
    runtime = await Offload.init({
      host: { threads: 2, memoryBytes: 512 * 1024 * 1024 },
      proxies: [proxy.address],
      token: proxy.token,
    });
  });
  after(async () => {
    await runtime?.shutdown();
    await proxy?.stop();
  });

  for (const grid of ['hash', 'unionized'] as const) {
    for (const where of ['host', 'remote', 'both'] as const) {
      it(`gives checksum ${XSBENCH.smoke[1000]} for 1,000 lookups, ${grid} grid, on ${where === 'both' ? 'both devices' : `the ${where} device`}`, async () => {
        const devices =
          where === 'host' ? [runtime.devices[0]!] : where === 'remote' ? [runtime.devices[1]!] : [...runtime.devices];
        const result = await runXsbench(runtime, devices, data.get(grid)!, { bundle, lookups: 1000 });
        assert.equal(result.checksum, XSBENCH.smoke[1000]);
        assert.equal(result.valid, true);
        assert.deepEqual(result.spread.lost, [], 'no device was lost');
        assert.equal(
          result.perDevice.reduce((a, b) => a + b),
          1000,
        );
        for (const device of devices) assert.equal(runtime.mappedRanges(device), 0, 'the data was unmapped');
      });
    }
  }

  it(`gives RSBench's checksum ${RSBENCH.smoke[1000]} for 1,000 lookups on the remote device, and split over both`, async () => {
    const kernelsBundle = await fixtureBundle('examples/rsbench/kernels.ts');
    for (const devices of [[runtime.devices[1]!], [...runtime.devices]]) {
      const result = await runRsbench(runtime, devices, { size: 'small', lookups: 1000, kernelsBundle, data: rsData });
      assert.equal(result.checksum, RSBENCH.smoke[1000]);
      assert.equal(result.valid, true);
    }
  });

  it('reports a wrong lookup count and an empty device list as INVALID_ARGUMENT', async () => {
    await assert.rejects(runXsbench(runtime, [], data.get('hash')!, { bundle, lookups: 10 }), /no devices/);
    await assert.rejects(
      runXsbench(runtime, [runtime.devices[0]!], data.get('hash')!, { bundle, lookups: 0 }),
      /positive integer/,
    );
  });
});
