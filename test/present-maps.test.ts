/**
 * A `target` call whose clauses all name present mappings takes a path of its own (in the
 * mapper's target: no await, no copy, its own queues, the clauses resolved by the launch's own
 * argument checks), but only with OFFLOAD_INFO and traces off, which the mapping suite turns on
 * to count copies. This file runs that path with both off, and checks it does what the general
 * path would: the kernel works on the device copy, a sub-array finds its offset, and any clause
 * the path cannot serve goes the general way.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { map, Offload, type Device, type Kernel, type MapSpec, type Runtime } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { bytesAllocated } from './helpers/allocation.js';
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
    // The calls the present-map path took: every call of the mapper's target that did not go on
    // to its general path (which a call the path declines, having done nothing, takes).
    const mapper = (rt as unknown as { mapper: Record<string, (...args: unknown[]) => unknown> }).mapper;
    const target = mapper.target!.bind(mapper);
    const targetMapping = mapper.targetMapping!.bind(mapper);
    mapper.target = (...args: unknown[]) => {
      presentLaunches++;
      return target(...args);
    };
    mapper.targetMapping = (...args: unknown[]) => {
      presentLaunches--;
      return targetMapping(...args);
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
  it('reports a wrong argument as the general path does, having launched nothing', async () => {
    const data = new Int32Array([7, 7, 7, 7]);
    presentLaunches = 0;
    await rt.targetData(device, [map.tofrom(data)], async () => {
      await assert.rejects(addOne(2 ** 40, map.tofrom(data)), {
        code: 'INVALID_ARGUMENT',
        message: /target of 'add_i32': argument 0 'n' \(i32\)/,
      });
      await assert.rejects(rt.target(device, add, { teams: 1 }, [map.to(data), 1, map.tofrom(data)]), {
        code: 'INVALID_ARGUMENT',
        message: /argument 0 'n' \(i32\) is a scalar/,
      });
      await assert.rejects(rt.target(device, add, { teams: 1 }, [4, 1]), {
        code: 'INVALID_ARGUMENT',
        message: /expected 3 arguments/,
      });
      await assert.rejects(rt.target(device, add, { teams: 1 }, [4, 1, 4096]), {
        code: 'INVALID_ARGUMENT',
        message: /argument 2 'data' \(ptr\)/,
      });
      assert.equal(rt.mappedRanges(device), 1, 'a refused call left a mapping behind');
    });
    const whole = new Int32Array(8);
    await rt.targetData(device, [map.tofrom(whole.subarray(0, 4))], async () => {
      await assert.rejects(addOne(4, map.tofrom(whole.subarray(2, 6))), {
        code: 'INVALID_ARGUMENT',
        message: /overlaps the mapped range/,
      });
    });
    assert.equal(presentLaunches, 0);
    assert.deepEqual([...data], [7, 7, 7, 7], 'a refused call ran the kernel');
  });

  it('takes Buffers and DevicePointers beside present clauses', async () => {
    const data = new Int32Array([1, 1]);
    const buffer = await device.alloc(16);
    try {
      await device.queue().write(buffer, new Int32Array(4)).done;
      presentLaunches = 0;
      await rt.targetData(device, [map.tofrom(data)], async () => {
        await rt.target(device, add, { teams: 1 }, [4, 3, buffer]);
        await rt.target(device, add, { teams: 1 }, [2, 1, buffer.at(8)]);
        await addOne(2, map.tofrom(data));
      });
      assert.equal(presentLaunches, 3);
      assert.deepEqual([...data], [2, 2]);
      const out = new Int32Array(4);
      await device.queue().read(buffer, out).done;
      assert.deepEqual([...out], [3, 3, 4, 4]);
    } finally {
      await buffer.free();
    }
  });
  it('finds a new device copy when the array is mapped again, not the freed one', async () => {
    const data = new Int32Array([0, 0]);
    presentLaunches = 0;
    for (let region = 0; region < 3; region++) {
      await rt.targetData(device, [map.tofrom(data)], async () => {
        await addOne(2, map.tofrom(data));
        await addOne(2, map.to(data));
      });
    }
    assert.equal(presentLaunches, 6, 'a call after a remapping went the general way');
    assert.deepEqual([...data], [6, 6]);
    assert.equal(rt.mappedRanges(device), 0);
  });
  it('rejects, and never throws, whatever a call is given', async () => {
    const data = new Int32Array([0, 0]);
    const trap = (): never => {
      throw new Error('a hostile trap');
    };
    const hostileKernel = new Proxy(add, { getPrototypeOf: trap, get: trap });
    const hostileDevice = new Proxy(device, { get: trap });
    const hostileGrid = Object.defineProperty({}, 'teams', { get: trap });
    const hostileArgs = new Proxy([2, 1, map.tofrom(data)], { get: trap });
    const calls: [string, () => Promise<void>][] = [
      ['a kernel whose traps throw', () => rt.target(device, hostileKernel, { teams: 1 }, [2, 1, map.tofrom(data)])],
      ['a device whose traps throw', () => rt.target(hostileDevice, add, { teams: 1 }, [2, 1, map.tofrom(data)])],
      ['a grid whose getter throws', () => rt.target(device, add, hostileGrid as never, [2, 1, map.tofrom(data)])],
      ['arguments whose traps throw', () => rt.target(device, add, { teams: 1 }, hostileArgs)],
      ['no device', () => rt.target(null as never, add, { teams: 1 }, [2, 1, map.tofrom(data)])],
      ['a string for the kernel', () => rt.target(device, 'add_i32' as never, { teams: 1 }, [2, 1, map.tofrom(data)])],
      ['arguments that are not an array', () => rt.target(device, add, { teams: 1 }, 7 as never)],
    ];
    await rt.targetData(device, [map.tofrom(data)], async () => {
      for (const [what, call] of calls) {
        let promise: Promise<void> | undefined;
        assert.doesNotThrow(() => (promise = call()), `target threw for ${what}`);
        await assert.rejects(promise!, `target did not reject for ${what}`);
      }
      await addOne(2, map.tofrom(data)); // the path still works after them
    });
    assert.deepEqual([...data], [1, 1]);
    assert.equal(rt.mappedRanges(device), 0);
  });
  it('gives calls in flight at once queues of their own, so that none waits for another, and no call the queue of a failed one', async () => {
    // On the workers, so that each call is still running when the next is made.
    const pool = await Offload.init({ proxies: [], webgpu: false, mpi: false, host: { threads: 2, inline: 'never' } });
    try {
      const poolDevice = pool.devices[0]!;
      const library = await pool.register(await fixtureBundle());
      const poolAdd = await poolDevice.kernel(library, 'add_i32');
      const trap = await poolDevice.kernel(library, 'trap_unreachable');
      const waitFlag = await poolDevice.kernel(library, 'wait_flag');
      const data = new Int32Array(16);
      let generalCalls = 0;
      const mapper = (pool as unknown as { mapper: Record<string, (...args: unknown[]) => unknown> }).mapper;
      const targetMapping = mapper.targetMapping!.bind(mapper);
      mapper.targetMapping = (...args: unknown[]) => {
        generalCalls++;
        return targetMapping(...args);
      };
      // Each call adds to its own element (calls on different queues may run at the same time).
      const addEach = (delta: number) =>
        Promise.all(
          Array.from({ length: data.length }, (_, i) =>
            pool.target(poolDevice, poolAdd, { teams: 1 }, [1, delta, map.tofrom(data.subarray(i, i + 1))]),
          ),
        );
      const [flag, done] = [new Int32Array(1), new Int32Array(1)];
      await pool.targetData(poolDevice, [map.tofrom(data), map.tofrom(flag), map.tofrom(done)], async () => {
        // The first spins until the second sets the flag: on one queue, it would give up after
        // its spins and store 2.
        const waiting = pool.target(poolDevice, waitFlag, { teams: 1 }, [
          map.tofrom(flag),
          2_000_000_000,
          map.tofrom(done),
        ]);
        await pool.target(poolDevice, poolAdd, { teams: 1 }, [1, 1, map.tofrom(flag)]);
        await waiting;
        await addEach(1);
        // A failure sticks to its queue until a finish(): a later call given that queue would be
        // skipped with this call's error.
        await rejectsWith(pool.target(poolDevice, trap, { teams: 1 }, []), 'KERNEL_TRAP');
        await pool.target(poolDevice, poolAdd, { teams: 1 }, [data.length, 10, map.tofrom(data)]);
        await addEach(100);
        const added = addEach(1000);
        await rejectsWith(pool.target(poolDevice, trap, { teams: 1 }, []), 'KERNEL_TRAP');
        await added;
        await addEach(10_000);
      });
      assert.equal(done[0], 1, 'the second call waited for the first');
      assert.deepEqual([...data], new Array<number>(data.length).fill(11_111));
      assert.equal(generalCalls, 0, 'a call took the general path');
    } finally {
      await pool.shutdown();
    }
  });

  it('makes no object for a call that runs inline: its event is renewed, and what each call settled with stays', async () => {
    // Every launch inline, so that the machine's load cannot move some to the workers (whose
    // events are still running when the call returns, and are never renewed).
    const inline = await Offload.init({
      proxies: [],
      webgpu: false,
      mpi: false,
      host: { threads: 1, inline: 'always' },
    });
    try {
      const inlineDevice = inline.devices[0]!;
      const library = await inline.register(await fixtureBundle());
      const inlineAdd = await inlineDevice.kernel(library, 'add_i32');
      const trap = await inlineDevice.kernel(library, 'trap_unreachable');
      const data = new Int32Array(4);
      const grid = { teams: 1 };
      await inline.targetData(inlineDevice, [map.tofrom(data)], async () => {
        // Calls not awaited, each on the event of the one before: a completed call's promise
        // stays fulfilled when the next call fails, and a failed call's stays rejected.
        const calls: Promise<void>[] = [];
        for (let round = 0; round < 3; round++) {
          calls.push(inline.target(inlineDevice, inlineAdd, grid, [4, 1, map.tofrom(data)]));
          calls.push(inline.target(inlineDevice, trap, grid, []));
          calls.push(inline.target(inlineDevice, inlineAdd, grid, [4, 1, map.tofrom(data)]));
        }
        const settled = await Promise.allSettled(calls);
        assert.deepEqual(
          settled.map((outcome) => outcome.status),
          Array.from({ length: 3 }, () => ['fulfilled', 'rejected', 'fulfilled']).flat(),
        );
        for (const outcome of settled)
          if (outcome.status === 'rejected') assert.equal((outcome.reason as { code?: string }).code, 'KERNEL_TRAP');
        // Calls of a loop, not awaited: each returns the one settled promise of a call
        // completed at once, and its event is the one before it, renewed.
        const args = [4, 1, map.tofrom(data)];
        const loop = async (): Promise<void> => {
          for (let i = 0; i < 20_000; i++) void inline.target(inlineDevice, inlineAdd, grid, args);
        };
        await loop();
        await loop();
        // The least of three: code V8 has not optimised yet boxes every number it touches.
        const perCall: number[] = [];
        for (let run = 0; run < 3; run++) perCall.push((await bytesAllocated(loop)) / 20_000);
        // A new Event a call is 128 bytes; the inline run still boxes two numbers (32).
        assert.ok(Math.min(...perCall) < 96, `${perCall.map((b) => b.toFixed(0)).join(', ')} bytes a call`);
        assert.equal(inline.queuesHeld, 0, 'a call is still counted as running');
      });
      assert.deepEqual([...data], new Array<number>(4).fill(6 + 5 * 20_000));
    } finally {
      await inline.shutdown();
    }
  });

  it("refuses another runtime's device or kernel, and any call after shutdown, as the general path does", async () => {
    const data = new Int32Array([0, 0]);
    const other = await Offload.init({ proxies: [], webgpu: false, mpi: false, host: { threads: 1 } });
    const otherDevice = other.devices[0]!;
    const otherAdd = await otherDevice.kernel(await other.register(await fixtureBundle()), 'add_i32');
    const otherBuffer = await otherDevice.alloc(8);
    try {
      await other.targetData(otherDevice, [map.tofrom(data)], async () => {
        // Its maps are the other runtime's: this one has none for its device, and must not use them.
        await other.target(otherDevice, otherAdd, { teams: 1 }, [2, 1, map.tofrom(data)]);
        await rt.targetData(device, [map.tofrom(data)], async () => {
          await addOne(2, map.tofrom(data)); // this runtime's present path, warm
          presentLaunches = 0;
          await rejectsWith(
            rt.target(device, otherAdd, { teams: 1 }, [2, 1, map.tofrom(data)]),
            'INVALID_ARGUMENT',
            /target: the kernel must be a Kernel loaded for device 0/,
          );
          for (const args of [
            [2, 1, map.tofrom(data)],
            [2, 1, otherBuffer],
          ]) {
            await rejectsWith(
              rt.target(otherDevice, otherAdd, { teams: 1 }, args),
              'INVALID_ARGUMENT',
              /target: the first argument must be a Device of this runtime/,
            );
          }
          assert.equal(presentLaunches, 0);
        });
      });
    } finally {
      await otherBuffer.free();
      await other.shutdown();
    }
    assert.deepEqual([...data], [1, 1], 'each runtime added 1 on its own device copy');
    // After its shutdown, a runtime refuses a call its present path took before.
    const doomed = await Offload.init({ proxies: [], webgpu: false, mpi: false, host: { threads: 1 } });
    const doomedDevice = doomed.devices[0]!;
    const doomedAdd = await doomedDevice.kernel(await doomed.register(await fixtureBundle()), 'add_i32');
    await doomed.enterData(doomedDevice, [map.tofrom(data)]);
    await doomed.target(doomedDevice, doomedAdd, { teams: 1 }, [2, 1, map.tofrom(data)]);
    await doomed.shutdown();
    await rejectsWith(
      doomed.target(doomedDevice, doomedAdd, { teams: 1 }, [2, 1, map.tofrom(data)]),
      'DEVICE_LOST',
      /the runtime was shut down/,
    );
  });
});
