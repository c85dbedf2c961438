/**
 * A `target` call whose clauses all name present mappings takes a path of its own (the mapper's
 * lowerPresent and launchPresent: no await, no copy, its own queues), but only with OFFLOAD_INFO
 * and traces off, which the mapping suite turns on to count copies. This file runs that path with
 * both off, and checks it does what the general path would: the kernel works on the device copy,
 * a sub-array finds its offset, and any clause the path cannot serve goes the general way.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { map, Offload, type Device, type Kernel, type MapSpec, type Runtime } from '../src/index.js';
import { fixtureBundle } from './helpers/fixtures.js';

describe('target over present maps (OFFLOAD_INFO off)', { timeout: 60_000 }, () => {
  let rt: Runtime;
  let device: Device;
  let add: Kernel;
  /** How many calls the present-map path launched. */
  let presentLaunches = 0;

  before(async () => {
    rt = await Offload.init({ proxies: [], webgpu: false, mpi: false, host: { threads: 1 } });
    device = rt.devices[0]!;
    add = await device.kernel(await rt.register(await fixtureBundle()), 'add_i32');
    const mapper = (rt as unknown as { mapper: Record<string, (...args: unknown[]) => unknown> }).mapper;
    const launchPresent = mapper.launchPresent!.bind(mapper);
    mapper.launchPresent = (...args: unknown[]) => {
      presentLaunches++;
      return launchPresent(...args);
    };
  });
  after(() => rt.shutdown());

  const addOne = (n: number, clause: MapSpec) => rt.target(device, add, { teams: 1 }, [n, 1, clause]);

  it('runs on the device copy, copying nothing until the region ends', async () => {
    const data = new Int32Array([1, 2, 3, 4]);
    presentLaunches = 0;
    await rt.targetData(device, [map.tofrom(data)], async () => {
      await addOne(4, map.tofrom(data));
      await addOne(4, map.to(data));
      assert.deepEqual([...data], [1, 2, 3, 4], 'the host array changed inside the region');
    });
    assert.equal(presentLaunches, 2);
    assert.deepEqual([...data], [3, 4, 5, 6]);
    assert.equal(rt.mappedRanges(device), 0);
  });

  it('finds a sub-array inside a mapped array at its offset', async () => {
    const data = new Int32Array(8);
    presentLaunches = 0;
    await rt.targetData(device, [map.tofrom(data)], async () => {
      await addOne(2, map.tofrom(data.subarray(5)));
      await addOne(1, map.from(data.subarray(0, 1)));
    });
    assert.equal(presentLaunches, 2);
    assert.deepEqual([...data], [1, 0, 0, 0, 0, 1, 1, 0]);
  });

  it('sends always, absent ranges and delete clauses the general way', async () => {
    const data = new Int32Array([10, 10]);
    const other = new Int32Array([5, 5]);
    presentLaunches = 0;
    await rt.targetData(device, [map.tofrom(data)], async () => {
      await addOne(2, map.always.tofrom(data));
      assert.deepEqual([...data], [11, 11], 'always.tofrom did not copy back');
      await addOne(2, map.tofrom(other));
      assert.deepEqual([...other], [6, 6], 'an absent range was not mapped around the call');
      await assert.rejects(addOne(2, map.delete(data)), { code: 'INVALID_ARGUMENT' });
    });
    assert.equal(presentLaunches, 0);
    assert.equal(rt.mappedRanges(device), 0);
  });

  it('takes the clauses of another copy of the package (its brand, not its class) on either path', async () => {
    const data = new Int32Array([0, 0]);
    const foreign = (view: Int32Array, always = false): MapSpec =>
      ({
        [Symbol.for('offload-ts.MapSpec')]: true,
        type: 'tofrom',
        view,
        always,
        present: false,
        name: 'foreign',
      }) as unknown as MapSpec;
    presentLaunches = 0;
    await rt.targetData(device, [map.tofrom(data)], async () => {
      await addOne(2, foreign(data));
      assert.equal(presentLaunches, 1);
      await addOne(2, foreign(data, true));
      assert.equal(presentLaunches, 1, 'an always clause took the present-map path');
      // always.to brought the host's zeros over the device's ones: one add is left.
      assert.deepEqual([...data], [1, 1]);
    });
    await addOne(2, foreign(data));
    assert.deepEqual([...data], [2, 2]);
  });
});
