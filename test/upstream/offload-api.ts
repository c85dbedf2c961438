/**
 * liboffload's API tests (llvm-project `offload/unittests/OffloadAPI/`), one `it` per upstream
 * test, each naming its file and TEST_P: the same calls through this package's API, the
 * upstream ASSERT_SUCCESS / ASSERT_ERROR / ASSERT_EQ as the expectation (liboffload's
 * OL_ERRC_INVALID_SIZE is INVALID_ARGUMENT here).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Buffer, Device, Event, Kernel, Queue, Runtime } from '../../src/index.js';
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

    before(async () => {
      target = await setup();
      rt = await target.runtime();
      dev = target.device(rt);
      saxpy = await dev.kernel(await rt.register(target.bundle), 'saxpy');
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
  });
}
