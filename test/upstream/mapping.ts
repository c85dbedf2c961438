/**
 * LLVM's OpenMP mapping tests (llvm-project `offload/test/mapping/`), one `it` per upstream file,
 * each naming it. The C programs become the same directives through this package's API; the
 * expectations are the upstream `// CHECK:` lines: the value printed at the end, or the
 * failure (`omptarget fatal error`) as a coded OffloadError. Kernels: `add_i32` for `x = x + d`,
 * `fill_f32` for `x = v`, `saxpy` for a kernel that reads one parameter and writes another.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { map, type Device, type Kernel, type Runtime } from '../../src/index.js';
import { rejectsWith } from '../conformance/suite.js';

export interface UpstreamTarget {
  /** A runtime built with `info` set to the given sink. */
  runtime(info: (line: string) => void): Promise<Runtime>;
  device(runtime: Runtime): Device;
  bundle: string;
  cleanup?: () => Promise<void>;
  /** What the device cannot do, each the reason the cases that need it are skipped. */
  lacks?: { aliasing?: string; unalignedPointers?: string };
}

export function upstreamMappingSuite(kind: string, setup: () => Promise<UpstreamTarget>): void {
  describe(`llvm offload/test/mapping: ${kind}`, { timeout: 120_000 }, () => {
    let target: UpstreamTarget;
    let rt: Runtime;
    let dev: Device;
    let add: Kernel;
    let fill: Kernel;
    let saxpy: Kernel;
    /** OFFLOAD_INFO's mapping lines of the current case. */
    let lines: string[] = [];
    const moved = (direction: 'host to device' | 'device to host') =>
      lines.filter((line) => line.includes(`copying data from ${direction}`)).length;

    before(async () => {
      target = await setup();
      rt = await target.runtime((line) => lines.push(line));
      dev = target.device(rt);
      const library = await rt.register(target.bundle);
      add = await dev.kernel(library, 'add_i32');
      fill = await dev.kernel(library, 'fill_f32');
      saxpy = await dev.kernel(library, 'saxpy');
    });
    after(async () => {
      await rt?.shutdown();
      await target?.cleanup?.();
    });
    beforeEach(() => {
      lines = [];
      assert.equal(rt.mappedRanges(dev), 0, 'the previous case left nothing mapped');
    });

    /** `x = x + delta` on the device, x mapped by `clause`. */
    const addTo = (x: Int32Array, delta: number, clause: ReturnType<typeof map.to>) =>
      rt.target(dev, add, { teams: 1 }, [x.length, delta, clause]);
    /** `x = value` on the device. */
    const set = (x: Float32Array, value: number, clause: ReturnType<typeof map.to>) =>
      rt.target(dev, fill, { teams: 1 }, [x.length, value, clause]);

    // A `target` of one kernel names an array once per pointer parameter: `saxpy(n, 1, x, y)` with
    // both parameters on one array is `x = x + x`, as the upstream `x = x + 111` from 111. The
    // longer clause lists of these files run as a data region around a present-map kernel.
    it('map_ordering_tgt_alloc_tofrom.c: alloc, tofrom, alloc on one array', async (t) => {
      if (target.lacks?.aliasing) return t.skip(target.lacks.aliasing);
      const x = Float32Array.of(111);
      await rt.target(dev, saxpy, { teams: 1 }, [1, 1, map.alloc(x), map.tofrom(x)]);
      assert.equal(x[0], 222); // CHECK: After tgt: 222
      await rt.target(dev, saxpy, { teams: 1 }, [1, 1, map.tofrom(x), map.alloc(x)]);
      assert.equal(x[0], 444, 'whatever the order');
      const y = Int32Array.of(111);
      await rt.targetData(dev, [map.alloc(y), map.tofrom(y), map.alloc(y)], () => addTo(y, 111, map.present.alloc(y)));
      assert.equal(y[0], 222);
    });

    it('map_ordering_tgt_alloc_from_to.c: alloc, from, to, alloc copies in once, back once', async (t) => {
      if (target.lacks?.aliasing) return t.skip(target.lacks.aliasing);
      const x = Float32Array.of(111);
      await rt.target(dev, saxpy, { teams: 1 }, [1, 1, map.from(x), map.to(x)]);
      assert.equal(x[0], 222); // CHECK: After tgt: 222
      assert.equal(moved('host to device'), 1, 'DEBUG: Moving ... (hst) -> (tgt), once');
      assert.equal(moved('device to host'), 1);
      lines = [];
      const y = Int32Array.of(111);
      await rt.targetData(dev, [map.alloc(y), map.from(y), map.to(y), map.alloc(y)], () =>
        addTo(y, 111, map.present.alloc(y)),
      );
      assert.equal(y[0], 222);
      assert.equal(moved('host to device'), 1);
      assert.equal(moved('device to host'), 1);
    });

    it('map_ordering_tgt_data_alloc_from.c', async () => {
      const x = Float32Array.of(111);
      await rt.targetData(dev, [map.alloc(x), map.from(x), map.alloc(x)], () => set(x, 222, map.present.alloc(x)));
      assert.equal(x[0], 222); // CHECK: After tgt data: 222
    });

    it('map_ordering_tgt_data_alloc_to_from.c', async () => {
      const x = Int32Array.of(111);
      await rt.targetData(dev, [map.alloc(x), map.to(x), map.from(x), map.alloc(x)], () =>
        addTo(x, 111, map.present.alloc(x)),
      );
      assert.equal(x[0], 222); // CHECK: After tgt data: 222
    });

    it('map_ordering_tgt_data_alloc_tofrom.c', async () => {
      const x = Int32Array.of(111);
      await rt.targetData(dev, [map.alloc(x), map.tofrom(x), map.alloc(x)], () => addTo(x, 111, map.present.alloc(x)));
      assert.equal(x[0], 222); // CHECK: 222
    });

    it('map_ordering_tgt_alloc_present_tofrom.c: present among the clauses of an absent array fails', async () => {
      const x = Int32Array.of(111);
      await rejectsWith(
        rt.targetData(dev, [map.alloc(x, 'x'), map.present.alloc(x, 'x'), map.tofrom(x, 'x')], () => {}),
        'NOT_FOUND',
        /map\.present\.alloc: 'x' .* is not present/,
      );
      assert.equal(rt.mappedRanges(dev), 0, 'the failed construct left nothing mapped');
    });

    it('map_ordering_tgt_exit_data_delete_from.c: delete wins, from still copies back', async () => {
      const x = Float32Array.of(111);
      await rt.targetData(dev, [map.alloc(x)], async () => {
        await rt.enterData(dev, [map.alloc(x), map.to(x)]); // present: count 2, no copy
        assert.equal(moved('host to device'), 0);
        await set(x, 222, map.present.alloc(x));
        await rt.exitData(dev, [map.delete(x), map.from(x), map.delete(x)]);
        assert.equal(x[0], 222); // CHECK: 222
        assert.equal(rt.mappedRanges(dev), 0);
      });
    });

    it('map_ordering_tgt_exit_data_always_always.c: two always-from clauses copy back once', async () => {
      const x = Float32Array.of(111);
      await rt.targetData(dev, [map.alloc(x)], async () => {
        await rt.enterData(dev, [map.alloc(x), map.to(x)]);
        await set(x, 222, map.present.alloc(x));
        assert.equal(moved('host to device'), 0); // DEBUG-NOT: Moving hst -> tgt
        await rt.exitData(dev, [map.always.from(x), map.always.from(x)]);
        assert.equal(moved('device to host'), 1); // DEBUG: Moving tgt -> hst, once
      });
      assert.equal(x[0], 222); // CHECK: After tgt exit data: 222
    });

    it('data_absent_at_exit.c: what is no longer present at exit is ignored', async () => {
      const f = Int32Array.of(5);
      const r = Int32Array.of(6);
      const d = Int32Array.of(7);
      const af = Int32Array.of(8);
      await rt.targetData(dev, [map.from(f), map.always.from(af)], async () => {
        await rt.target(dev, add, { teams: 1 }, [1, 100, map.present.alloc(f)]);
        await rt.exitData(dev, [map.delete(f), map.delete(af)]);
      });
      assert.deepEqual([f[0], af[0]], [5, 8]); // CHECK: f = 5, af = 8
      await rt.exitData(dev, [map.from(f), map.release(r), map.delete(d), map.always.from(af)]);
      assert.deepEqual([f[0], r[0], d[0], af[0]], [5, 6, 7, 8]); // CHECK: f = 5, r = 6, d = 7, af = 8
    });

    for (const extends_ of ['before', 'after'] as const) {
      const SIZE = 100;
      const [smallBeg, smallEnd] = extends_ === 'before' ? [SIZE - 2, SIZE] : [0, 2];
      it(`target_data_array_extension_at_exit.c (EXTENDS=${extends_.toUpperCase()})`, async () => {
        // checking not present: arr[LARGE] is not (fully) present at the region's end: no copy back.
        let arr = new Float32Array(SIZE).fill(99);
        let small = arr.subarray(smallBeg, smallEnd);
        await rt.targetData(dev, [map.tofrom(arr)], async () => {
          await rt.exitData(dev, map.delete(arr));
          await rt.enterData(dev, map.alloc(small));
          await set(small, 88, map.alloc(small));
        });
        await rt.exitData(dev, map.delete(small)); // the program's end, upstream
        arr.forEach((v, i) => assert.equal(v, 99, `CHECK-NOT: error: arr[${i}]`));
        // checking is present: arr[SMALL] lies inside the larger mapping at the end: only it comes back.
        arr = new Float32Array(SIZE).fill(99);
        small = arr.subarray(smallBeg, smallEnd);
        await rt.targetData(dev, [map.tofrom(small)], async () => {
          await rt.exitData(dev, map.delete(small));
          await rt.enterData(dev, map.alloc(arr));
          await set(arr, 88, map.alloc(arr));
        });
        assert.equal(rt.mappedRanges(dev), 0);
        arr.forEach((v, i) => assert.equal(v, smallBeg <= i && i < smallEnd ? 88 : 99, `CHECK-NOT: error: arr[${i}]`));
      });
    }

    it('alloc_fail.c: a section that extends a mapping is INVALID_ARGUMENT naming both', async () => {
      const arr = Int32Array.of(0, 1, 2, 3);
      await rejectsWith(
        rt.targetData(dev, [map.alloc(arr.subarray(0, 2), 'arr[0:2]')], () =>
          rt.targetData(dev, [map.alloc(arr.subarray(1, 3), 'arr[1:2]')], () => {}),
        ),
        'INVALID_ARGUMENT',
        /map\.alloc: 'arr\[1:2\]' .*8 bytes.* overlaps the mapped range \[0x0, 0x8\) of 'arr\[0:2\]'/,
      );
    });

    it('present/target.c', async () => {
      const i = Int32Array.of(0);
      await rt.targetData(dev, [map.alloc(i)], () => addTo(i, 1, map.present.alloc(i))); // CHECK: i is present
      await rejectsWith(addTo(i, 1, map.present.alloc(i, 'i')), 'NOT_FOUND', /map\.present\.alloc: 'i' .*4 bytes/);
    });

    it('present/target_data.c', async () => {
      const i = Int32Array.of(0);
      await rt.targetData(dev, [map.alloc(i)], () => rt.targetData(dev, [map.present.alloc(i)], () => {}));
      await rejectsWith(
        rt.targetData(dev, [map.present.alloc(i, 'i')], () => {}),
        'NOT_FOUND',
        /map\.present\.alloc: 'i'/,
      );
    });

    it('present/target_enter_data.c', async () => {
      const i = Int32Array.of(0);
      await rt.enterData(dev, map.alloc(i));
      await rt.enterData(dev, map.present.alloc(i));
      await rt.exitData(dev, map.delete(i)); // CHECK: i is present
      await rejectsWith(rt.enterData(dev, map.present.alloc(i, 'i')), 'NOT_FOUND', /map\.present\.alloc: 'i'/);
    });

    for (const type of ['delete', 'release'] as const) {
      it(`present/target_exit_data_${type}.c`, async () => {
        const i = Int32Array.of(0);
        await rt.enterData(dev, map.alloc(i));
        await rt.exitData(dev, map.present[type](i)); // CHECK: i was present
        await rejectsWith(
          rt.exitData(dev, map.present[type](i, 'i')),
          'NOT_FOUND',
          new RegExp(`map\\.present\\.${type}: 'i'`),
        );
      });
    }

    for (const clause of ['to', 'from'] as const) {
      it(`present/target_update.c (CLAUSE=${clause})`, async () => {
        const i = Int32Array.of(0);
        await rt.enterData(dev, map.alloc(i));
        await rt.update(dev, { [clause]: i, present: true });
        await rt.exitData(dev, map.delete(i)); // CHECK: i is present
        await rejectsWith(rt.update(dev, { [clause]: i, present: true }), 'NOT_FOUND', /4 bytes.*not present/);
      });
    }

    for (const extends_ of ['before', 'after'] as const) {
      const [small, large] =
        extends_ === 'before'
          ? [
              [2, 5],
              [0, 5],
            ]
          : [
              [0, 3],
              [0, 5],
            ];
      for (const clause of ['to', 'from'] as const) {
        it(`present/target_update_array_extension.c (CLAUSE=${clause}, EXTENDS=${extends_.toUpperCase()})`, async () => {
          const arr = new Int32Array(5);
          await rt.targetData(dev, [map.alloc(arr.subarray(...large))], () =>
            rt.update(dev, { [clause]: arr.subarray(...small), present: true }),
          ); // CHECK: arr is present
          await rejectsWith(
            rt.targetData(dev, [map.alloc(arr.subarray(...small))], () =>
              rt.update(dev, { [clause]: arr.subarray(...large), present: true }),
            ),
            'NOT_FOUND',
            /20 bytes.*not present/,
          );
        });
      }
    }

    for (const extends_ of ['before', 'after'] as const) {
      const [small, large] =
        extends_ === 'before'
          ? [
              [98, 100],
              [0, 100],
            ]
          : [
              [0, 2],
              [0, 100],
            ];
      it(`present/target_array_extension.c (EXTENDS=${extends_.toUpperCase()})`, async (t) => {
        if (extends_ === 'before' && target.lacks?.unalignedPointers) return t.skip(target.lacks.unalignedPointers);
        const arr = new Int32Array(100);
        await rt.targetData(dev, [map.alloc(arr.subarray(...large))], () =>
          addTo(arr.subarray(...small), 1, map.present.tofrom(arr.subarray(...small))),
        ); // CHECK: arr is present
        // "explicit extension not allowed": the larger range overlaps the smaller mapping.
        await rejectsWith(
          rt.targetData(dev, [map.alloc(arr.subarray(...small), 'arr[SMALL]')], () =>
            addTo(arr, 1, map.present.tofrom(arr, 'arr[LARGE]')),
          ),
          'INVALID_ARGUMENT',
          /map\.present\.tofrom: 'arr\[LARGE\]' .*400 bytes.* overlaps the mapped range .* of 'arr\[SMALL\]'/,
        );
      });

      it(`present/target_data_array_extension.c (EXTENDS=${extends_.toUpperCase()})`, async () => {
        const arr = new Int32Array(100);
        await rt.targetData(dev, [map.alloc(arr.subarray(...large))], () =>
          rt.targetData(dev, [map.present.tofrom(arr.subarray(...small))], () => {}),
        );
        await rejectsWith(
          rt.targetData(dev, [map.alloc(arr.subarray(...small), 'arr[SMALL]')], () =>
            rt.targetData(dev, [map.present.tofrom(arr, 'arr[LARGE]')], () => {}),
          ),
          'INVALID_ARGUMENT',
          /'arr\[LARGE\]' .* overlaps the mapped range/,
        );
      });
    }

    it('present/zero_length_array_section.c: a zero-length section makes no mapping', async () => {
      const arr = new Int32Array(5);
      const empty = arr.subarray(0, 0);
      await rt.targetData(dev, [map.alloc(arr)], () => rt.targetData(dev, [map.present.alloc(empty)], () => {}));
      // CHECK: arr is present
      await rt.targetData(dev, [map.alloc(empty)], async () => {
        assert.equal(rt.mappedRanges(dev), 0, 'arr[0:0] does not create an actual mapping');
        await rejectsWith(
          rt.targetData(dev, [map.present.alloc(empty, 'arr[0:0]')], () => {}),
          'NOT_FOUND',
          /map\.present\.alloc: 'arr\[0:0\]' .*0 bytes/,
        );
      });
    });

    it('target_implicit_partial_map.c: a kernel on the mapped part of an array', async () => {
      const arr = new Int32Array(100);
      /** omp_target_is_present(&arr[i]): a present update of that element succeeds. */
      const isPresent = (i: number) =>
        rt.update(dev, { to: arr.subarray(i, i + 1), present: true }).then(
          () => 1,
          () => 0,
        );
      await rt.targetData(dev, [map.alloc(arr.subarray(50, 52))], async () => {
        assert.equal(await isPresent(50), 1); // CHECK: arr[50] must present: 1
        assert.equal(await isPresent(0), 0); // CHECK: arr[0] should not present: 0
        assert.equal(await isPresent(49), 0); // CHECK: arr[49] should not present: 0
        // No implicit maps here: the kernel names the present part (the whole array would
        // extend the mapping: INVALID_ARGUMENT, see Differences from libomptarget).
        await addTo(arr.subarray(50, 52), 5, map.tofrom(arr.subarray(50, 52)));
      });
      assert.equal(await isPresent(50), 0); // CHECK: arr[50] still present: 0
      assert.equal(rt.mappedRanges(dev), 0);
    });

    it('delete_inf_refcount.c: enter to, target, update from, exit delete', async () => {
      const isHost = Int32Array.of(-1);
      await rt.enterData(dev, map.to(isHost));
      await addTo(isHost, 1, map.tofrom(isHost)); // -1 + 1: the "device" answer, 0
      await rt.update(dev, { from: isHost });
      await rt.exitData(dev, map.delete(isHost));
      assert.equal(isHost[0], 0); // CHECK: Target region executed on the device
      assert.equal(rt.mappedRanges(dev), 0);
    });

    it('ptr_and_obj_motion.c: data moves at enter and exit only; the targets between find it present', async () => {
      // Upstream reaches the array through a struct's pointer too (pointer attachment is not
      // modelled here, see Differences from libomptarget); the motion it checks is the array's.
      const vertexx = new Int32Array(100);
      vertexx[77] = 100;
      await rt.enterData(dev, map.to(vertexx));
      await addTo(vertexx, -23, map.tofrom(vertexx)); // init: vertexx[77] = 77 (read 100 there)
      assert.equal(vertexx[77], 100, 'present: the target copies nothing back');
      await addTo(vertexx, 1, map.tofrom(vertexx)); // change: vertexx[77] += 1 (read 77 there)
      await rt.exitData(dev, map.from(vertexx));
      assert.equal(vertexx[77], 78); // CHECK: Final: 78.0
      assert.equal(moved('host to device'), 1);
      assert.equal(moved('device to host'), 1);
    });

    it("offloading/lone_target_exit_data.c: an exit data as a runtime's first call is quiet", async () => {
      const fresh = await target.runtime((line) => lines.push(line));
      try {
        const x = Int32Array.of(98);
        await fresh.exitData(target.device(fresh), map.from(x));
        assert.equal(x[0], 98); // CHECK: x = 98
        assert.equal(fresh.mappedRanges(target.device(fresh)), 0);
        assert.ok(
          lines.some((line) => /is not present at exit; map\.from skipped/.test(line)),
          lines.join('\n'),
        );
      } finally {
        await fresh.shutdown();
      }
    });

    it('duplicate_mappings_1.cpp: the same section twice in one target', async (t) => {
      if (target.lacks?.aliasing) return t.skip(target.lacks.aliasing);
      const data = new Float32Array(10);
      data[0] = 21;
      await rt.target(dev, saxpy, { teams: 1 }, [
        1,
        1,
        map.tofrom(data.subarray(0, 10)),
        map.tofrom(data.subarray(0, 10)),
      ]);
      assert.equal(data[0], 42); // assert(o.i.data[0] == 42)
    });

    it('map.to(a) and map.from(a) as two parameters of one kernel get the result', async (t) => {
      if (target.lacks?.aliasing) return t.skip(target.lacks.aliasing);
      const a = Float32Array.of(1, 2, 3);
      await rt.target(dev, saxpy, { teams: 1 }, [3, 2, map.to(a), map.from(a)]);
      assert.deepEqual([...a], [3, 6, 9]);
      assert.equal(moved('host to device'), 1);
      assert.equal(moved('device to host'), 1);
      // OFFLOAD_INFO states each combined decision once for the array, as LIBOMPTARGET_INFO would.
      const decisions = lines.filter((line) => /map entry|mapping exists/.test(line));
      assert.equal(decisions.length, 2, decisions.join('\n'));
      assert.match(decisions[0]!, /creating map entry .*Size=12 RefCount=1.*; map\.to, map\.from: copy in once$/);
      assert.match(decisions[1]!, /removing map entry .*RefCount=0.*; map\.from, map\.release: copy back once$/);
    });
  });
}
