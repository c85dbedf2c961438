/** copyInto: the same bytes as TypedArray.set, at every relative alignment, into shared and ordinary memory. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { copyInto } from '../src/shared-copy.js';

test('copyInto copies exactly what set copies, whatever the alignment', { timeout: 30_000 }, () => {
  const source = new Uint8Array(4096 + 16).map((_, i) => (i * 7 + 3) & 0xff);
  for (const shared of [true, false]) {
    const memory = shared
      ? new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true }).buffer
      : new ArrayBuffer(65536);
    for (const targetOffset of [0, 3, 8]) {
      const target = new Uint8Array(memory, targetOffset, 16384);
      for (let from = 0; from < 9; from++) {
        for (const length of [0, 1, 7, 8, 9, 1000, 4096]) {
          for (const at of [0, 1, 5, 8, 4099]) {
            const expected = new Uint8Array(16384).fill(0xee);
            expected.set(source.subarray(from, from + length), at);
            target.fill(0xee);
            copyInto(target, source.subarray(from, from + length), at);
            assert.deepEqual(
              Uint8Array.from(target),
              expected,
              `shared ${shared}, target offset ${targetOffset}, from ${from}, ${length} bytes at ${at}`,
            );
          }
        }
      }
    }
  }
  assert.throws(
    () => copyInto(new Uint8Array(new SharedArrayBuffer(8)), new Uint8Array(9).subarray(1), 1),
    RangeError,
    'out of range, as set',
  );
});
