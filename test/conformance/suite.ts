/**
 * The conformance suite: every device operation and every error of the public API, written
 * once and run against every device kind available (host here; remote, GPU and MPI reuse it
 * unchanged). A target supplies a runtime, the device under test, optionally a second device
 * of the same runtime for cross-device copies, and the fixture bundle.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { debug } from '../../src/runtime/debug.js';
import {
  Offload,
  OffloadError,
  type Buffer,
  type Device,
  type Event,
  type Kernel,
  type KernelPrint,
  type Library,
  type Queue,
  type Runtime,
} from '../../src/index.js';

export interface ConformanceTarget {
  runtime: Runtime;
  device: Device;
  /** Another device of the same runtime, for cross-device copies and foreign-buffer checks. */
  peer?: Device;
  /** Path of the fixture bundle (test/fixtures/kernels.ts built). */
  bundle: string;
  /** Releases whatever the target started besides the runtime (which the suite shuts down). */
  cleanup?: () => Promise<void>;
  /** A second, separate runtime with at least one device, for buffers of another runtime (default: a small host device). */
  otherRuntime?: () => Promise<Runtime>;
}

/**
 * Calls `onUnhandled` with each promise rejection nobody handled: Node's process event, or a
 * page's `unhandledrejection` (the same suite runs in a page, test/browser-conformance.test.ts).
 * Returns what stops listening.
 */
function watchUnhandled(onUnhandled: (reason: unknown) => void): () => void {
  const node = (globalThis as { process?: NodeJS.Process }).process;
  if (node) {
    node.on('unhandledRejection', onUnhandled);
    return () => node.off('unhandledRejection', onUnhandled);
  }
  const page = globalThis as unknown as {
    addEventListener(type: string, listener: (event: { reason: unknown }) => void): void;
    removeEventListener(type: string, listener: (event: { reason: unknown }) => void): void;
  };
  const listener = (event: { reason: unknown }): void => onUnhandled(event.reason);
  page.addEventListener('unhandledrejection', listener);
  return () => page.removeEventListener('unhandledrejection', listener);
}

/** The boolean capabilities a test may need (device.info.capabilities). */
export type Capability = 'i64' | 'f64' | 'traps' | 'concurrentQueues' | 'atomics' | 'mappedMemory';

/** Skips test `t` when the device says it lacks one of `needs` (info.capabilities); true when skipped. */
function lacking(t: TestContext, device: Device, ...needs: Capability[]): boolean {
  const missing = needs.filter((need) => !device.info.capabilities[need]);
  if (missing.length > 0)
    t.skip(`device ${device.id} (${device.info.name}) lacks ${missing.join(', ')} (info.capabilities)`);
  return missing.length > 0;
}

/** Asserts that `promise` rejects with an OffloadError of `code` whose message matches `message`. */
export async function rejectsWith(promise: Promise<unknown>, code: string, message?: RegExp): Promise<OffloadError> {
  let caught: unknown;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  assert.ok(
    caught instanceof OffloadError,
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- whatever was thrown instead, as String() shows it
    `expected an OffloadError ${code}, got ${caught === undefined ? 'success' : String(caught)}`,
  );
  assert.equal(caught.code, code, `wrong code; message: ${caught.message}`);
  if (message) assert.match(caught.message, message);
  return caught;
}

