import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeviceAllocator } from '../src/plugins/host/allocator.js';
import { OffloadError, type ErrorCode } from '../src/errors.js';
import { seededRandom } from './helpers/random.js';

/** Asserts that `fn` throws an OffloadError with `code` whose message matches every pattern. */
function assertOffloadError(fn: () => unknown, code: ErrorCode, ...patterns: RegExp[]): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(OffloadError.is(error, code), `expected ${code}, got ${String(error)}`);
    for (const pattern of patterns) assert.match(error.message, pattern);
    return true;
  });
}

/** A full allocator of `count` blocks of 64 bytes each, and their addresses in order. */
function filled(count: number): { allocator: DeviceAllocator; blocks: number[] } {
  const allocator = new DeviceAllocator({ start: 1024, end: 1024 + count * 64 });
  const blocks = Array.from({ length: count }, () => allocator.alloc(64));
  assert.equal(allocator.freeBytes, 0);
  return { allocator, blocks };
}

const roundUp = (bytes: number, alignment: number) => Math.max(1, Math.ceil(bytes / alignment)) * alignment;

test('blocks of many odd sizes are aligned and sized up to the alignment', { timeout: 60_000 }, () => {
  for (const alignment of [16, 64, 4096]) {
    const allocator = new DeviceAllocator({ start: 0, end: 64 << 20, alignment });
    let expectedUsed = 0;
    for (let bytes = 0; bytes <= 300; bytes += 1) {
      for (const size of [bytes, bytes * 37 + 1]) {
        const address = allocator.alloc(size);
        assert.equal(address % alignment, 0, `address of ${size} bytes at alignment ${alignment}`);
        assert.equal(allocator.sizeOf(address), roundUp(size, alignment));
        expectedUsed += roundUp(size, alignment);
      }
    }
    assert.equal(allocator.usedBytes, expectedUsed);
    assert.equal(allocator.liveBlocks, 602);
  }
});

test('zero-byte allocations get distinct blocks of alignment bytes', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0, end: 4096, alignment: 16 });
  const addresses = Array.from({ length: 10 }, () => allocator.alloc(0));
  assert.equal(new Set(addresses).size, 10);
  for (const address of addresses) assert.equal(allocator.sizeOf(address), 16);
  assert.equal(allocator.usedBytes, 160);
});

test('a freed block is reused by the next allocation that fits', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0, end: 1 << 20 });
  const first = allocator.alloc(100);
  allocator.alloc(100);
  assert.equal(allocator.free(first), 128);
  assert.equal(allocator.alloc(128), first);
});

test('best fit: the smallest free block that fits wins over a lower, larger one', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0, end: 1 << 20 });
  const large = allocator.alloc(256);
  allocator.alloc(64);
  const small = allocator.alloc(128);
  allocator.alloc(64);
  allocator.free(large);
  allocator.free(small);
  assert.equal(allocator.alloc(100), small);
  assert.equal(allocator.alloc(200), large);
});

test('a freed block coalesces with the free block before it', { timeout: 60_000 }, () => {
  const { allocator, blocks } = filled(4);
  allocator.free(blocks[1]!);
  allocator.free(blocks[2]!);
  assert.equal(allocator.largestFreeBlock, 128);
  assert.equal(allocator.alloc(128), blocks[1]);
});

test('a freed block coalesces with the free block after it', { timeout: 60_000 }, () => {
  const { allocator, blocks } = filled(4);
  allocator.free(blocks[2]!);
  allocator.free(blocks[1]!);
  assert.equal(allocator.largestFreeBlock, 128);
  assert.equal(allocator.alloc(128), blocks[1]);
});

test('a freed block coalesces with free blocks on both sides', { timeout: 60_000 }, () => {
  const { allocator, blocks } = filled(5);
  allocator.free(blocks[1]!);
  allocator.free(blocks[3]!);
  assert.equal(allocator.largestFreeBlock, 64);
  allocator.free(blocks[2]!);
  assert.equal(allocator.largestFreeBlock, 192);
  assert.equal(allocator.alloc(192), blocks[1]);
  assert.equal(allocator.freeBytes, 0);
});

