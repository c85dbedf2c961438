/**
 * runtime.target (and the typed wrappers, which call it) checks its arguments against the
 * kernel's parameters before it maps anything: a wrong call allocates and copies nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { map, Offload, type Device, type Kernel, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';

describe('target checks its arguments before mapping', { timeout: 60_000 }, () => {
  let rt: Runtime;
  let device: Device;
  let add: Kernel;
  const lines: string[] = [];
  before(async () => {
    rt = await Offload.init({
      proxies: [],
      webgpu: false,
      mpi: false,
      host: { threads: 1 },
      info: (line) => lines.push(line),
    });
    device = rt.devices[0]!;
    add = await device.kernel(await rt.register(await fixtureBundle()), 'add_i32');
  });
  after(() => rt.shutdown());

  it('refuses a wrong count, a scalar for a pointer, a clause for a scalar and a scalar out of range, having mapped nothing', async () => {
    const data = new Int32Array(4);
    lines.length = 0;
    await rejectsWith(
      rt.target(device, add, { teams: 1 }, [4, map.tofrom(data)]),
      'INVALID_ARGUMENT',
      /target of 'add_i32': expected 3 arguments \(n: i32, delta: i32, data: ptr\), got 2/,
    );
    await rejectsWith(
      rt.target(device, add, { teams: 1 }, [4, 1, 4096]),
      'INVALID_ARGUMENT',
      /argument 2 'data' \(ptr\) must be a map clause, a Buffer or a DevicePointer, got 4096/,
    );
    await rejectsWith(
      rt.target(device, add, { teams: 1 }, [map.to(data), 1, map.tofrom(data)]),
      'INVALID_ARGUMENT',
      /argument 0 'n' \(i32\) is a scalar/,
    );
    await rejectsWith(
      rt.target(device, add, { teams: 1 }, [4, 2 ** 40, map.tofrom(data)]),
      'INVALID_ARGUMENT',
      /argument 1 'delta' \(i32\)/,
    );
    assert.deepEqual(lines, [], 'nothing was allocated, copied or launched');
    assert.equal(rt.mappedRanges(device), 0);
    // The same call, right, runs.
    await rt.target(device, add, { teams: 1 }, [4, 5, map.tofrom(data)]);
    assert.deepEqual([...data], [5, 5, 5, 5]);
  });
});