export function conformance(kind: string, setup: () => Promise<ConformanceTarget>): void {
  describe(`conformance: ${kind}`, { timeout: 120_000 }, () => {
    let target: ConformanceTarget;
    let runtime: Runtime;
    let device: Device;
    let library: Library;
    const kernels = new Map<string, Kernel>();
    const unhandled: unknown[] = [];
    let stopWatching = (): void => {};

    const kernel = async (name: string): Promise<Kernel> => {
      let found = kernels.get(name);
      if (!found) kernels.set(name, (found = await device.kernel(library, name)));
      return found;
    };
    const withBuffer = async <T>(bytes: number, body: (buffer: Buffer) => Promise<T>): Promise<T> => {
      const buffer = await device.alloc(bytes);
      try {
        return await body(buffer);
      } finally {
        if (!buffer.freed) await buffer.free();
      }
    };

    /** An operation that fails on the device: a trapping kernel, or a read beyond a buffer's end where kernels cannot trap. */
    const failingOp = async (q: Queue, buffer: Buffer): Promise<{ event: Event; code: string }> => {
      if (!device.info.capabilities.traps)
        return { event: q.read(buffer, new Uint8Array(8), { offset: buffer.byteLength - 4 }), code: 'OUT_OF_BOUNDS' };
      return { event: q.launch(await kernel('trap_unreachable'), { teams: 1 }, []), code: 'KERNEL_TRAP' };
    };

    before(async () => {
      stopWatching = watchUnhandled((reason) => unhandled.push(reason));
      target = await setup();
      ({ runtime, device } = target);
      library = await runtime.register(target.bundle);
    });

    after(async () => {
      await runtime?.shutdown();
      await target?.cleanup?.();
      stopWatching();
      assert.deepEqual(unhandled, [], 'no promise of the runtime may reject unhandled');
    });

    describe('device info', () => {
      it('describes the device completely', () => {
        const info = device.info;
        for (const key of ['name', 'kind', 'vendor', 'plugin', 'location'] as const) {
          assert.equal(typeof info[key], 'string', key);
          assert.ok(info[key].length > 0, key);
        }
        for (const key of ['memoryBytes', 'maxThreadsPerTeam', 'maxTeams', 'computeUnits'] as const) {
          assert.ok(Number.isInteger(info[key]) && info[key] > 0, `${key} = ${info[key]}`);
        }
        assert.ok(info.imageFormats.includes('wasm') || info.imageFormats.length > 0);
        assert.ok(info.memoryKinds.includes('device'), 'every device supports device memory');
        assert.equal(runtime.device(device.id), device);
      });

      it('rejects unknown device ids with NOT_FOUND', () => {
        assert.throws(
          () => runtime.device(runtime.devices.length),
          (e: OffloadError) => e.code === 'NOT_FOUND',
        );
        assert.throws(
          () => runtime.device(-1),
          (e: OffloadError) => e.code === 'INVALID_ARGUMENT',
        );
      });
    });

    describe('memory', () => {
      it('allocates buffers of every supported kind and refuses the others with UNSUPPORTED', async () => {
        for (const kind of ['device', 'host', 'shared'] as const) {
          if (device.info.memoryKinds.includes(kind)) {
            const buffer = await device.alloc(100, { kind });
            assert.equal(buffer.byteLength, 100);
            assert.equal(buffer.kind, kind);
            assert.equal(buffer.device, device);
            await buffer.free();
            assert.equal(buffer.freed, true);
          } else {
            await rejectsWith(device.alloc(100, { kind }), 'UNSUPPORTED', new RegExp(kind));
          }
        }
      });

      it('rejects bad sizes and kinds with INVALID_ARGUMENT naming them', async () => {
        await rejectsWith(device.alloc(-1), 'INVALID_ARGUMENT', /bytes/);
        await rejectsWith(device.alloc(1.5), 'INVALID_ARGUMENT', /bytes/);
        await rejectsWith(device.alloc('8' as never), 'INVALID_ARGUMENT', /bytes/);
        await rejectsWith(device.alloc(8, { kind: 'texture' as never }), 'INVALID_ARGUMENT', /kind/);
      });

      it('reports OUT_OF_MEMORY beyond the device memory and keeps working', async () => {
        await rejectsWith(device.alloc(device.info.memoryBytes + 1), 'OUT_OF_MEMORY');
        await withBuffer(64, async (buffer) => assert.equal(buffer.byteLength, 64));
      });

      it('detects double free with INVALID_BUFFER', async () => {
        const buffer = await device.alloc(16);
        await buffer.free();
        await rejectsWith(buffer.free(), 'INVALID_BUFFER', /already freed/);
      });

      it('hands out zeroed memory: a new buffer never shows what a freed one held', async () => {
        const q = device.queue();
        for (const bytes of [64, 4096, 1 << 20]) {
          const first = await device.alloc(bytes);
          await q.write(first, new Uint8Array(bytes).fill(0xab)).done;
          await first.free();
          const second = await device.alloc(bytes);
          const out = new Uint8Array(bytes);
          await q.read(second, out).done;
          assert.equal(
            out.findIndex((byte) => byte !== 0),
            -1,
            `a fresh ${bytes}-byte buffer holds the freed one's bytes`,
          );
          await second.free();
        }
        await q.destroy();
      });

      it('refuses a zero-byte allocation with INVALID_ARGUMENT (liboffload: INVALID_SIZE)', async () => {
        await rejectsWith(device.alloc(0), 'INVALID_ARGUMENT', /bytes is 0/);
      });
    });

    describe('copies', () => {
      it('round-trips data through write and read, for typed arrays, sub-arrays and DataViews', async () => {
        await withBuffer(64, async (buffer) => {
          const q = device.queue();
          const backing = new Float64Array([0, 1.5, -2.25, 3e300, 4, 5, 6, 7, 8]);
          q.write(buffer, backing.subarray(1, 9));
          const out = new Float64Array(8);
          q.read(buffer, out);
          const view = new DataView(new ArrayBuffer(16));
          q.read(buffer, view, { offset: 8 });
          await q.finish();
          assert.deepEqual(Array.from(out), [1.5, -2.25, 3e300, 4, 5, 6, 7, 8]);
          assert.equal(view.getFloat64(0, true), -2.25);
          assert.equal(view.getFloat64(8, true), 3e300);
        });
      });

      it('writes and reads at offsets', async () => {
        await withBuffer(16, async (buffer) => {
          const q = device.queue();
          q.write(buffer, new Uint8Array(16));
          q.write(buffer, new Uint8Array([1, 2, 3]), { offset: 13 });
          const out = new Uint8Array(4);
          q.read(buffer, out, { offset: 12 });
          await q.finish();
          assert.deepEqual(Array.from(out), [0, 1, 2, 3]);
        });
      });

      it('rejects out-of-range copies with OUT_OF_BOUNDS on the event and on finish()', async () => {
        await withBuffer(16, async (buffer) => {
          const q = device.queue();
          const event = q.write(buffer, new Uint8Array(8), { offset: 9 });
          await rejectsWith(event.done, 'OUT_OF_BOUNDS', /17/);
          await rejectsWith(q.finish(), 'OUT_OF_BOUNDS');
          await rejectsWith(q.read(buffer, new Uint8Array(17)).done, 'OUT_OF_BOUNDS');
          await rejectsWith(q.finish(), 'OUT_OF_BOUNDS');
        });
      });

      it('rejects non-views, bad offsets, freed and foreign buffers', async () => {
        const q = device.queue();
        await withBuffer(16, async (buffer) => {
          await rejectsWith(q.write(buffer, [1, 2, 3] as never).done, 'INVALID_ARGUMENT', /hostView/);
          await q.finish().catch(() => {});
          await rejectsWith(q.write(buffer, new Uint8Array(1), { offset: -4 }).done, 'INVALID_ARGUMENT', /offset/);
          await q.finish().catch(() => {});
          await rejectsWith(q.write({ byteLength: 16 } as never, new Uint8Array(1)).done, 'INVALID_ARGUMENT', /Buffer/);
          await q.finish().catch(() => {});
        });
        const freed = await device.alloc(16);
        await freed.free();
        await rejectsWith(q.read(freed, new Uint8Array(1)).done, 'INVALID_BUFFER', /freed/);
        await q.finish().catch(() => {});
        const other = await (target.otherRuntime?.() ??
          Offload.init({ host: { threads: 1, memoryBytes: 4 * 1024 * 1024 } }));
        try {
          const foreign = await other.devices[0]!.alloc(16);
          await rejectsWith(q.write(foreign, new Uint8Array(1)).done, 'INVALID_BUFFER', /another runtime/);
          await q.finish().catch(() => {});
        } finally {
          await other.shutdown();
        }
      });

      it('copies between buffers of the device, with offsets and bounds checks', async () => {
        await withBuffer(32, async (a) => {
          await withBuffer(32, async (b) => {
            const q = device.queue();
            q.write(
              a,
              Uint8Array.from({ length: 32 }, (_, i) => i),
            );
            q.write(b, new Uint8Array(32));
            q.copy(b, a, { srcOffset: 4, dstOffset: 20, byteLength: 8 });
            const out = new Uint8Array(32);
            q.read(b, out);
            await q.finish();
            assert.deepEqual(Array.from(out.subarray(18, 30)), [0, 0, 4, 5, 6, 7, 8, 9, 10, 11, 0, 0]);
            await rejectsWith(q.copy(b, a, { srcOffset: 30, byteLength: 4 }).done, 'OUT_OF_BOUNDS');
            await rejectsWith(q.finish(), 'OUT_OF_BOUNDS');
            await rejectsWith(q.copy(b, a, { dstOffset: 1 }).done, 'OUT_OF_BOUNDS', /into/);
            await q.finish().catch(() => {});
          });
        });
      });

      it('copies across devices in both directions', { skip: false }, async (t) => {
        const peer = target.peer;
        if (!peer) return t.skip('the target has no second device');
        const local = await device.alloc(1024);
        const remote = await peer.alloc(1024);
        try {
          const data = Uint8Array.from({ length: 1024 }, (_, i) => (i * 7) & 255);
          const q = device.queue();
          q.write(local, data);
          q.copy(remote, local); // enqueued on the source's queue
          await q.finish();
          const back = new Uint8Array(1024);
          const pq = peer.queue();
          pq.read(remote, back);
          await pq.finish();
          assert.deepEqual(back, data);
          q.write(local, new Uint8Array(1024));
          q.copy(local, remote, { srcOffset: 512, dstOffset: 0, byteLength: 512 }); // on the destination's queue
          const mine = new Uint8Array(1024);
          q.read(local, mine);
          await q.finish();
          assert.deepEqual(mine.subarray(0, 512), data.subarray(512));
          assert.deepEqual(mine.subarray(512), new Uint8Array(512));
          await rejectsWith(peer.queue().copy(local, local).done, 'INVALID_ARGUMENT', /neither/);
        } finally {
          await local.free();
          await remote.free();
        }
      });
    });

    describe('kernels and launches', () => {
      it('lists kernels with typed parameters read from the compiler', () => {
        const saxpy = library.kernels.find((k) => k.name === 'saxpy');
        assert.deepEqual(saxpy?.params, [
          { name: 'n', type: 'i32' },
          { name: 'a', type: 'f32' },
          { name: 'x', type: 'ptr' },
          { name: 'y', type: 'ptr' },
        ]);
      });

      it('rejects unknown kernels with NOT_FOUND listing the known ones', async () => {
        await rejectsWith(device.kernel(library, 'saxpi'), 'NOT_FOUND', /saxpi.*saxpy/);
        await rejectsWith(device.kernel({} as never, 'saxpy'), 'INVALID_ARGUMENT', /Library/);
      });

      for (const teams of [1, 3, 64, 1000]) {
        it(`computes saxpy correctly with ${teams} teams`, async () => {
          const n = 10_000;
          const x = Float32Array.from({ length: n }, (_, i) => i * 0.5);
          const y = Float32Array.from({ length: n }, (_, i) => n - i);
          const saxpy = await kernel('saxpy');
          await withBuffer(n * 4, (bx) =>
            withBuffer(n * 4, async (by) => {
              const q = device.queue();
              q.write(bx, x);
              q.write(by, y);
              q.launch(saxpy, { teams }, [n, 2.5, bx, by]);
              const out = new Float32Array(n);
              q.read(by, out);
              await q.finish();
              for (let i = 0; i < n; i++)
                assert.equal(out[i], Math.fround(Math.fround(2.5 * x[i]!) + y[i]!), `element ${i}`);
            }),
          );
        });
      }

      it('gives each team its position: teamId, numTeams, threadId, numThreads', async () => {
        const teams = 37;
        const recordGrid = await kernel('record_grid');
        await withBuffer(teams * 16, async (out) => {
          const q = device.queue();
          q.launch(recordGrid, { teams, threads: 1 }, [out]);
          const grid = new Int32Array(teams * 4);
          q.read(out, grid);
          await q.finish();
          for (let t = 0; t < teams; t++) {
            assert.equal(grid[t * 4], t, `teamId of team ${t}`);
            assert.equal(grid[t * 4 + 1], teams, 'numTeams');
            assert.ok(grid[t * 4 + 2]! >= 0 && grid[t * 4 + 2]! < grid[t * 4 + 3]!, 'threadId < numThreads');
            assert.ok(
              grid[t * 4 + 3]! >= 1 && grid[t * 4 + 3]! <= device.info.maxThreadsPerTeam,
              'numThreads within the device limit',
            );
          }
        });
      });

      it('passes arguments of every type whole: i32, i64, f32, f64, ptr', async (t) => {
        if (lacking(t, device, 'i64', 'f64')) return;
        const mixed = await kernel('mixed');
        const sum = await kernel('sum_i64');
        await withBuffer(32, async (out) => {
          const q = device.queue();
          q.launch(mixed, { teams: 2 }, [-123456, -(2n ** 62n) - 5n, 1.25, Math.PI, out]);
          const bytes = new DataView(new ArrayBuffer(32));
          q.read(out, bytes);
          await q.finish();
          assert.equal(bytes.getInt32(0, true), -123456);
          assert.equal(bytes.getBigInt64(8, true), -(2n ** 62n) - 5n);
          assert.equal(bytes.getFloat32(16, true), 1.25);
          assert.equal(bytes.getFloat64(24, true), Math.PI);
          q.launch(mixed, { teams: 1 }, [0xfffffffe, 2n ** 64n - 1n, 0, 0, out]); // unsigned values keep their bits
          const unsigned = new DataView(new ArrayBuffer(32));
          q.read(out, unsigned);
          q.launch(sum, { teams: 1 }, [2n ** 40n, 3n, out]);
          const sum64 = new BigUint64Array(1);
          q.read(out, sum64);
          await q.finish();
          assert.equal(unsigned.getUint32(0, true), 0xfffffffe);
          assert.equal(unsigned.getBigUint64(8, true), 2n ** 64n - 1n);
          assert.equal(sum64[0], 2n ** 40n + 3n);
        });
      });

      it('passes float arguments that JSON cannot write: NaN, the infinities and -0', async (t) => {
        if (lacking(t, device, 'i64', 'f64')) return;
        const mixed = await kernel('mixed');
        await withBuffer(32, async (out) => {
          const q = device.queue();
          const seen: [number, number][] = [];
          for (const [c, d] of [
            [NaN, -Infinity],
            [Infinity, NaN],
            [-0, -0],
          ] as const) {
            q.launch(mixed, { teams: 1 }, [1, 2n, c, d, out]);
            const bytes = new DataView(new ArrayBuffer(32));
            q.read(out, bytes);
            await q.finish();
            seen.push([bytes.getFloat32(16, true), bytes.getFloat64(24, true)]);
          }
          assert.deepEqual(seen, [
            [NaN, -Infinity],
            [Infinity, NaN],
            [-0, -0],
          ]);
          assert.ok(Object.is(seen[2]![0], -0) && Object.is(seen[2]![1], -0), '-0 keeps its sign');
        });
      });

      it('checks arguments before launching: count, types, ranges, buffers', async () => {
        const saxpy = await kernel('saxpy');
        const sum = !device.info.capabilities.i64 ? undefined : await kernel('sum_i64');
        const q = device.queue();
        await withBuffer(16, async (b) => {
          // One at a time: a failure is sticky, so each case is reported and cleared by finish().
          const cases: [() => Promise<void>, string, RegExp][] = [
            [
              () => q.launch(saxpy, { teams: 1 }, [4, 1, b]).done,
              'INVALID_ARGUMENT',
              /expected 4 arguments \(n: i32, a: f32, x: ptr, y: ptr\), got 3/,
            ],
            [
              () => q.launch(saxpy, { teams: 1 }, [4n, 1, b, b]).done,
              'INVALID_ARGUMENT',
              /argument 0 'n' \(i32\).*bigint/,
            ],
            [() => q.launch(saxpy, { teams: 1 }, [1.5, 1, b, b]).done, 'INVALID_ARGUMENT', /'n' \(i32\)/],
            [() => q.launch(saxpy, { teams: 1 }, [2 ** 33, 1, b, b]).done, 'INVALID_ARGUMENT', /'n' \(i32\)/],
            [
              () => q.launch(saxpy, { teams: 1 }, [4, '1', b, b] as never).done,
              'INVALID_ARGUMENT',
              /'a' \(f32\).*string/,
            ],
            [
              () => q.launch(saxpy, { teams: 1 }, [4, 1, 1024, b] as never).done,
              'INVALID_ARGUMENT',
              /'x' \(ptr\).*Buffer/,
            ],
            ...(sum
              ? ([
                  [() => q.launch(sum, { teams: 1 }, [1, 2n, b]).done, 'INVALID_ARGUMENT', /'a' \(i64\).*bigint/],
                  [() => q.launch(sum, { teams: 1 }, [2n ** 64n, 2n, b]).done, 'INVALID_ARGUMENT', /'a' \(i64\)/],
                ] as [() => Promise<void>, string, RegExp][])
              : []),
            [() => q.launch(saxpy, { teams: 0 }, [4, 1, b, b]).done, 'INVALID_ARGUMENT', /grid.teams/],
            [() => q.launch(saxpy, { teams: 2.5 }, [4, 1, b, b]).done, 'INVALID_ARGUMENT', /grid.teams/],
            [() => q.launch(saxpy, undefined as never, [4, 1, b, b]).done, 'INVALID_ARGUMENT', /grid.teams/],
            [() => q.launch(saxpy, { teams: 1, threads: 0 }, [4, 1, b, b]).done, 'INVALID_ARGUMENT', /grid.threads/],
            [() => q.launch('saxpy' as never, { teams: 1 }, []).done, 'INVALID_ARGUMENT', /Kernel/],
          ];
          for (const [launch, code, message] of cases) {
            await rejectsWith(launch(), code, message);
            await rejectsWith(q.finish(), code);
          }
        });
        const freed = await device.alloc(16);
        await freed.free();
        await rejectsWith(q.launch(saxpy, { teams: 1 }, [4, 1, freed, freed]).done, 'INVALID_BUFFER', /'x'.*freed/);
        await q.finish().catch(() => {});
        if (target.peer) {
          const foreign = await target.peer.alloc(16);
          await rejectsWith(
            q.launch(saxpy, { teams: 1 }, [4, 1, foreign, foreign]).done,
            'INVALID_BUFFER',
            /'x'.*device/,
          );
          await q.finish().catch(() => {});
          await foreign.free();
        }
      });

      it('passes pointers into buffers (buffer.at) and refuses ones beyond the end', async () => {
        const iota = await kernel('iota_i32');
        // 256: the largest pointer alignment a device may ask for (WebGPU's bound on minStorageBufferOffsetAlignment).
        await withBuffer(512, async (buffer) => {
          const q = device.queue();
          q.write(buffer, new Int32Array(128).fill(-1));
          q.launch(iota, { teams: 2 }, [4, buffer.at(256)]);
          const out = new Int32Array(128);
          q.read(buffer, out);
          await q.finish();
          const expected = new Array(128).fill(-1);
          expected.splice(64, 4, 0, 1, 2, 3);
          assert.deepEqual([...out], expected);
          await rejectsWith(q.launch(iota, { teams: 1 }, [0, buffer.at(513)]).done, 'OUT_OF_BOUNDS', /pointer into/);
          await rejectsWith(q.finish(), 'OUT_OF_BOUNDS');
          await rejectsWith(q.launch(iota, { teams: 1 }, [0, buffer.at(-4)]).done, 'INVALID_ARGUMENT', /offset/);
          await q.finish().catch(() => {});
        });
      });

      it('clamps threads to the device limit, as OpenMP thread_limit', async () => {
        const recordGrid = await kernel('record_grid');
        await withBuffer(16, async (out) => {
          const q = device.queue();
          q.launch(recordGrid, { teams: 1, threads: 1_000_000 }, [out]);
          const grid = new Int32Array(4);
          q.read(out, grid);
          await q.finish();
          assert.equal(grid[3], Math.min(1_000_000, device.info.maxThreadsPerTeam));
        });
      });
    });

    describe('traps', () => {
      const cases: [string, number[], RegExp][] = [
        ['trap_abort', [1], /trap_abort.*flag must be zero.*kernels.*\.ts:\d+:\d+/],
        ['trap_unreachable', [], /trap_unreachable.*unreachable/],
        ['trap_oob', [0xfffffff0], /trap_oob.*out of bounds/],
      ];
      for (const [name, args, message] of cases) {
        it(`fails a launch of ${name} with KERNEL_TRAP and keeps the device working`, async (t) => {
          if (lacking(t, device, 'traps')) return;
          const trap = await kernel(name);
          const iota = await kernel('iota_i32');
          await withBuffer(64, async (b) => {
            const q = device.queue();
            await rejectsWith(q.launch(trap, { teams: 4 }, args).done, 'KERNEL_TRAP', message);
            await rejectsWith(q.finish(), 'KERNEL_TRAP');
            q.launch(iota, { teams: 2 }, [16, b]);
            const out = new Int32Array(16);
            q.read(b, out);
            await q.finish();
            assert.deepEqual(
              Array.from(out),
              Array.from({ length: 16 }, (_, i) => i),
            );
          });
        });
      }
    });

    describe('queues and events', () => {
      it('keeps order within a queue', async () => {
        const add = await kernel('add_i32');
        await withBuffer(4 * 256, async (b) => {
          const q = device.queue();
          q.write(b, new Int32Array(256));
          for (let i = 1; i <= 50; i++) q.launch(add, { teams: 3 }, [256, i, b]);
          const out = new Int32Array(256);
          q.read(b, out);
          q.write(b, new Int32Array(256).fill(-1)); // after the read: must not be seen by it
          await q.finish();
          assert.ok(
            out.every((v) => v === 1275),
            `every element is 1+2+...+50, got ${out[0]}`,
          );
        });
      });

      it('skips the operations behind a failure and reports it once on finish()', async () => {
        const iota = await kernel('iota_i32');
        await withBuffer(16, async (b) => {
          const q = device.queue();
          q.write(b, new Int32Array(4).fill(7));
          const { event: failed, code } = await failingOp(q, b);
          const skipped = q.launch(iota, { teams: 1 }, [4, b]);
          await rejectsWith(failed.done, code);
          await rejectsWith(skipped.done, code);
          await rejectsWith(q.finish(), code);
          await q.finish(); // cleared
          const out = new Int32Array(4);
          q.read(b, out);
          await q.finish();
          assert.deepEqual(Array.from(out), [7, 7, 7, 7], 'the skipped kernel did not run');
        });
      });

      it('records events that complete after the work before them', async () => {
        const busy = await kernel('busy');
        await withBuffer(8, async (b) => {
          const q = device.queue();
          q.launch(busy, { teams: 1 }, [3_000_000, b]);
          const event = q.record();
          assert.equal(event.query(), false, 'the event is pending while the kernel runs');
          assert.equal(q.query(), false);
          await event.done;
          assert.equal(event.query(), true);
          await q.finish();
          assert.equal(q.query(), true);
        });
      });

      it('orders one queue after an event of another (wait)', async () => {
        const busy = await kernel('busy');
        const iota = await kernel('iota_i32');
        await withBuffer(4 * 64, async (b) => {
          await withBuffer(8, async (scratch) => {
            const q1 = device.queue();
            const q2 = device.queue();
            q1.launch(busy, { teams: 1 }, [2_000_000, scratch]);
            q1.launch(iota, { teams: 4 }, [64, b]);
            const written = q1.record();
            q2.wait(written);
            const out = new Int32Array(64);
            q2.read(b, out);
            await q2.finish();
            assert.deepEqual(
              Array.from(out),
              Array.from({ length: 64 }, (_, i) => i),
            );
            await q1.finish();
          });
        });
      });

      it('runs queues concurrently: a kernel waiting on a flag is released by another queue', async (t) => {
        if (lacking(t, device, 'concurrentQueues')) return;
        const waitFlag = await kernel('wait_flag');
        await withBuffer(16, async (b) => {
          const setup = device.queue();
          setup.write(b, new Int32Array(4));
          await setup.finish();
          const waiting = device.queue();
          const done = waiting.launch(waitFlag, { teams: 1 }, [b, 2_000_000_000, b]);
          // The flag lives in the first word; `done` overwrites it with 1 (released) or 2 (gave up).
          const releaser = device.queue();
          releaser.write(b, new Int32Array([1]));
          await releaser.finish();
          await done.done;
          const out = new Int32Array(1);
          releaser.read(b, out);
          await releaser.finish();
          assert.equal(out[0], 1, 'the waiting kernel saw the flag set by the other queue');
        });
      });

      it('propagates a failed event to the queue that waits on it', async () => {
        const q1 = device.queue();
        const q2 = device.queue();
        const scratch = await device.alloc(16);
        const { code } = await failingOp(q1, scratch);
        const failed = q1.record();
        const waited = q2.wait(failed);
        await rejectsWith(waited.done, code);
        await rejectsWith(q2.finish(), code);
        await rejectsWith(q1.finish(), code);
        await scratch.free();
        await rejectsWith(Promise.resolve(q2.wait('event' as never).done), 'INVALID_ARGUMENT', /Event/);
        await q2.finish().catch(() => {});
      });

      it('never leaves rejections unhandled when events are ignored', async () => {
        const q = device.queue();
        const freed = await device.alloc(8);
        await freed.free();
        q.write(freed, new Uint8Array(1));
        q.read(freed, new Uint8Array(1));
        q.launch('nothing' as never, { teams: 1 }, []);
        await rejectsWith(q.finish(), 'INVALID_BUFFER');
        await new Promise((resolve) => setTimeout(resolve, 20));
        assert.deepEqual(unhandled, []);
      });

      it('defers free() until queued operations using the buffer are done', async () => {
        const busy = await kernel('busy');
        const buffer = await device.alloc(8);
        const q = device.queue();
        const running = q.launch(busy, { teams: 1 }, [2_000_000, buffer]);
        const freed = buffer.free();
        assert.equal(buffer.freed, true, 'refused by new operations at once');
        await rejectsWith(q.read(buffer, new Uint8Array(8)).done, 'INVALID_BUFFER');
        await freed;
        assert.equal(running.query(), true, 'the launch completed before the memory was returned');
        await q.finish().catch(() => {});
      });
    });

    describe('libraries', () => {
      it('refuses invalid bundles and missing files', async () => {
        await rejectsWith(runtime.register(new Uint8Array([1, 2, 3])), 'INCOMPATIBLE_IMAGE');
        await rejectsWith(runtime.register('/nonexistent/kernels.offload'), 'NOT_FOUND', /nonexistent/);
        await rejectsWith(runtime.register(42 as never), 'INVALID_ARGUMENT');
      });

      it('defers unregister until in-flight launches finish, then refuses the library', async () => {
        const second = await runtime.register(target.bundle);
        const busy = await device.kernel(second, 'busy');
        await withBuffer(8, async (b) => {
          const q = device.queue();
          const running = q.launch(busy, { teams: 1 }, [3_000_000, b]);
          await second.unregister();
          assert.equal(running.query(), true, 'unregister waited for the launch');
          assert.equal(second.unregistered, true);
          await rejectsWith(device.kernel(second, 'busy'), 'INVALID_ARGUMENT', /unregistered/);
          await rejectsWith(q.launch(busy, { teams: 1 }, [1, b]).done, 'INVALID_ARGUMENT', /unregistered/);
          await q.finish().catch(() => {});
          await second.unregister(); // idempotent
        });
      });
    });

    describe('exact execution', () => {
      it('runs every team of mixed launches exactly once: 1-5 teams, pipelined and awaited, two queues', async () => {
        const countTeam = await kernel('count_team');
        await withBuffer(5 * 4, async (counts) => {
          const queues = [device.queue(), device.queue()];
          await queues[0]!.write(counts, new Int32Array(5)).done;
          const expected = new Array<number>(5).fill(0);
          for (let i = 0; i < 600; i++) {
            const teams = 1 + (i % 5);
            for (let t = 0; t < teams; t++) expected[t]!++;
            // One queue's launches may run beside the other's: the kernel adds atomically.
            const event = queues[i % 2]!.launch(countTeam, { teams }, [counts]);
            if (i % 7 === 0) await event.done;
          }
          await Promise.all(queues.map((q) => q.finish()));
          const out = new Int32Array(5);
          await queues[0]!.read(counts, out).done;
          assert.deepEqual([...out], expected);
          await Promise.all(queues.map((q) => q.destroy()));
        });
      });
    });

    describe('printing from kernels', () => {
      /** Runs `body` in a context of the target's runtime whose kernels' lines are collected. */
      const printing = async (
        body: (device: Device, say: Kernel, lines: KernelPrint[]) => Promise<void>,
      ): Promise<void> => {
        const lines: KernelPrint[] = [];
        const context = await runtime.createContext({ print: (line) => lines.push(line) });
        try {
          const own = context.devices[device.id]!;
          await body(own, await own.kernel(await context.register(target.bundle), 'say'), lines);
        } finally {
          await context.shutdown();
        }
      };

      it("delivers each team's print() lines in order, tagged, before the launch's event completes", async (t) => {
        if (!device.info.kernelPrint)
          return t.skip(`device ${device.id} (${device.info.name}) cannot print (info.kernelPrint is false)`);
        await printing(async (own, say, lines) => {
          const data = await own.alloc(32);
          const q = own.queue();
          await q.write(data, Float64Array.from([0.5, 1.5, 2.5, 3.5])).done;
          await q.launch(say, { teams: 4 }, [3, data, -1]).done;
          assert.equal(lines.length, 12, 'every line is there when the event completes');
          for (let team = 0; team < 4; team++) {
            const own = lines.filter((line) => line.team === team);
            assert.deepEqual(
              own.map((line) => line.text),
              [0, 1, 2].map((i) => `team, line, value: ${team}, ${i}, ${team + 0.5}`),
              `team ${team}'s lines, in its order`,
            );
          }
          for (const line of lines)
            assert.deepEqual([line.device, line.kernel, typeof line.queue], [device.id, 'say', 'number']);
          await data.free();
        });
      });

      it('keeps the lines printed before a trap, and bounds a flood with a count of what it dropped', async (t) => {
        if (!device.info.kernelPrint)
          return t.skip(`device ${device.id} (${device.info.name}) cannot print (info.kernelPrint is false)`);
        if (lacking(t, device, 'traps')) return;
        await printing(async (own, say, lines) => {
          const data = await own.alloc(32);
          const q = own.queue();
          await q.write(data, new Float64Array(4)).done;
          await rejectsWith(q.launch(say, { teams: 2 }, [2, data, 1]).done, 'KERNEL_TRAP');
          await q.finish().catch(() => {});
          assert.deepEqual(
            lines.filter((line) => line.team === 1).map((line) => line.text),
            ['team, line, value: 1, 0, 0', 'team, line, value: 1, 1, 0'],
            'the trapping team printed before it trapped',
          );
          lines.length = 0;
          await q.launch(say, { teams: 2 }, [20_000, data, -1]).done;
          const bytes = lines.reduce((sum, line) => sum + line.text.length, 0);
          assert.ok(
            bytes < 64 * 1024,
            `a launch printing 40,000 lines delivered ${lines.length} (${bytes} characters)`,
          );
          const dropped = lines.find((line) => line.team === -1);
          assert.match(dropped?.text ?? '', /\d+ more lines of this launch dropped/);
          await data.free();
        });
      });
    });

    describe('execution model: 3-D grids, team memory and barriers', () => {
      it('runs a 3-D grid of 3-D teams: every thread once, with its team and thread ids along x, y and z', async () => {
        const teams: [number, number, number] = [2, 3, 2];
        const threads: [number, number, number] = [3, 2, 2];
        const total = 12 * 12;
        await withBuffer((total + 8) * 4, async (out) => {
          const q = device.queue();
          q.launch(await kernel('grid3d'), { teams, threads }, [out]);
          const got = new Int32Array(total + 8);
          q.read(out, got);
          await q.finish();
          const expected: number[] = [];
          for (let tz = 0; tz < 2; tz++)
            for (let ty = 0; ty < 3; ty++)
              for (let tx = 0; tx < 2; tx++)
                for (let hz = 0; hz < 2; hz++)
                  for (let hy = 0; hy < 2; hy++)
                    for (let hx = 0; hx < 3; hx++)
                      expected.push(tx + 10 * ty + 100 * tz + 1000 * (hx + 10 * hy + 100 * hz));
          assert.deepEqual([...got.subarray(0, total)], expected);
          assert.deepEqual(
            [...got.subarray(total)],
            [...teams, 1, ...threads, 1],
            'numTeams(d) and numThreads(d), d = 0 to 3',
          );
        });
      });

      it('computes a team-wide prefix sum through team memory and barriers', async (t) => {
        const threads = 64;
        if (device.info.maxThreadsPerTeam < threads)
          return t.skip(`device ${device.id} has teams of at most ${device.info.maxThreadsPerTeam} threads`);
        const n = 1000;
        const input = Int32Array.from({ length: n }, (_, i) => ((i * 7919) % 201) - 100);
        await withBuffer(n * 4, (data) =>
          withBuffer(n * 4, async (out) => {
            const q = device.queue();
            q.write(data, input);
            q.launch(
              await kernel('team_scan'),
              { teams: Math.ceil(n / threads), threads, teamMemoryBytes: 2 * threads * 4 },
              [data, out, n],
            );
            const got = new Int32Array(n);
            q.read(out, got);
            await q.finish();
            const expected = new Int32Array(n);
            for (let i = 0; i < n; i++) expected[i] = (i % threads === 0 ? 0 : expected[i - 1]!) + input[i]!;
            assert.deepEqual(got, expected);
          }),
        );
      });

      it('refuses grids beyond the limits its info states, and malformed ones, with INVALID_ARGUMENT naming the limit', async () => {
        const info = device.info;
        assert.equal(info.maxTeamDims.length, 3);
        assert.equal(info.maxThreadDims.length, 3);
        assert.ok(info.maxTeamMemoryBytes >= 1024, `maxTeamMemoryBytes ${info.maxTeamMemoryBytes}`);
        const grid3d = await kernel('grid3d');
        await withBuffer(64, async (out) => {
          const q = device.queue();
          const cases: [Record<string, unknown>, RegExp][] = [
            // Beyond 2^31 - 1 (the host device's limit) a size is no i32: refused as such.
            [
              { teams: [1, 1, info.maxTeamDims[2] + 1] },
              /grid.teams( .*z = \d+ is more than \d+ \(maxTeamDims|\[2\] \(z\) must be an integer from 1 to 2147483647)/,
            ],
            [
              { teams: 1, threads: [1, info.maxThreadDims[1] + 1, 1] },
              /grid.threads .*(y = \d+ is more than \d+ \(maxThreadDims|maxThreadsPerTeam)/,
            ],
            [{ teams: 1, threads: [info.maxThreadsPerTeam, 2] }, /grid.threads .*(maxThreadsPerTeam|maxThreadDims)/],
            [
              { teams: 1, teamMemoryBytes: info.maxTeamMemoryBytes + 1 },
              /grid.teamMemoryBytes \d+ is more than .*maxTeamMemoryBytes/,
            ],
            [{ teams: [] }, /grid.teams must be a number or 1 to 3 dimensions/],
            [{ teams: [1, 2, 3, 4] }, /grid.teams must be a number or 1 to 3 dimensions/],
            [{ teams: [2, 0] }, /grid.teams\[1\] \(y\)/],
            [{ teams: [2 ** 16, 2 ** 16] }, /grid.teams .*(more than 2\^31 - 1|maxTeams)/],
            [{ teams: 1, teamMemoryBytes: -1 }, /grid.teamMemoryBytes/],
          ];
          for (const [grid, message] of cases) {
            await rejectsWith(q.launch(grid3d, grid as never, [out]).done, 'INVALID_ARGUMENT', message);
            await rejectsWith(q.finish(), 'INVALID_ARGUMENT');
          }
        });
      });
    });

    describe('calls from kernels to the program', () => {
      it("runs the program's host functions, sync and async, and gives the kernel their results", async (t) => {
        if (!device.info.hostCalls)
          return t.skip(`device ${device.id} (${device.info.name}) cannot call the program (info.hostCalls is false)`);
        runtime.hostFunctions.add('scale', (team, factor) => team * factor);
        runtime.hostFunctions.add('scale_later', async (team, factor) => {
          await new Promise((resolve) => setTimeout(resolve, 2));
          return team * factor + 0.5;
        });
        try {
          const callHost = await kernel('call_host');
          await withBuffer(4 * 8, async (out) => {
            const q = device.queue();
            for (const [which, expected] of [
              [0, [0, 2.5, 5, 7.5]],
              [1, [0.5, 3, 5.5, 8]],
            ] as const) {
              q.launch(callHost, { teams: 4, threads: 2 }, [which, 2.5, out]);
              const got = new Float64Array(4);
              q.read(out, got);
              await q.finish();
              assert.deepEqual([...got], expected, `host function ${which === 0 ? 'scale' : 'scale_later'}`);
            }
          });
        } finally {
          runtime.hostFunctions.delete('scale');
          runtime.hostFunctions.delete('scale_later');
        }
      });

      it('traps the kernel with the reason when the function throws or does not exist, and goes on', async (t) => {
        if (!device.info.hostCalls)
          return t.skip(`device ${device.id} (${device.info.name}) cannot call the program (info.hostCalls is false)`);
        runtime.hostFunctions.add('explode', () => {
          throw new Error('the program refuses');
        });
        try {
          const callHost = await kernel('call_host');
          await withBuffer(8, async (out) => {
            const q = device.queue();
            await rejectsWith(
              q.launch(callHost, { teams: 1 }, [2, 0, out]).done,
              'KERNEL_TRAP',
              /call_host.*the program refuses/,
            );
            await q.finish().catch(() => {});
            await rejectsWith(
              q.launch(callHost, { teams: 1 }, [3, 0, out]).done,
              'KERNEL_TRAP',
              /host function 'missing'.*hostFunctions.add/,
            );
            await q.finish().catch(() => {});
            runtime.hostFunctions.add('scale', (team, factor) => team + factor);
            q.launch(callHost, { teams: 1 }, [0, 4, out]);
            const got = new Float64Array(1);
            q.read(out, got);
            await q.finish();
            assert.equal(got[0], 4);
          });
        } finally {
          runtime.hostFunctions.delete('explode');
          runtime.hostFunctions.delete('scale');
        }
      });
    });

    describe('time limits', () => {
      it('fails a runaway launch with TIMEOUT naming the kernel and the limit; the device goes on with its memory intact', async (t) => {
        if (!device.info.launchTimeouts)
          return t.skip(
            `device ${device.id} (${device.info.name}) cannot stop a running launch (info.launchTimeouts is false)`,
          );
        const spin = await kernel('spin');
        const iota = await kernel('iota_i32');
        await withBuffer(64, async (kept) => {
          const q = device.queue();
          const data = Int32Array.from({ length: 16 }, (_, i) => 1000 + i);
          q.write(kept, data);
          await withBuffer(4, async (flag) => {
            q.write(flag, new Int32Array(1));
            const started = performance.now();
            await rejectsWith(
              q.launch(spin, { teams: 2, timeoutMs: 100 }, [flag]).done,
              'TIMEOUT',
              /kernel 'spin' .*time limit of 100 ms/,
            );
            const took = performance.now() - started;
            assert.ok(took >= 100 && took < 10_000, `it failed after ${took.toFixed(0)} ms`);
            await rejectsWith(q.finish(), 'TIMEOUT');
          });
          const out = new Int32Array(16);
          q.read(kept, out);
          await q.finish();
          assert.deepEqual(out, data, 'device memory is intact');
          await withBuffer(64, async (fresh) => {
            q.launch(iota, { teams: 4 }, [16, fresh]);
            q.read(fresh, out);
            await q.finish();
            assert.deepEqual(
              [...out],
              Array.from({ length: 16 }, (_, i) => i),
              'the next launch runs',
            );
          });
        });
      });

      it('times a launch from when it begins to run, not while it waits for busy workers', async (t) => {
        if (!device.info.launchTimeouts)
          return t.skip(
            `device ${device.id} (${device.info.name}) cannot stop a running launch (info.launchTimeouts is false)`,
          );
        const spin = await kernel('spin');
        const iota = await kernel('iota_i32');
        await withBuffer(4, async (flag) => {
          await withBuffer(64, async (out) => {
            const busy = device.queue();
            const waiting = device.queue();
            await busy.write(flag, new Int32Array(1)).done;
            // Every worker spins (one team each) until the flag is set, well past the other
            // launch's limit; that launch then runs in an instant and must not have timed out.
            const spinning = busy.launch(spin, { teams: device.info.computeUnits }, [flag]);
            const limited = waiting.launch(iota, { teams: 1, timeoutMs: 150 }, [16, out]);
            await new Promise((resolve) => setTimeout(resolve, 600));
            await device.queue().write(flag, new Int32Array([1])).done;
            await spinning.done;
            await limited.done;
            const result = new Int32Array(16);
            await waiting.read(out, result).done;
            assert.deepEqual(
              [...result],
              Array.from({ length: 16 }, (_, i) => i),
            );
            await Promise.all([busy.destroy(), waiting.destroy()]);
          });
        });
      });

      it('refuses timeoutMs where the device cannot stop a launch, and bad limits anywhere', async () => {
        const iota = await kernel('iota_i32');
        await withBuffer(64, async (buffer) => {
          const q = device.queue();
          for (const bad of [0, -5, 1.5, 2 ** 31, '100']) {
            await rejectsWith(
              q.launch(iota, { teams: 1, timeoutMs: bad as never }, [16, buffer]).done,
              'INVALID_ARGUMENT',
              /timeoutMs/,
            );
            await q.finish().catch(() => {});
          }
          const limited = q.launch(iota, { teams: 1, timeoutMs: 60_000 }, [16, buffer]);
          if (device.info.launchTimeouts) await limited.done;
          else await rejectsWith(limited.done, 'UNSUPPORTED', /cannot stop a running launch/);
          await q.finish().catch(() => {});
        });
      });
    });

    describe('liboffload operations (fill, rectangles, timing, host functions, memory and kernel info, mapped memory)', () => {
      /** The whole of `buffer`, read back. */
      const contents = async (buffer: Buffer): Promise<Uint8Array> => {
        const out = new Uint8Array(buffer.byteLength);
        await device.queue().read(buffer, out).done;
        return out;
      };
      const patterned = (bytes: number): Uint8Array => Uint8Array.from({ length: bytes }, (_, i) => (i * 29 + 7) & 255);

      it('says what the device can do in info.capabilities, and the device does just that', async () => {
        const caps = device.info.capabilities;
        for (const name of ['i64', 'f64', 'traps', 'concurrentQueues', 'atomics', 'mappedMemory'] as const)
          assert.equal(typeof caps[name], 'boolean', name);
        assert.equal(
          caps.maxTeamMemoryBytes,
          device.info.maxTeamMemoryBytes,
          'capabilities.maxTeamMemoryBytes is the limit a launch is checked against',
        );
        // A kernel that needs a capability exists in the device's image exactly when the device has
        // it; one the build could not give the device is INCOMPATIBLE_IMAGE, quoting the build's note.
        for (const [capability, name] of [
          ['i64', 'sum_i64'],
          ['f64', 'scale_f64'],
          ['traps', 'trap_unreachable'],
        ] as const) {
          const found = await device.kernel(library, name).then(
            () => true,
            (error: unknown) =>
              OffloadError.is(error, 'NOT_FOUND') || OffloadError.is(error, 'INCOMPATIBLE_IMAGE')
                ? false
                : Promise.reject(error),
          );
          assert.equal(
            found,
            caps[capability],
            `kernel ${name} on a device whose capabilities.${capability} is ${caps[capability]}`,
          );
        }
        assert.equal(caps.mappedMemory, device.info.memoryKinds.includes('shared'));
        if (device.info.plugin === 'remote')
          assert.equal(caps.mappedMemory, false, "memory across a network is never the program's");
      });

      it('fills with a byte, and with 2-, 4- and 8-byte patterns from any offset, leaving the rest untouched', async () => {
        await withBuffer(1003, async (buffer) => {
          const q = device.queue();
          const base = patterned(1003);
          q.write(buffer, base);
          q.fill(buffer, 0xab, 1, 10);
          q.fill(buffer, Uint16Array.of(0x1234), 13, 20);
          q.fill(buffer, Float32Array.of(1.5), 35, 400);
          q.fill(buffer, BigInt64Array.of(-2n), 443, 64);
          q.fill(buffer, 0, 600); // the rest
          await q.finish();
          const expected = base.slice();
          expected.fill(0xab, 1, 11);
          const repeat = (pattern: Uint8Array, at: number, bytes: number) => {
            for (let i = 0; i < bytes; i++) expected[at + i] = pattern[i % pattern.length]!;
          };
          repeat(new Uint8Array(Uint16Array.of(0x1234).buffer), 13, 20);
          repeat(new Uint8Array(Float32Array.of(1.5).buffer), 35, 400);
          repeat(new Uint8Array(BigInt64Array.of(-2n).buffer), 443, 64);
          expected.fill(0, 600);
          assert.deepEqual(await contents(buffer), expected);
        });
      });

      it('fills a large buffer whole (the default range), and refuses bad patterns and ranges', async () => {
        const bytes = 3 * 1024 * 1024 + 8;
        await withBuffer(bytes, async (buffer) => {
          const q = device.queue();
          await q.fill(buffer, Int32Array.of(-559038737)).done; // 0xdeadbeef
          const back = new Int32Array((await contents(buffer)).buffer);
          assert.equal(back.length, bytes / 4);
          assert.ok(
            back.every((value) => value === -559038737),
            'every word holds the pattern',
          );
          await rejectsWith(q.fill(buffer, 256).done, 'INVALID_ARGUMENT', /0 to 255/);
          await q.finish().catch(() => {});
          await rejectsWith(q.fill(buffer, new Uint8Array(0)).done, 'INVALID_ARGUMENT', /1 to 4096 bytes/);
          await q.finish().catch(() => {});
          await rejectsWith(q.fill(buffer, new Uint8Array(16), 0, 8).done, 'INVALID_ARGUMENT', /more than the 8 bytes/);
          await q.finish().catch(() => {});
          await rejectsWith(q.fill(buffer, 'x' as never).done, 'INVALID_ARGUMENT', /pattern/);
          await q.finish().catch(() => {});
          await rejectsWith(q.fill(buffer, Uint32Array.of(1), 0, 6).done, 'INVALID_ARGUMENT', /multiple/);
          await q.finish().catch(() => {});
          await rejectsWith(q.fill(buffer, 1, bytes - 4, 8).done, 'OUT_OF_BOUNDS');
          await q.finish().catch(() => {});
        });
      });

      it('says how much memory is free (memoryInfo), and an allocation takes its size from it', async () => {
        const before = await device.memoryInfo();
        assert.ok(before.totalBytes > 0 && before.freeBytes <= before.totalBytes, JSON.stringify(before));
        assert.ok(before.largestFreeBlockBytes <= before.freeBytes, JSON.stringify(before));
        assert.ok(
          before.totalBytes <= device.info.memoryBytes + 2 ** 20,
          `total ${before.totalBytes} against info.memoryBytes ${device.info.memoryBytes}`,
        );
        const size = 1024 * 1024;
        const buffer = await device.alloc(size);
        const during = await device.memoryInfo();
        const taken = before.freeBytes - during.freeBytes;
        assert.ok(taken >= size && taken <= size + 64 * 1024, `an allocation of ${size} bytes took ${taken}`);
        await buffer.free();
        assert.equal((await device.memoryInfo()).freeBytes, before.freeBytes, 'freeing gives it back');
      });

      it('times events on the device clock: elapsedSince measures the work between them', async () => {
        const q = device.queue();
        const start = q.record({ timing: true });
        q.hostFunction(() => new Promise((resolve) => setTimeout(resolve, 40)));
        const end = q.record({ timing: true });
        const ms = await end.elapsedSince(start);
        assert.ok(ms >= 35 && ms < 5000, `${ms} ms across a 40 ms host function`);
        assert.ok((await start.elapsedSince(start)) === 0);
        const plain = q.record();
        await rejectsWith(end.elapsedSince(plain), 'INVALID_ARGUMENT', /timing: true/);
        await rejectsWith(end.elapsedSince('start' as never), 'INVALID_ARGUMENT', /Event/);
        await rejectsWith(Promise.resolve(q.record({ timing: 'yes' as never }).done), 'INVALID_ARGUMENT', /timing/);
        if (target.peer) {
          const other = target.peer.queue().record({ timing: true });
          const sameClock = (target.peer.info.plugin === 'remote') === (device.info.plugin === 'remote');
          if (sameClock) assert.equal(typeof (await end.elapsedSince(other)), 'number');
          else await rejectsWith(end.elapsedSince(other), 'INVALID_ARGUMENT', /clocks differ/);
        }
        await q.finish();
      });

      it('runs host functions in queue order on the program thread; a throw fails only its event', async () => {
        const iota = await kernel('iota_i32');
        await withBuffer(64, async (buffer) => {
          const q = device.queue();
          const order: string[] = [];
          q.launch(iota, { teams: 2 }, [16, buffer]);
          let seen = -1;
          const ran = q.hostFunction(async () => {
            // The launch before it has completed: another queue reads its result.
            const out = new Int32Array(16);
            await device.queue().read(buffer, out).done;
            seen = out[15]!;
            await new Promise((resolve) => setTimeout(resolve, 20));
            order.push('host function');
          });
          const after = q.fill(buffer, 0);
          void after.done.then(() => order.push('fill after it'));
          await ran.done;
          await after.done;
          assert.equal(seen, 15);
          assert.deepEqual(order, ['host function', 'fill after it']);
          const cause = new RangeError('host side broke');
          const thrown = q.hostFunction(() => {
            throw cause;
          });
          const rejected = q.hostFunction(() => Promise.reject(new Error('async host side broke')));
          const goesOn = q.write(buffer, Int32Array.of(7));
          const error = await rejectsWith(thrown.done, 'HOST_FUNCTION_FAILED', /host side broke/);
          assert.equal(error.cause, cause);
          await rejectsWith(rejected.done, 'HOST_FUNCTION_FAILED', /async host side broke/);
          await goesOn.done;
          await q.finish(); // nothing sticky: the queue went on
          const out = new Int32Array(1);
          await q.read(buffer, out).done;
          assert.equal(out[0], 7);
          await rejectsWith(q.hostFunction('fn' as never).done, 'INVALID_ARGUMENT', /function/);
          await q.finish().catch(() => {});
          // Behind a failure, a host function is skipped like any operation.
          const { event: failed } = await failingOp(q, buffer);
          let called = false;
          const skipped = q.hostFunction(() => {
            called = true;
          });
          await failed.done.catch(() => {});
          await skipped.done.catch(() => {});
          assert.equal(called, false);
          await q.finish().catch(() => {});
        });
      });

      it('copies rectangles with pitches both ways and within the device (writeRect, readRect, copyRect)', async () => {
        await withBuffer(200, async (buffer) => {
          const q = device.queue();
          q.fill(buffer, 0xee);
          // 3 rows of 5 bytes, packed on the host, rows 11 bytes apart from offset 3 in the buffer.
          const rows = patterned(15);
          await q.writeRect(buffer, rows, { width: 5, height: 3, dst: { offset: 3, rowPitch: 11 } }).done;
          const expected = new Uint8Array(200).fill(0xee);
          for (let r = 0; r < 3; r++) expected.set(rows.subarray(r * 5, r * 5 + 5), 3 + r * 11);
          assert.deepEqual(await contents(buffer), expected);
          // Read those rows back into a host array with a pitch of 7, from offset 1.
          const host = new Uint8Array(1 + 2 * 7 + 5).fill(1);
          await q.readRect(buffer, host, {
            width: 5,
            height: 3,
            src: { offset: 3, rowPitch: 11 },
            dst: { offset: 1, rowPitch: 7 },
          }).done;
          for (let r = 0; r < 3; r++)
            assert.deepEqual(host.subarray(1 + r * 7, 6 + r * 7), rows.subarray(r * 5, r * 5 + 5));
          assert.equal(host[0], 1);
          assert.equal(host[6], 1, 'bytes between rows are untouched');
          // Two slices of 2 rows of 3 bytes, within the device, from offset 3 to offset 120.
          const rect = {
            width: 3,
            height: 2,
            depth: 2,
            src: { offset: 3, rowPitch: 11, slicePitch: 22 },
            dst: { offset: 120, rowPitch: 4, slicePitch: 9 },
          };
          await q.copyRect(buffer, buffer, rect).done;
          const copied = await contents(buffer);
          for (let z = 0; z < 2; z++) {
            for (let r = 0; r < 2; r++) {
              const from = 3 + z * 22 + r * 11;
              assert.deepEqual(
                copied.subarray(120 + z * 9 + r * 4, 123 + z * 9 + r * 4),
                expected.subarray(from, from + 3),
                `slice ${z} row ${r}`,
              );
            }
          }
          assert.equal(copied[123], 0xee, 'the byte after a row stays');
          await rejectsWith(
            q.writeRect(buffer, rows, { width: 5, height: 3, dst: { rowPitch: 4 } }).done,
            'INVALID_ARGUMENT',
            /rowPitch/,
          );
          await q.finish().catch(() => {});
          await rejectsWith(
            q.writeRect(buffer, rows, { width: 5, height: 3, dst: { offset: 190 } }).done,
            'OUT_OF_BOUNDS',
            /dst side/,
          );
          await q.finish().catch(() => {});
          await rejectsWith(
            q.readRect(buffer, new Uint8Array(4), { width: 5, height: 1 }).done,
            'OUT_OF_BOUNDS',
            /dst side/,
          );
          await q.finish().catch(() => {});
          await rejectsWith(q.copyRect(buffer, buffer, { width: -1, height: 1 }).done, 'INVALID_ARGUMENT', /width/);
          await q.finish().catch(() => {});
          // A rectangle with a zero extent is refused at once, however many slices it names
          // (liboffload: olMemcpyRect's INVALID_SIZE).
          await rejectsWith(
            q.copyRect(buffer, buffer, { width: 4, height: 0, depth: 2 ** 40 }).done,
            'INVALID_ARGUMENT',
            /at least 1/,
          );
          await q.finish().catch(() => {});
          await rejectsWith(
            q.readRect(buffer, new Uint8Array(0), { width: 0, height: 1 }).done,
            'INVALID_ARGUMENT',
            /0 x 1 x 1/,
          );
          await q.finish().catch(() => {});
        });
      });

      it('describes a loaded kernel (kernel.info)', async () => {
        const saxpy = await kernel('saxpy');
        const info = saxpy.info;
        assert.equal(info.name, 'saxpy');
        assert.deepEqual(info.params, saxpy.params);
        assert.ok(
          device.info.imageFormats.includes(info.imageFormat),
          `${info.imageFormat} of ${device.info.imageFormats.join(', ')}`,
        );
        assert.equal(info.maxTeams, device.info.maxTeams);
        assert.equal(info.maxThreadsPerTeam, device.info.maxThreadsPerTeam);
        // The wasm image keeps its strings (print's messages) as static data; a wgsl image keeps none.
        if (info.imageFormat === 'wasm')
          assert.ok(info.staticDataBytes > 0, `${info.staticDataBytes} bytes of static data`);
        else assert.equal(info.staticDataBytes, 0);
      });

      it('keeps module-level data in device memory: library.global() gives it for copies and kernel arguments, one copy per device', async () => {
        assert.deepEqual(library.globals, ['tallies']);
        await rejectsWith(library.global(device, 'nothing'), 'NOT_FOUND', /no global 'nothing' \(it has: tallies\)/);
        await rejectsWith(library.global('device' as never, 'tallies'), 'INVALID_ARGUMENT', /Device/);
        if (!device.info.imageFormats.includes('wasm')) {
          await rejectsWith(library.global(device, 'tallies'), 'UNSUPPORTED', /no device globals/);
          return;
        }
        const pointer = await library.global(device, 'tallies');
        const tallies = pointer.buffer;
        assert.equal(tallies.byteLength, 32);
        assert.equal(tallies.isGlobal, true);
        const q = device.queue();
        const read = async (): Promise<number[]> => {
          const out = new Int32Array(8);
          await q.read(tallies, out).done;
          return [...out];
        };
        await q.write(tallies, Int32Array.of(10, 20, 30, 40, 50, 60, 70, 80)).done; // as the source initialises it (other cases may have run)
        // Every team of a launch adds to the one copy; so does a second launch.
        await q.launch(await kernel('tally_teams'), { teams: 16 }, []).done;
        await q.launch(await kernel('tally_teams'), { teams: 8 }, []).done;
        assert.deepEqual(await read(), [13, 23, 33, 43, 53, 63, 73, 83]);
        // As a kernel argument (a pointer), and through fill and copies like any buffer.
        await q.launch(await kernel('add_i32'), { teams: 2 }, [8, 100, pointer]).done;
        assert.deepEqual(await read(), [113, 123, 133, 143, 153, 163, 173, 183]);
        await q.fill(tallies, Int32Array.of(5), 16).done;
        assert.deepEqual(await read(), [113, 123, 133, 143, 5, 5, 5, 5]);
        // The same memory for every call on this device.
        const again = await library.global(device, 'tallies');
        const out = new Int32Array(8);
        await q.read(again.buffer, out).done;
        assert.deepEqual([...out], [113, 123, 133, 143, 5, 5, 5, 5]);
        await rejectsWith(tallies.free(), 'INVALID_BUFFER', /device global/);
        await q.finish();
      });

      it('says under OFFLOAD_DEBUG what it decided and which errors it dropped', async () => {
        const lines: string[] = [];
        const { enabled, sink } = debug;
        debug.enabled = true;
        debug.sink = (line) => lines.push(line);
        try {
          const lib = await runtime.register(target.bundle);
          await device.kernel(lib, 'iota_i32');
          await withBuffer(16, async (buffer) => {
            const q = device.queue();
            const { event, code } = await failingOp(q, buffer);
            await event.done.catch(() => {});
            await q.destroy(); // its failure is reported nowhere else
            const queueLine = lines.find((line) => line.includes(`queue ${q.id} of device ${device.id}`));
            assert.ok(queueLine?.includes(`the error was dropped: ${code}`), lines.join('\n'));
          });
          await lib.unregister();
        } finally {
          debug.enabled = enabled;
          debug.sink = sink;
        }
        const format = device.info.imageFormats[0]!;
        assert.ok(
          lines.some(
            (line) =>
              line.startsWith(`offload-ts debug: device ${device.id}: library`) && line.includes(`its ${format} image`),
          ),
          lines.join('\n'),
        );
      });

      it('maps shared memory: hostView() is the buffer itself where the device has mapped memory, UNSUPPORTED elsewhere', async () => {
        if (!device.info.capabilities.mappedMemory) {
          await rejectsWith(device.alloc(64, { kind: 'shared' }), 'UNSUPPORTED', /shared/);
          await withBuffer(64, async (buffer) => {
            assert.throws(
              () => buffer.hostView(),
              (e: OffloadError) => e.code === 'UNSUPPORTED' && /mappedMemory/.test(e.message),
            );
          });
          return;
        }
        const buffer = await device.alloc(64, { kind: 'shared' });
        const view = buffer.hostView(Int32Array);
        assert.equal(view.length, 16);
        for (let i = 0; i < 16; i++) view[i] = i * 10;
        const q = device.queue();
        await q.launch(await kernel('add_i32'), { teams: 2 }, [16, 1, buffer]).done;
        assert.deepEqual(
          [...view],
          Array.from({ length: 16 }, (_, i) => i * 10 + 1),
          'the kernel wrote into the view (zero copy)',
        );
        await q.write(buffer, Int32Array.of(-5)).done;
        assert.equal(view[0], -5);
        assert.equal(buffer.hostView().byteLength, 64);
        assert.equal(buffer.hostView(Float64Array).length, 8);
        const odd = await device.alloc(12, { kind: 'shared' });
        assert.throws(
          () => odd.hostView(Float64Array),
          (e: OffloadError) => e.code === 'INVALID_ARGUMENT' && /whole number/.test(e.message),
        );
        await odd.free();
        assert.throws(
          () => buffer.hostView('x' as never),
          (e: OffloadError) => e.code === 'INVALID_ARGUMENT',
        );
        await buffer.free();
        assert.throws(
          () => buffer.hostView(),
          (e: OffloadError) => e.code === 'INVALID_BUFFER',
        );
        await withBuffer(8, async (plain) => {
          assert.throws(
            () => plain.hostView(),
            (e: OffloadError) => e.code === 'UNSUPPORTED' && /'device' memory/.test(e.message),
          );
        });
      });
    });

    describe('lifetimes', () => {
      it('destroy() lets a queue finish its work, then refuses more with INVALID_ARGUMENT', async () => {
        const iota = await kernel('iota_i32');
        await withBuffer(64, async (buffer) => {
          const q = device.queue();
          q.launch(iota, { teams: 2 }, [16, buffer]);
          const out = new Int32Array(16);
          const read = q.read(buffer, out);
          await q.destroy();
          assert.equal(read.query(), true, 'the work enqueued before destroy() completed first');
          assert.deepEqual(
            [...out],
            Array.from({ length: 16 }, (_, i) => i),
          );
          await q.destroy(); // idempotent
          await rejectsWith(q.write(buffer, new Int32Array(1)).done, 'INVALID_ARGUMENT', /destroyed/);
          await rejectsWith(q.record().done, 'INVALID_ARGUMENT', /destroyed/);
          await rejectsWith(q.finish(), 'INVALID_ARGUMENT', /destroyed/);
        });
      });

      it('releases queues, buffers and libraries at the end of an `await using` block', async () => {
        let kept: { q: Queue; b: Buffer; lib: Library };
        {
          await using lib = await runtime.register(target.bundle);
          await using b = await device.alloc(16);
          await using q = device.queue();
          await q.write(b, new Uint8Array(16)).done;
          kept = { q, b, lib };
        }
        assert.equal(kept.b.freed, true);
        assert.equal(kept.lib.unregistered, true);
        await rejectsWith(kept.q.record().done, 'INVALID_ARGUMENT', /destroyed/);
      });

      it('keeps contexts apart: each has its own memory, libraries and buffers, and ends on its own', async () => {
        const context = await runtime.createContext();
        const other = context.devices[device.id]!;
        assert.equal(other.info.name, device.info.name);
        const lib = await context.register(target.bundle);
        const iota = await other.kernel(lib, 'iota_i32');
        const mine = await device.alloc(64);
        const theirs = await other.alloc(64);
        const q = other.queue();
        q.launch(iota, { teams: 2 }, [16, theirs]);
        await rejectsWith(q.write(mine, new Uint8Array(4)).done, 'INVALID_BUFFER', /another runtime/);
        await q.finish().catch(() => {});
        await rejectsWith(q.launch(iota, { teams: 1 }, [16, mine]).done, 'INVALID_BUFFER');
        await q.finish().catch(() => {});
        const out = new Int32Array(16);
        await other.queue().read(theirs, out).done;
        assert.equal(out[15], 15);
        await context.shutdown();
        await rejectsWith(other.alloc(8), 'DEVICE_LOST', /shut down/);
        // The parent and its buffer live on.
        await device.queue().write(mine, new Uint8Array(64).fill(3)).done;
        await mine.free();
      });
    });

    describe('shutdown', () => {
      it('is idempotent and makes every later call reject with DEVICE_LOST', async () => {
        const own = await setup();
        const lib = await own.runtime.register(own.bundle);
        const dev = own.device;
        const buffer = await dev.alloc(16);
        const q = dev.queue();
        const k = await dev.kernel(lib, 'iota_i32');
        await Promise.all([own.runtime.shutdown(), own.runtime.shutdown()]);
        await own.runtime.shutdown();
        await rejectsWith(dev.alloc(8), 'DEVICE_LOST', /shut down/);
        await rejectsWith(dev.kernel(lib, 'iota_i32'), 'DEVICE_LOST');
        await rejectsWith(own.runtime.register(own.bundle), 'DEVICE_LOST');
        await rejectsWith(q.launch(k, { teams: 1 }, [4, buffer]).done, 'DEVICE_LOST');
        await rejectsWith(q.finish(), 'DEVICE_LOST');
        await rejectsWith(buffer.free(), 'DEVICE_LOST');
        await rejectsWith(lib.unregister(), 'DEVICE_LOST');
        await own.cleanup?.();
      });
    });
  });
}
