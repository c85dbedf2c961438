/**
 * OpenMP mapping semantics, written once and run on every device kind (host, remote). Each case
 * counts the copies the runtime made, from OFFLOAD_INFO lines, so "no redundant copy" is checked,
 * not assumed.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { map, type Device, type Kernel, type Runtime } from '../../src/index.js';
import { rejectsWith } from '../conformance/suite.js';

export interface MappingTarget {
  /** A runtime built with `info` set to the given sink. */
  runtime(info: (line: string) => void): Promise<Runtime>;
  /** Picks the device under test. */
  device(runtime: Runtime): Device;
  bundle: string;
  cleanup?: () => Promise<void>;
  /** Set when the device's kernels cannot trap: the reason the trap case is skipped. */
  noTraps?: string;
}

interface Copies {
  toDevice: number;
  fromDevice: number;
  bytesTo: number;
  bytesFrom: number;
}

export function mappingSuite(kind: string, setup: () => Promise<MappingTarget>): void {
  describe(`mapping: ${kind}`, { timeout: 120_000 }, () => {
    let target: MappingTarget;
    let runtime: Runtime;
    let device: Device;
    let add: Kernel;
    let iota: Kernel;
    let copies: Copies;

    const sink = (line: string): void => {
      const match = /copying (\d+) bytes from (host to device|device to host)/.exec(line);
      if (!match) return;
      if (match[2] === 'host to device') {
        copies.toDevice++;
        copies.bytesTo += Number(match[1]);
      } else {
        copies.fromDevice++;
        copies.bytesFrom += Number(match[1]);
      }
    };

    before(async () => {
      target = await setup();
      runtime = await target.runtime(sink);
      device = target.device(runtime);
      const library = await runtime.register(target.bundle);
      add = await device.kernel(library, 'add_i32');
      iota = await device.kernel(library, 'iota_i32');
    });
    after(async () => {
      await runtime?.shutdown();
      await target?.cleanup?.();
    });
    beforeEach(() => {
      copies = { toDevice: 0, fromDevice: 0, bytesTo: 0, bytesFrom: 0 };
      assert.equal(runtime.mappedRanges(device), 0, 'the previous case left nothing mapped');
    });

    const addTen = (view: Int32Array, clause = map.tofrom(view)) =>
      runtime.target(device, add, { teams: 2 }, [view.length, 10, clause]);

    // Each map type in a target call: what reaches the device, what comes back, how many copies.
    const cases = [
      { name: 'to', clause: (view: Int32Array) => map.to(view), back: [1, 2, 3, 4], to: 1, from: 0 },
      { name: 'from', clause: (view: Int32Array) => map.from(view), back: null, to: 0, from: 1 },
      { name: 'tofrom', clause: (view: Int32Array) => map.tofrom(view), back: [11, 12, 13, 14], to: 1, from: 1 },
      { name: 'alloc', clause: (view: Int32Array) => map.alloc(view), back: [1, 2, 3, 4], to: 0, from: 0 },
    ];
    for (const { name, clause, back, to, from } of cases) {
      it(`target with map.${name}: copies ${to} in, ${from} out`, async () => {
        const data = new Int32Array([1, 2, 3, 4]);
        await addTen(data, clause(data));
        assert.deepEqual({ to: copies.toDevice, from: copies.fromDevice }, { to, from });
        // `from` brings back whatever the device held plus 10: only its copy count is fixed.
        if (back) assert.deepEqual([...data], back);
        assert.equal(runtime.mappedRanges(device), 0);
      });
    }

    it('maps an array once inside targetData: 100 kernels, one copy in, one copy out', async () => {
      const data = new Int32Array(1024).fill(1);
      await runtime.targetData(device, [map.tofrom(data, 'data')], async () => {
        for (let i = 0; i < 100; i++) await addTen(data);
        assert.equal(runtime.mappedRanges(device), 1);
      });
      assert.deepEqual(copies, { toDevice: 1, fromDevice: 1, bytesTo: 4096, bytesFrom: 4096 });
      assert.ok(data.every((value) => value === 1001));
    });

    it('counts references across nested regions and copies back only at the outermost exit', async () => {
      const data = new Int32Array([5, 5]);
      await runtime.targetData(device, [map.tofrom(data)], async () => {
        await runtime.targetData(device, [map.tofrom(data)], async () => {
          await addTen(data);
        });
        assert.deepEqual([...data], [5, 5], 'the inner exit copied nothing back');
        assert.equal(copies.fromDevice, 0);
      });
      assert.deepEqual([...data], [15, 15]);
      assert.equal(copies.toDevice, 1);
      assert.equal(copies.fromDevice, 1);
    });

    it('always copies on entry and exit even when present', async () => {
      const data = new Int32Array([1, 1]);
      await runtime.targetData(device, [map.tofrom(data)], async () => {
        data[0] = 100; // changed on the host: only an always.to brings it over
        await addTen(data, map.always.tofrom(data));
        assert.deepEqual([...data], [110, 11], 'always.tofrom copied in and back although present');
      });
      assert.deepEqual(copies, { toDevice: 2, fromDevice: 2, bytesTo: 16, bytesFrom: 16 });
    });

    it('update moves present data either way, skips absent data, and refuses it with present: true', async () => {
      const data = new Int32Array([0, 0, 0]);
      await runtime.enterData(device, map.alloc(data, 'data'));
      await runtime.target(device, iota, { teams: 1 }, [3, map.alloc(data)]);
      assert.deepEqual([...data], [0, 0, 0]);
      await runtime.update(device, { from: data });
      assert.deepEqual([...data], [0, 1, 2]);
      data.fill(7);
      await runtime.update(device, { to: [data] });
      await runtime.exitData(device, map.from(data));
      assert.deepEqual([...data], [7, 7, 7]);
      const absent = new Int32Array([5, 5]);
      await runtime.update(device, { from: absent, to: absent });
      assert.deepEqual([...absent], [5, 5]);
      await rejectsWith(
        runtime.update(device, { from: absent, present: true }),
        'NOT_FOUND',
        /update from\(present\).*not present/,
      );
    });

    it('enterData / exitData: from copies back at refcount zero, delete removes whatever the count', async () => {
      const data = new Int32Array([1, 2]);
      await runtime.enterData(device, [map.to(data)]);
      await runtime.enterData(device, [map.to(data)]); // refcount 2, no copy
      assert.equal(copies.toDevice, 1);
      await addTen(data, map.alloc(data));
      await runtime.exitData(device, [map.from(data)]); // refcount 1: nothing back
      assert.deepEqual([...data], [1, 2]);
      await runtime.exitData(device, [map.delete(data)]);
      assert.equal(runtime.mappedRanges(device), 0);
      assert.equal(copies.fromDevice, 0, 'delete does not copy back');
      await runtime.exitData(device, [map.release(data)]); // absent: nothing to do, no error
    });

    it('present requires the range to be mapped', async () => {
      const data = new Int32Array(4);
      await rejectsWith(
        runtime.target(device, add, { teams: 1 }, [4, 1, map.present.tofrom(data, 'data')]),
        'NOT_FOUND',
        /'data'.*not present/,
      );
      await rejectsWith(runtime.enterData(device, map.present.to(data)), 'NOT_FOUND');
      assert.equal(runtime.mappedRanges(device), 0);
      await runtime.targetData(device, [map.to(data)], async () => {
        await addTen(data, map.present.tofrom(data));
      });
      assert.equal(copies.toDevice, 1);
      // Found once (a table remembers the views it found last), then unmapped: not found any more.
      await rejectsWith(addTen(data, map.present.tofrom(data, 'data')), 'NOT_FOUND', /'data'.*not present/);
    });

    it('looks up a view of a resizable buffer afresh: grown past its mapping, it is refused', async () => {
      // ES2024's resizable ArrayBuffer (Node 20 has it; this project's lib does not name it).
      const Resizable = ArrayBuffer as unknown as new (
        bytes: number,
        options: { maxByteLength: number },
      ) => ArrayBuffer & { resize(bytes: number): void };
      const storage = new Resizable(16, { maxByteLength: 64 });
      const view = new Int32Array(storage); // tracks the buffer's length
      await runtime.targetData(device, [map.tofrom(view, 'view')], async () => {
        await addTen(view, map.tofrom(view, 'view'));
        storage.resize(32);
        await rejectsWith(
          addTen(view, map.tofrom(view, 'view')),
          'INVALID_ARGUMENT',
          /'view'.*overlaps the mapped range/,
        );
        storage.resize(16);
      });
      assert.deepEqual([...view], [10, 10, 10, 10]);
    });

    it('maps a sub-array inside a mapped array at its offset, and refuses partial overlaps', async () => {
      // The tail starts 256 bytes in: the largest pointer alignment a device may ask for (WebGPU's bound).
      const data = new Int32Array(68);
      await runtime.targetData(device, [map.tofrom(data, 'data')], async () => {
        const tail = data.subarray(64);
        await runtime.target(device, add, { teams: 1 }, [4, 3, map.tofrom(tail, 'tail')]);
      });
      assert.deepEqual([...data], [...new Array(64).fill(0), 3, 3, 3, 3]);
      assert.equal(copies.toDevice, 1);

      const head = data.subarray(0, 4);
      await runtime.targetData(device, [map.to(head, 'head')], async () => {
        await rejectsWith(
          runtime.enterData(device, map.to(data.subarray(2, 6), 'middle')),
          'INVALID_ARGUMENT',
          /'middle'.*overlaps the mapped range.*'head'/,
        );
      });
      assert.equal(runtime.mappedRanges(device), 0);
    });

    it('releases the maps when the body throws, and reports the body error', async () => {
      const data = new Int32Array(2);
      const failure = new Error('body failed');
      await assert.rejects(
        runtime.targetData(device, [map.tofrom(data), map.alloc(new Float64Array(3))], async () => {
          await addTen(data);
          throw failure;
        }),
        (error) => error === failure,
      );
      assert.equal(runtime.mappedRanges(device), 0);
    });

    it('undoes a partly applied enter when a later clause fails', async () => {
      const a = new Int32Array(2);
      const b = new Int32Array(2);
      await rejectsWith(runtime.enterData(device, [map.to(a), map.present.to(b, 'b')]), 'NOT_FOUND', /'b'/);
      assert.equal(runtime.mappedRanges(device), 0);
    });

    it('rejects bad clauses and arguments with INVALID_ARGUMENT naming them', async () => {
      assert.throws(() => map.to(42 as never), /map\.to: expected a TypedArray/);
      await rejectsWith(
        runtime.enterData(device, [map.release(new Int32Array(1))]),
        'INVALID_ARGUMENT',
        /map\.release is not allowed/,
      );
      await rejectsWith(
        runtime.exitData(device, [map.to(new Int32Array(1))]),
        'INVALID_ARGUMENT',
        /map\.to is not allowed/,
      );
      await rejectsWith(runtime.enterData(device, ['x' as never]), 'INVALID_ARGUMENT', /map clause/);
      await rejectsWith(
        runtime.target('device' as never, add, { teams: 1 }, []),
        'INVALID_ARGUMENT',
        /Device of this runtime/,
      );
      await rejectsWith(
        runtime.target(device, add, { teams: 1 }, [1, 2, map.tofrom(new Int32Array(1))].slice(0, 2)),
        'INVALID_ARGUMENT',
        /expected 3 arguments/,
      );
      await rejectsWith(
        runtime.target(device, add, { teams: 1 }, [1, 2, map.delete(new Int32Array(1))]),
        'INVALID_ARGUMENT',
        /map\.delete cannot map/,
      );
      await rejectsWith(
        runtime.targetData(device, [map.to(new Int32Array(1))], 'body' as never),
        'INVALID_ARGUMENT',
        /body must be a function/,
      );
      assert.equal(runtime.mappedRanges(device), 0);
    });

    it('fails a target whose kernel traps, and still unmaps', async (t) => {
      if (target.noTraps) return t.skip(target.noTraps);
      const library = await runtime.register(target.bundle);
      const trap = await device.kernel(library, 'trap_unreachable');
      const data = new Int32Array(4);
      await rejectsWith(
        runtime.targetData(device, [map.tofrom(data)], () => runtime.target(device, trap, { teams: 1 }, [])),
        'KERNEL_TRAP',
      );
      assert.equal(runtime.mappedRanges(device), 0);
      // Over present maps (the path with no await): the failure is the call's own, and the next call runs.
      await runtime.targetData(device, [map.tofrom(data)], async () => {
        await rejectsWith(runtime.target(device, trap, { teams: 1 }, []), 'KERNEL_TRAP');
        await addTen(data);
        assert.equal(runtime.mappedRanges(device), 1);
      });
      assert.deepEqual([...data], [10, 10, 10, 10]);
      await library.unregister();
    });
  });
}