test('blocks at both ends of the range coalesce with their one neighbour', { timeout: 60_000 }, () => {
  const { allocator, blocks } = filled(3);
  allocator.free(blocks[0]!);
  allocator.free(blocks[2]!);
  allocator.free(blocks[1]!);
  assert.equal(allocator.largestFreeBlock, allocator.capacity);
  assert.equal(allocator.alloc(allocator.capacity), allocator.start);
});

test('filling the range exactly works and one more byte is OUT_OF_MEMORY naming the sizes', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 4096, end: 4096 + 1024 });
  assert.equal(allocator.alloc(1024 - 64), 4096);
  assert.equal(allocator.alloc(64), 4096 + 1024 - 64);
  assert.equal(allocator.freeBytes, 0);
  assert.equal(allocator.largestFreeBlock, 0);
  assertOffloadError(
    () => allocator.alloc(1),
    'OUT_OF_MEMORY',
    /\b1 bytes \(64 after alignment\)/,
    /largest free block is 0 bytes/,
    /\b0 bytes are free/,
  );

  const empty = new DeviceAllocator({ start: 0, end: 1024 });
  assertOffloadError(() => empty.alloc(1025), 'OUT_OF_MEMORY', /1025 bytes/, /largest free block is 1024 bytes/);
  assert.equal(empty.alloc(1024), 0);
});

test('OUT_OF_MEMORY under fragmentation names the largest free block and the total free', { timeout: 60_000 }, () => {
  const { allocator, blocks } = filled(4);
  allocator.free(blocks[0]!);
  allocator.free(blocks[2]!);
  assertOffloadError(
    () => allocator.alloc(65),
    'OUT_OF_MEMORY',
    /65 bytes \(128 after alignment\)/,
    /largest free block is 64 bytes/,
    /128 bytes are free in total/,
  );
  assert.equal(allocator.alloc(64), blocks[0]);
});

test('freeing twice is INVALID_BUFFER naming the address', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0x1000, end: 0x10000 });
  const address = allocator.alloc(100);
  allocator.alloc(100);
  allocator.free(address);
  assertOffloadError(() => allocator.free(address), 'INVALID_BUFFER', /0x1000\b/, /not allocated/);
  assert.equal(allocator.usedBytes, 128);
});

test(
  'interior and foreign addresses are INVALID_BUFFER naming the address and change nothing',
  { timeout: 60_000 },
  () => {
    const allocator = new DeviceAllocator({ start: 0x1000, end: 0x10000 });
    const address = allocator.alloc(256);
    assertOffloadError(
      () => allocator.free(address + 16),
      'INVALID_BUFFER',
      /0x1010\b/,
      /16 bytes into the live block at 0x1000/,
    );
    assertOffloadError(() => allocator.free(0x800), 'INVALID_BUFFER', /0x800\b/, /outside \[0x1000, 0x10000\)/);
    assertOffloadError(() => allocator.free(0x10000), 'INVALID_BUFFER', /0x10000\b/, /outside/);
    assertOffloadError(() => allocator.free(0x2000), 'INVALID_BUFFER', /0x2000\b/, /not allocated/);
    assertOffloadError(() => allocator.free(-64), 'INVALID_BUFFER', /-64/);
    assertOffloadError(() => allocator.free(Number.NaN), 'INVALID_BUFFER', /NaN/);
    assert.equal(allocator.sizeOf(address + 16), undefined);
    assert.equal(allocator.liveBlocks, 1);
    assert.equal(allocator.free(address), 256);
  },
);

test('sizes that are not non-negative safe integers are INVALID_ARGUMENT', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0, end: 4096 });
  for (const bytes of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, '8' as unknown as number]) {
    assertOffloadError(() => allocator.alloc(bytes), 'INVALID_ARGUMENT', /bytes must be a non-negative safe integer/);
  }
  assert.equal(allocator.usedBytes, 0);
});

