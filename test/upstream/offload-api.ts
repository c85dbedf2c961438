/**
 * liboffload's API tests (llvm-project `offload/unittests/OffloadAPI/`), one `it` per upstream
 * test, each naming its file and TEST_P: the same calls through this package's API, the
 * upstream ASSERT_SUCCESS / ASSERT_ERROR / ASSERT_EQ as the expectation (liboffload's
 * OL_ERRC_INVALID_SIZE is INVALID_ARGUMENT here).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  type Buffer,
  type Device,
  type Event,
  type Kernel,
  type Library,
  type Queue,
  type Runtime,
} from '../../src/index.js';
import { rejectsWith } from '../conformance/suite.js';

export interface ApiTarget {
  runtime(): Promise<Runtime>;
  device(runtime: Runtime): Device;
  /** The fixture bundle (its `saxpy` stands in for upstream's `sequence` kernel). */
  bundle: string;
  cleanup?: () => Promise<void>;
}

export function upstreamOffloadApiSuite(kind: string, setup: () => Promise<ApiTarget>): void {
  describe(`llvm offload/unittests/OffloadAPI: ${kind}`, { timeout: 120_000 }, () => {
    let target: ApiTarget;
    let rt: Runtime;
    let dev: Device;
    let saxpy: Kernel;
    let library: Library;

    before(async () => {
      target = await setup();
      rt = await target.runtime();
      dev = target.device(rt);
      library = await rt.register(target.bundle);
      saxpy = await dev.kernel(library, 'saxpy');
    });
    after(async () => {
      await rt?.shutdown();
      await target?.cleanup?.();
    });

    /** olMemFillTest's test_body: alloc `size`, fill with `pattern`, every element reads back equal. */
    async function fillBody(pattern: Uint8Array, size: number): Promise<void> {
      const buffer = await dev.alloc(size);
      try {
        const queue = dev.queue();
        queue.fill(buffer, pattern, 0, size);
        const back = new Uint8Array(size);
        queue.read(buffer, back);
        await queue.finish();
        await queue.destroy();
        for (let i = 0; i < size; i++)
          if (back[i] !== pattern[i % pattern.length]) assert.fail(`byte ${i}: ${back[i]}`);
      } finally {
        await buffer.free();
      }
    }
    const le = (bytes: number, value: bigint) => {
      const out = new Uint8Array(bytes);
      for (let i = 0; i < bytes; i++) out[i] = Number((value >> BigInt(8 * i)) & 0xffn);
      return out;
    };

    const fills: [string, Uint8Array, number][] = [
      ['Success8', le(1, 0x42n), 1024],
      ['Success8NotMultiple4', le(1, 0x42n), 1023],
      ['Success16NotMultiple4', le(2, 0x4243n), 1022],
      ['Success32', le(4, 0xdeadbeefn), 1024],
      ['SuccessLarge', new Uint8Array(16).fill(0xff), 1024],
      ['SuccessLargeByteAligned', new Uint8Array(17).fill(0xff), 17 * 64],
      ['SuccessNonPow2PatternDevice', Uint8Array.of(0x11, 0x22, 0x33), 3 * 1000],
      ['SuccessNonPow2PatternDeviceSmall', Uint8Array.of(0x11, 0x22, 0x33), 3 * 2],
    ];
    for (const [name, pattern, size] of fills) {
      it(`memory/olMemFill.cpp ${name}: a ${pattern.length}-byte pattern over ${size} bytes`, () =>
        fillBody(pattern, size));
    }

    it('memory/olMemFill.cpp SuccessLargeByteAligned: a 17-byte pattern in phase across staged chunks', () =>
      fillBody(
        Uint8Array.from({ length: 17 }, (_, i) => i + 1),
        17 * 70_000,
      ));

    it('memory/olMemFill.cpp InvalidSizeNotMultipleOfPatternSize', async () => {
      const buffer = await dev.alloc(1025);
      const queue = dev.queue();
      await rejectsWith(queue.fill(buffer, le(2, 0x4242n), 0, 1025).done, 'INVALID_ARGUMENT', /not a multiple/);
      await queue.destroy();
      await buffer.free();
    });

    it('memory/olMemFill.cpp InvalidPatternSizeLargerThanFillSize', async () => {
      const buffer = await dev.alloc(4);
      const queue = dev.queue();
      await rejectsWith(
        queue.fill(buffer, le(8, 0x4242424242424242n), 0, 4).done,
        'INVALID_ARGUMENT',
        /pattern's 8 bytes are more than the 4 bytes to fill/,
      );
      await queue.destroy();
      await buffer.free();
    });

    /**
     * olWaitEventsTest: upstream's `sequence` kernel sets data[i] = data[i-1] + data[i-2], each
     * launch after waiting for the events named. Here a step copies data[i-2] into data[i] and
     * data[i-1] aside, then runs saxpy(1, 1, aside, data[i]) (elements 16 bytes apart, so that
     * every pointer is aligned on every device); data[0] = 0 and data[1] = 1 as upstream's first
     * launches write them.
     */
    async function sequence(queueOf: (i: number) => Queue, waits: (events: Event[], i: number) => Event[]) {
      const N = 16;
      const data = await dev.alloc(16 * N);
      const aside = await dev.alloc(16 * N);
      const older = await dev.alloc(16 * N);
      const queues = new Set<Queue>();
      try {
        const first = queueOf(0);
        queues.add(first);
        const start = new Float32Array(4 * N);
        start[4] = 1;
        first.write(data, start);
        const events: Event[] = [first.record()];
        for (let i = 2; i < N; i++) {
          const queue = queueOf(i);
          queues.add(queue);
          for (const event of waits(events, i)) queue.wait(event);
          // Through a second buffer: a WebGPU device copies only between two buffers.
          queue.copy(older, data, { srcOffset: 16 * (i - 2), dstOffset: 16 * i, byteLength: 4 });
          queue.copy(data, older, { srcOffset: 16 * i, dstOffset: 16 * i, byteLength: 4 });
          queue.copy(aside, data, { srcOffset: 16 * (i - 1), dstOffset: 16 * i, byteLength: 4 });
          queue.launch(saxpy, { teams: 1 }, [1, 1, aside.at(16 * i), data.at(16 * i)]);
          events.push(queue.record());
        }
        await events.at(-1)!.done; // olSyncEvent(Events[NUM_KERNELS - 1])
        const back = new Float32Array(4 * N);
        const reader = dev.queue();
        reader.read(data, back);
        await reader.finish();
        await reader.destroy();
        for (let i = 2; i < N; i++) assert.equal(back[4 * i], back[4 * (i - 1)]! + back[4 * (i - 2)]!, `Data[${i}]`);
        assert.equal(back[4 * 15], 610);
      } finally {
        for (const queue of queues) await queue.destroy();
        await data.free();
        await aside.free();
        await older.free();
      }
    }

    it('queue/olWaitEvents.cpp Success: each queue waits for the one before', () =>
      sequence(
        () => dev.queue(),
        (events) => [events.at(-1)!],
      ));

    it('queue/olWaitEvents.cpp SuccessSingleQueue', async () => {
      const queue = dev.queue();
      await sequence(
        () => queue,
        (events) => [events.at(-1)!],
      );
    });

    it('queue/olWaitEvents.cpp SuccessMultipleEvents: each queue waits for every event before', () =>
      sequence(
        () => dev.queue(),
        (events) => [...events],
      ));

    it('queue/olWaitEvents.cpp InvalidNullInnerEvent', async () => {
      const queue = dev.queue();
      await rejectsWith(queue.wait(null as never).done, 'INVALID_ARGUMENT', /must be an Event/);
      await queue.destroy();
    });

    it('memory/olMemAlloc.cpp SuccessAllocDevice, SuccessAllocHost; a zero size is INVALID_SIZE', async () => {
      const buffers: Buffer[] = [await dev.alloc(1024)];
      if (dev.info.memoryKinds.includes('host')) buffers.push(await dev.alloc(1024, { kind: 'host' }));
      for (const buffer of buffers) {
        assert.equal(buffer.byteLength, 1024);
        await buffer.free();
      }
      await rejectsWith(dev.alloc(0), 'INVALID_ARGUMENT', /at least 1 byte/);
    });

    it('memory/olMemcpyRect.cpp: a rectangle with a zero extent is INVALID_SIZE', async () => {
      const buffer = await dev.alloc(64);
      const queue = dev.queue();
      for (const rect of [
        { width: 0, height: 4 },
        { width: 4, height: 0 },
        { width: 4, height: 4, depth: 0 },
      ]) {
        await rejectsWith(queue.writeRect(buffer, new Uint8Array(64), rect).done, 'INVALID_ARGUMENT', /at least 1/);
        await queue.finish().catch(() => {});
      }
      await queue.destroy();
      await buffer.free();
    });

    /** A queue made, used by `body` and destroyed, whatever happens. */
    async function withQueue(body: (queue: Queue) => Promise<void>): Promise<void> {
      const queue = dev.queue();
      try {
        await body(queue);
      } finally {
        await queue.destroy();
      }
    }

    it('queue/olCreateQueue.cpp Success: a new queue, empty', () =>
      withQueue(async (queue) => {
        assert.equal(queue.device, dev);
        assert.equal(queue.query(), true);
      }));

    it('queue/olSyncQueue.cpp Success, queue/olWaitQueue.cpp Success: finish() after work, and on an empty queue', () =>
      withQueue(async (queue) => {
        await queue.finish();
        const buffer = await dev.alloc(64);
        queue.fill(buffer, Uint8Array.of(7), 0, 64);
        await queue.finish();
        assert.equal(queue.query(), true);
        await buffer.free();
      }));

    it('queue/olDestroyQueue.cpp Success; a destroyed queue refuses work (INVALID_ARGUMENT), destroying again is a no-op', async () => {
      const queue = dev.queue();
      await queue.destroy();
      await queue.destroy();
      await rejectsWith(
        queue.record().done,
        'INVALID_ARGUMENT',
        /was destroyed; make a new one with device\.queue\(\)/,
      );
      await rejectsWith(queue.finish(), 'INVALID_ARGUMENT', /was destroyed/);
    });

    it("queue/olGetQueueInfo.cpp SuccessDevice, SuccessEmpty: the queue's device; query() says whether it is empty", () =>
      withQueue(async (queue) => {
        assert.equal(queue.device, dev);
        assert.equal(typeof queue.query(), 'boolean');
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        queue.hostFunction(() => gate);
        assert.equal(queue.query(), false, 'work is pending behind the host function');
        release();
        await queue.finish();
        assert.equal(queue.query(), true);
      }));

    it('queue/olLaunchHostFunction.cpp Success, SuccessSequence: host functions run in queue order', () =>
      withQueue(async (queue) => {
        await queue.hostFunction(() => {}).done;
        const buff = new Uint32Array(16);
        buff.set([1, 1]);
        for (let i = 2; i < 16; i++)
          queue.hostFunction(() => {
            buff[i] = buff[i - 1]! + buff[i - 2]!;
          });
        await queue.finish();
        for (let i = 2; i < 16; i++) assert.equal(buff[i], buff[i - 1]! + buff[i - 2]!, `Buff[${i}]`);
      }));

    it('queue/olLaunchHostFunction.cpp SuccessBlocking: a kernel behind a blocking host function waits for it', () =>
      withQueue(async (queue) => {
        const mem = await dev.alloc(64 * 4);
        const zeros = new Uint32Array(64);
        await queue.write(mem, zeros).done;
        let release!: () => void;
        const block = new Promise<void>((resolve) => (release = resolve));
        queue.hostFunction(() => block);
        const launched = queue.launch(await dev.kernel(library, 'iota_i32'), { teams: 1, threads: 64 }, [64, mem]);
        // Read through another queue while the first is held: the kernel has not run.
        await new Promise((resolve) => setTimeout(resolve, 200));
        assert.equal(launched.query(), false);
        await withQueue(async (other) => {
          const data = new Uint32Array(64).fill(7);
          await other.read(mem, data).done;
          assert.deepEqual(data, zeros);
        });
        release();
        const data = new Uint32Array(64);
        queue.read(mem, data);
        await queue.finish();
        for (let i = 0; i < 64; i++) assert.equal(data[i], i, `Data[${i}]`);
        await mem.free();
      }));

    it('queue/olLaunchHostFunction.cpp InvalidNullCallback: INVALID_ARGUMENT here', () =>
      withQueue(async (queue) => {
        await rejectsWith(queue.hostFunction(null as never).done, 'INVALID_ARGUMENT', /fn must be a function/);
        await queue.finish().catch(() => {});
      }));

    it('event/olCreateEvent.cpp Success: record() on an empty and a busy queue', () =>
      withQueue(async (queue) => {
        const first = queue.record();
        await first.done;
        assert.equal(first.query(), true);
        const buffer = await dev.alloc(1024);
        queue.fill(buffer, Uint8Array.of(1), 0, 1024);
        const second = queue.record();
        await second.done;
        assert.equal(second.query(), true);
        await buffer.free();
      }));

    it('event/olSyncEvent.cpp Success, SuccessMultipleSync: an event waited for ten times', () =>
      withQueue(async (queue) => {
        const event = queue.record();
        for (let i = 0; i < 10; i++) await event.done;
        for (let i = 0; i < 10; i++) await event.wait();
      }));

    it('event/olWaitEvent.cpp Success: the event of a copy of 42, waited for; InvalidNullEvent as a queue wait', async () => {
      const dst = await dev.alloc(4);
      try {
        await withQueue(async (queue) => {
          const event = queue.write(dst, Uint32Array.of(42));
          await event.wait();
          assert.equal(event.query(), true);
          const back = new Uint32Array(1);
          await queue.read(dst, back).wait();
          assert.equal(back[0], 42);
          await rejectsWith(queue.wait(undefined as never).done, 'INVALID_ARGUMENT', /must be an Event/);
          await queue.finish().catch(() => {});
        });
      } finally {
        await dst.free();
      }
    });

    it('event/olWaitEvent.cpp: a queue waits for an event of another queue', async () => {
      const buffer = await dev.alloc(256);
      try {
        await withQueue((writer) =>
          withQueue(async (reader) => {
            writer.fill(buffer, Uint8Array.of(0x5a), 0, 256);
            reader.wait(writer.record());
            const back = new Uint8Array(256);
            reader.read(buffer, back);
            await reader.finish();
            assert.ok(back.every((byte) => byte === 0x5a));
          }),
        );
      } finally {
        await buffer.free();
      }
    });

    it('event/olGetEventElapsedTime.cpp Success, SuccessMultipleCalls: timed events around a launch', () =>
      withQueue(async (queue) => {
        const out = await dev.alloc(64 * 4);
        const iota = await dev.kernel(library, 'iota_i32');
        const start = queue.record({ timing: true });
        queue.launch(iota, { teams: 1, threads: 64 }, [64, out]);
        const end = queue.record({ timing: true });
        await end.done;
        const a = await end.elapsedSince(start);
        const b = await end.elapsedSince(start);
        assert.ok(a >= 0, `elapsed ${a} ms`);
        assert.ok(b >= 0, `elapsed ${b} ms`);
        assert.equal(a, b);
        await out.free();
      }));

    it('event/olGetEventElapsedTime.cpp InvalidNullStartEvent; untimed events are INVALID_ARGUMENT', () =>
      withQueue(async (queue) => {
        const end = queue.record({ timing: true });
        await rejectsWith(end.elapsedSince(null as never), 'INVALID_ARGUMENT', /start must be an Event/);
        const plain = queue.record();
        await rejectsWith(plain.elapsedSince(end), 'INVALID_ARGUMENT', /this event was not recorded with timing/);
        await rejectsWith(end.elapsedSince(plain), 'INVALID_ARGUMENT', /start was not recorded with timing/);
      }));

    it('kernel/olGetKernel.cpp Success, InvalidNullProgram, DISABLED_InvalidKernelName (NOT_FOUND here)', async () => {
      const kernel = await dev.kernel(library, 'saxpy');
      assert.equal(kernel.name, 'saxpy');
      await rejectsWith(dev.kernel(null as never, 'saxpy'), 'INVALID_ARGUMENT', /library must be a Library/);
      await rejectsWith(
        dev.kernel(library, 'invalid_kernel_name'),
        'NOT_FOUND',
        /has no kernel 'invalid_kernel_name' \(it has: .*saxpy/,
      );
    });

    it('kernel/olLaunchKernel.cpp olLaunchKernelNoArgsTest Success', () =>
      withQueue(async (queue) => {
        queue.launch(await dev.kernel(library, 'empty'), { teams: 1, threads: 64 });
        await queue.finish();
      }));

    it('kernel/olLaunchKernel.cpp olLaunchKernelFooTest Success: 64 threads store their index', () =>
      withQueue(async (queue) => {
        const mem = await dev.alloc(64 * 4);
        queue.launch(await dev.kernel(library, 'iota_i32'), { teams: 1, threads: 64 }, [64, mem]);
        const data = new Uint32Array(64);
        queue.read(mem, data);
        await queue.finish();
        for (let i = 0; i < 64; i++) assert.equal(data[i], i, `Data[${i}]`);
        await mem.free();
      }));

    it('kernel/olLaunchKernel.cpp olLaunchKernelFooTest SuccessThreaded: launches from concurrent callers on one queue', () =>
      withQueue(async (queue) => {
        const iota = await dev.kernel(library, 'iota_i32');
        await Promise.all(
          Array.from({ length: 4 }, async () => {
            const mem = await dev.alloc(64 * 4);
            queue.launch(iota, { teams: 1, threads: 64 }, [64, mem]);
            const data = new Uint32Array(64);
            await queue.read(mem, data).done;
            for (let i = 0; i < 64; i++) assert.equal(data[i], i, `Data[${i}]`);
            await mem.free();
          }),
        );
      }));

    it('kernel/olLaunchKernel.cpp multiargs: i32, i64, f32, f64 and a pointer in one launch', async (t) => {
      // A device without i64 (WGSL has none) is asked, not guessed: it refuses the kernel, quoting the build's note.
      if (!dev.info.capabilities.i64) {
        await rejectsWith(dev.kernel(library, 'mixed'), 'INCOMPATIBLE_IMAGE', /'mixed'.*i64/);
        return t.skip(`device ${dev.id} has no i64 (capabilities.i64 is false)`);
      }
      const mixed = await dev.kernel(library, 'mixed');
      await withQueue(async (queue) => {
        const out = await dev.alloc(32);
        queue.launch(mixed, { teams: 1 }, [-7, 1n << 40n, 1.5, Math.PI, out]);
        const back = new DataView(new ArrayBuffer(32));
        queue.read(out, back);
        await queue.finish();
        assert.equal(back.getInt32(0, true), -7);
        assert.equal(back.getBigInt64(8, true), 1n << 40n);
        assert.equal(back.getFloat32(16, true), 1.5);
        assert.equal(back.getFloat64(24, true), Math.PI);
        await out.free();
      });
    });

    it('kernel/olLaunchKernel.cpp olLaunchKernelLocalMemTest Success: 4 teams of 64 share team memory', async (t) => {
      if (dev.info.maxThreadsPerTeam < 64) return t.skip(`teams of at most ${dev.info.maxThreadsPerTeam} threads`);
      await withQueue(async (queue) => {
        const n = 4 * 64;
        const data = await dev.alloc(n * 4);
        const out = await dev.alloc(n * 4);
        queue.write(data, new Int32Array(n).fill(2));
        queue.launch(await dev.kernel(library, 'team_scan'), { teams: 4, threads: 64, teamMemoryBytes: 2 * 64 * 4 }, [
          data,
          out,
          n,
        ]);
        const back = new Int32Array(n);
        queue.read(out, back);
        await queue.finish();
        // Each team's scan of 2s: (i % 64 + 1) * 2; the last of each team is 2 * GroupSize, as upstream's reduction.
        for (let i = 0; i < n; i++) assert.equal(back[i], ((i % 64) + 1) * 2, `Data[${i}]`);
        await data.free();
        await out.free();
      });
    });

    it('kernel/olLaunchKernel.cpp olLaunchKernelGlobalTest Success, InvalidNotAKernel (NOT_FOUND here)', async (t) => {
      await rejectsWith(dev.kernel(library, 'tallies'), 'NOT_FOUND', /has no kernel 'tallies'/);
      if (!dev.info.imageFormats.includes('wasm')) return t.skip(`device ${dev.id} has no device globals`);
      await withQueue(async (queue) => {
        const tallies = await library.global(dev, 'tallies');
        queue.write(tallies.buffer, Int32Array.of(0, 0, 0, 0, 0, 0, 0, 0));
        queue.launch(await dev.kernel(library, 'tally_teams'), { teams: 16 }, []);
        const back = new Int32Array(8);
        queue.read(tallies.buffer, back);
        await queue.finish();
        assert.deepEqual([...back], [2, 2, 2, 2, 2, 2, 2, 2]);
      });
    });

    it('kernel/olLaunchKernel.cpp: a grid of no teams, or more team memory than the device gives, is INVALID_ARGUMENT', () =>
      withQueue(async (queue) => {
        const empty = await dev.kernel(library, 'empty');
        await rejectsWith(queue.launch(empty, { teams: 0 }).done, 'INVALID_ARGUMENT', /teams/);
        await queue.finish().catch(() => {});
        await rejectsWith(
          queue.launch(empty, { teams: 1, teamMemoryBytes: dev.info.maxTeamMemoryBytes + 1 }).done,
          'INVALID_ARGUMENT',
          /teamMemoryBytes .* is more than device/,
        );
        await queue.finish().catch(() => {});
      }));

    it('kernel/olLaunchKernel.cpp: a kernel loaded for another device is INVALID_ARGUMENT', async () => {
      const other = await target.runtime();
      try {
        const foreign = await target.device(other).kernel(await other.register(target.bundle), 'empty');
        await withQueue(async (queue) => {
          await rejectsWith(
            queue.launch(foreign, { teams: 1 }).done,
            'INVALID_ARGUMENT',
            /was loaded for device .*not for this queue's device/,
          );
          await queue.finish().catch(() => {});
        });
      } finally {
        await other.shutdown();
      }
    });

    it('enqueue/olMemcpy.cpp SuccessHtoD, SuccessDtoH, SuccessDtoD', async () => {
      const size = 1024;
      const a = await dev.alloc(size);
      const b = await dev.alloc(size);
      try {
        await withQueue(async (queue) => {
          queue.write(a, new Uint8Array(size).fill(42));
          const fromA = new Uint8Array(size);
          queue.read(a, fromA);
          queue.copy(b, a);
          const fromB = new Uint8Array(size);
          queue.read(b, fromB);
          await queue.finish();
          assert.ok(
            fromA.every((byte) => byte === 42),
            'DtoH',
          );
          assert.ok(
            fromB.every((byte) => byte === 42),
            'DtoD',
          );
        });
      } finally {
        await a.free();
        await b.free();
      }
    });

    it('memory/olMemFree.cpp SuccessFreeDevice, SuccessFreeHost; InvalidNullPtr is a second free here (INVALID_BUFFER)', async () => {
      const device = await dev.alloc(1024);
      await device.free();
      if (dev.info.memoryKinds.includes('host')) await (await dev.alloc(1024, { kind: 'host' })).free();
      await rejectsWith(device.free(), 'INVALID_BUFFER', /was already freed/);
    });
  });
}
