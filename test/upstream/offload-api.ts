/**
 * liboffload's API tests (llvm-project `offload/unittests/OffloadAPI/`), one `it` per upstream
 * test, each naming its file and TEST_P: the same calls through this package's API, the
 * upstream ASSERT_SUCCESS / ASSERT_ERROR / ASSERT_EQ as the expectation (liboffload's
 * OL_ERRC_INVALID_SIZE is INVALID_ARGUMENT here).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Buffer, Device, Runtime } from '../../src/index.js';
import { rejectsWith } from '../conformance/suite.js';

export interface ApiTarget {
  runtime(): Promise<Runtime>;
  device(runtime: Runtime): Device;
  cleanup?: () => Promise<void>;
}

export function upstreamOffloadApiSuite(kind: string, setup: () => Promise<ApiTarget>): void {
  describe(`llvm offload/unittests/OffloadAPI: ${kind}`, { timeout: 120_000 }, () => {
    let target: ApiTarget;
    let rt: Runtime;
    let dev: Device;

    before(async () => {
      target = await setup();
      rt = await target.runtime();
      dev = target.device(rt);
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