test('invalid options are INVALID_ARGUMENT naming the option', { timeout: 60_000 }, () => {
  const cases: [ConstructorParameters<typeof DeviceAllocator>[0], RegExp][] = [
    [{ start: 0, end: 4096, alignment: 8 }, /options\.alignment/],
    [{ start: 0, end: 4096, alignment: 48 }, /options\.alignment/],
    [{ start: 32, end: 4096 }, /options\.start/],
    [{ start: -64, end: 4096 }, /options\.start/],
    [{ start: 4096, end: 4096 }, /options\.end/],
    [{ start: 4096, end: 4096 + 63 }, /options\.end/],
    [{ start: 0, end: Number.NaN }, /options\.end/],
  ];
  for (const [options, pattern] of cases) {
    assertOffloadError(() => new DeviceAllocator(options), 'INVALID_ARGUMENT', pattern);
  }
});

test('an unaligned end is rounded down so every block stays aligned', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0, end: 1000 });
  assert.equal(allocator.end, 960);
  assert.equal(allocator.capacity, 960);
  assert.equal(allocator.freeBytes, 960);
  assertOffloadError(() => allocator.alloc(961), 'OUT_OF_MEMORY');
  assert.equal(allocator.alloc(960), 0);
});

test('contains is true only for ranges inside one live block', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0, end: 4096 });
  const first = allocator.alloc(100);
  const second = allocator.alloc(64);
  assert.equal(allocator.contains(first, 128), true);
  assert.equal(allocator.contains(first + 8, 120), true);
  assert.equal(allocator.contains(first + 127, 0), true);
  assert.equal(allocator.contains(first + 8, 121), false, 'spills into the next block');
  assert.equal(allocator.contains(second + 64, 0), false, 'free memory');
  assert.equal(allocator.contains(2048, 16), false, 'free memory');
  assert.equal(allocator.contains(first, -1), false);
  assert.equal(allocator.contains(-16, 8), false);
  allocator.free(first);
  assert.equal(allocator.contains(first, 1), false, 'freed block');
});

test('reset frees every block and leaves one free block over the range', { timeout: 60_000 }, () => {
  const allocator = new DeviceAllocator({ start: 0, end: 1 << 16 });
  const addresses = Array.from({ length: 50 }, (_, i) => allocator.alloc(i * 13));
  allocator.reset();
  assert.equal(allocator.usedBytes, 0);
  assert.equal(allocator.liveBlocks, 0);
  assert.equal(allocator.sizeOf(addresses[10]!), undefined);
  assert.equal(allocator.largestFreeBlock, 1 << 16);
  assert.equal(allocator.alloc(1 << 16), 0);
});

test('addresses above 2 GiB up to 4 GiB work without 32-bit overflow', { timeout: 60_000 }, () => {
  const top = 2 ** 32;
  const allocator = new DeviceAllocator({ start: top - (1 << 20), end: top, alignment: 4096 });
  const addresses = Array.from({ length: 256 }, () => allocator.alloc(4096));
  assert.equal(addresses.at(-1), top - 4096);
  assert.ok(addresses.every((address) => address > 2 ** 31 && address % 4096 === 0));
  assert.equal(allocator.contains(top - 16, 16), true);
  assertOffloadError(() => allocator.free(top - 8), 'INVALID_BUFFER', /0xfffffff8/);
  allocator.free(addresses[100]!);
  allocator.free(addresses[101]!);
  assert.equal(allocator.alloc(8192), addresses[100]);
  assertOffloadError(() => allocator.alloc(2 ** 33), 'OUT_OF_MEMORY', /8589934592 bytes/);
});

/** Checks the allocator against the reference model: live blocks by address with their sizes. */
function checkAgainstModel(allocator: DeviceAllocator, model: Map<number, number>): void {
  const live = [...model].sort((a, b) => a[0] - b[0]);
  let cursor = allocator.start;
  let largestGap = 0;
  let used = 0;
  for (const [address, size] of live) {
    assert.ok(address >= cursor, `block at ${address} overlaps the one before it`);
    largestGap = Math.max(largestGap, address - cursor);
    cursor = address + size;
    used += size;
  }
  assert.ok(cursor <= allocator.end, 'last block ends past the range');
  largestGap = Math.max(largestGap, allocator.end - cursor);
  assert.equal(allocator.usedBytes, used);
  assert.equal(allocator.usedBytes + allocator.freeBytes, allocator.capacity);
  assert.equal(allocator.liveBlocks, model.size);
  // Coalescing is immediate, so the free blocks are exactly the gaps between live blocks.
  assert.equal(allocator.largestFreeBlock, largestGap);
}

function stress(seed: number, options: { start: number; end: number; alignment: number }): void {
  const random = seededRandom(seed);
  const allocator = new DeviceAllocator(options);
  const model = new Map<number, number>();
  const addresses: number[] = [];
  let failures = 0;

  const randomSize = (): number => {
    const r = random();
    if (r < 0.1) return Math.floor(random() * 17);
    if (r < 0.8) return 1 + Math.floor(random() * 2048);
    if (r < 0.97) return 1 + Math.floor(random() * 32768);
    return 1 + Math.floor(random() * (allocator.capacity / 4));
  };

  for (let op = 0; op < 20_000; op += 1) {
    // Alternate phases that mostly fill and mostly drain, so the range sees both full and sparse states.
    const allocChance = op % 4000 < 2000 ? 0.7 : 0.3;
    if (addresses.length === 0 || random() < allocChance) {
      const bytes = randomSize();
      const size = roundUp(bytes, options.alignment);
      let address: number;
      try {
        address = allocator.alloc(bytes);
      } catch (error) {
        assert.ok(OffloadError.is(error, 'OUT_OF_MEMORY'), String(error));
        assert.ok(
          size > allocator.largestFreeBlock,
          `alloc(${bytes}) failed with ${allocator.largestFreeBlock} bytes free in one block`,
        );
        failures += 1;
        continue;
      }
      assert.equal(address % options.alignment, 0);
      assert.ok(
        address >= allocator.start && address + size <= allocator.end,
        `block ${address}+${size} outside the range`,
      );
      for (const [other, otherSize] of model) {
        assert.ok(
          address + size <= other || other + otherSize <= address,
          `block ${address}+${size} overlaps ${other}+${otherSize}`,
        );
      }
      assert.equal(allocator.sizeOf(address), size);
      model.set(address, size);
      addresses.push(address);
    } else {
      const index = Math.floor(random() * addresses.length);
      const address = addresses[index]!;
      addresses[index] = addresses.at(-1)!;
      addresses.pop();
      assert.equal(allocator.free(address), model.get(address));
      model.delete(address);
    }
    if (op % 100 === 0) checkAgainstModel(allocator, model);
  }
  checkAgainstModel(allocator, model);
  assert.ok(failures > 0, 'the run should reach OUT_OF_MEMORY at least once');

  while (addresses.length > 0) {
    const index = Math.floor(random() * addresses.length);
    allocator.free(addresses[index]!);
    addresses[index] = addresses.at(-1)!;
    addresses.pop();
  }
  assert.equal(allocator.usedBytes, 0);
  assert.equal(allocator.largestFreeBlock, allocator.capacity);
  assert.equal(allocator.alloc(allocator.capacity), allocator.start);
}

test('20k seeded random allocs and frees match a reference model (alignment 64)', { timeout: 60_000 }, () => {
  stress(0xc0ffee, { start: 4096, end: 4096 + (1 << 20), alignment: 64 });
});

test(
  '20k seeded random allocs and frees match a reference model (alignment 16, high addresses)',
  { timeout: 60_000 },
  () => {
    stress(42, { start: 2 ** 32 - (1 << 20), end: 2 ** 32, alignment: 16 });
  },
);
