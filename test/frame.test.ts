import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  encodeFrame,
  encodeHead,
  FRAME_MAGIC,
  FrameDecoder,
  MAX_META_BYTES,
  MAX_PAYLOAD_BYTES,
  PREFIX_BYTES,
  type Frame,
} from '../src/transport/frame.js';
import { OffloadError, type ErrorCode } from '../src/errors.js';

/** Asserts that `fn` throws an OffloadError with `code` whose message matches every pattern. */
function assertOffloadError(fn: () => unknown, code: ErrorCode, ...patterns: RegExp[]): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(OffloadError.is(error, code), `expected ${code}, got ${String(error)}`);
    for (const pattern of patterns) assert.match(error.message, pattern);
    return true;
  });
}

/** xorshift32: tiny and deterministic, so a failing fuzz run can be replayed from its seed. */
function xorshift(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}

function bytes(length: number, start = 0): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) out[i] = (start + i * 7) & 0xff;
  return out;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** A prefix with arbitrary fields followed by `meta` (bytes the encoder would never produce). */
function rawFrame(
  meta: Uint8Array | string,
  payloadLength: bigint = 0n,
  options: { magic?: number; metaLength?: number } = {},
): Uint8Array {
  const metaBytes = typeof meta === 'string' ? new TextEncoder().encode(meta) : meta;
  const head = new Uint8Array(PREFIX_BYTES);
  const view = new DataView(head.buffer);
  view.setUint32(0, options.magic ?? FRAME_MAGIC, true);
  view.setUint32(4, options.metaLength ?? metaBytes.length, true);
  view.setBigUint64(8, payloadLength, true);
  return concat(head, metaBytes);
}

/** Feeds `chunks` to a fresh decoder and returns every frame, checking `pending` ends at 0. */
function decodeAll(chunks: Uint8Array[]): Frame[] {
  const decoder = new FrameDecoder();
  const frames = chunks.flatMap((chunk) => decoder.push(chunk));
  assert.equal(decoder.pending, 0);
  return frames;
}

function assertFrames(actual: Frame[], expected: Frame[]): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < expected.length; i++) {
    assert.deepEqual(actual[i]!.meta, expected[i]!.meta);
    assert.deepEqual(Buffer.from(actual[i]!.payload), Buffer.from(expected[i]!.payload));
  }
}

/** Frames covering an empty payload, unicode meta and a payload larger than the meta. */
const SAMPLE: Frame[] = [
  { meta: { op: 'ping' }, payload: new Uint8Array(0) },
  { meta: { name: 'ünïcødé ✓ 🚀', ключ: '値', nested: { list: [1, null, true] } }, payload: bytes(3) },
  { meta: { op: 'write', offset: 4096 }, payload: bytes(200, 11) },
  { meta: { x: 1 }, payload: bytes(1) },
];
const SAMPLE_STREAM = concat(...SAMPLE.map((frame) => encodeFrame(frame.meta, frame.payload)));

test('the encoding is the documented prefix followed by meta and payload', { timeout: 60_000 }, () => {
  const frame = encodeFrame({ a: 1 }, bytes(5));
  const view = new DataView(frame.buffer);
  assert.equal(new TextDecoder().decode(frame.subarray(0, 4)), 'OFL1');
  assert.equal(view.getUint32(4, true), '{"a":1}'.length);
  assert.equal(view.getBigUint64(8, true), 5n);
  assert.equal(new TextDecoder().decode(frame.subarray(PREFIX_BYTES, PREFIX_BYTES + 7)), '{"a":1}');
  assert.deepEqual(frame.subarray(PREFIX_BYTES + 7), bytes(5));
  assert.deepEqual(encodeHead({ a: 1 }, 5), frame.subarray(0, PREFIX_BYTES + 7));
});

test('frames round trip with an empty payload and payloads of many sizes', { timeout: 60_000 }, () => {
  assertFrames(decodeAll([encodeFrame({ empty: true })]), [{ meta: { empty: true }, payload: new Uint8Array(0) }]);
  for (const size of [0, 1, 2, 15, 16, 17, 255, 256, 4095, 4096, 65535, 65536, 65537, 1 << 20, (3 << 20) + 7]) {
    const frame = { meta: { size }, payload: bytes(size, size) };
    assertFrames(decodeAll([encodeFrame(frame.meta, frame.payload)]), [frame]);
  }
});

test('unicode meta round trips, lone surrogates included', { timeout: 60_000 }, () => {
  const meta = { text: 'ünïcødé ✓ 🚀 \u0000 "quoted" \\', lone: '\ud800x\udfff', 'ключ 値': ['é', { '🚀': '' }] };
  assertFrames(decodeAll([encodeFrame(meta)]), [{ meta, payload: new Uint8Array(0) }]);
});

test('meta of exactly MAX_META_BYTES is accepted; one byte more is refused by encodeHead', { timeout: 60_000 }, () => {
  const meta = { s: 'x'.repeat(MAX_META_BYTES - '{"s":""}'.length) };
  assertFrames(decodeAll([encodeFrame(meta, bytes(2))]), [{ meta, payload: bytes(2) }]);
  assertOffloadError(
    () => encodeHead({ s: `${meta.s}x` }, 0),
    'INVALID_ARGUMENT',
    /meta/,
    new RegExp(`${MAX_META_BYTES + 1} bytes`),
  );
  // Multi-byte characters count as bytes, not as string length.
  assertOffloadError(() => encodeHead({ s: 'é'.repeat(MAX_META_BYTES / 2) }, 0), 'INVALID_ARGUMENT', /meta/);
});

test('encodeHead refuses a payload over MAX_PAYLOAD_BYTES without needing the payload', { timeout: 60_000 }, () => {
  assert.equal(encodeHead({}, MAX_PAYLOAD_BYTES).length, PREFIX_BYTES + 2);
  assertOffloadError(
    () => encodeHead({}, MAX_PAYLOAD_BYTES + 1),
    'INVALID_ARGUMENT',
    /payload/,
    new RegExp(`${MAX_PAYLOAD_BYTES + 1}`),
  );
});

test('the stream split at every position decodes to the same frames', { timeout: 60_000 }, () => {
  for (let at = 0; at <= SAMPLE_STREAM.length; at++) {
    assertFrames(decodeAll([SAMPLE_STREAM.subarray(0, at), SAMPLE_STREAM.subarray(at)]), SAMPLE);
  }
});

test(
  'the stream fed one byte at a time decodes to the same frames, each as soon as it completes',
  { timeout: 60_000 },
  () => {
    const decoder = new FrameDecoder();
    const frames: Frame[] = [];
    const ends = new Set<number>();
    let end = 0;
    for (const frame of SAMPLE) ends.add((end += encodeFrame(frame.meta, frame.payload).length));
    for (let i = 0; i < SAMPLE_STREAM.length; i++) {
      const got = decoder.push(SAMPLE_STREAM.subarray(i, i + 1));
      assert.equal(got.length, ends.has(i + 1) ? 1 : 0, `at byte ${i}`);
      frames.push(...got);
      assert.equal(decoder.pending > 0, !ends.has(i + 1), `pending after byte ${i}`);
    }
    assertFrames(frames, SAMPLE);
  },
);

test(
  'the stream cut at random positions (empty chunks included) decodes to the same frames',
  { timeout: 60_000 },
  () => {
    const random = xorshift(0x5eed);
    for (let round = 0; round < 500; round++) {
      const cuts = Array.from({ length: 1 + Math.floor(random() * 12) }, () =>
        Math.floor(random() * (SAMPLE_STREAM.length + 1)),
      );
      cuts.sort((a, b) => a - b);
      const chunks = [0, ...cuts].map((from, i) => SAMPLE_STREAM.subarray(from, cuts[i] ?? SAMPLE_STREAM.length));
      assertFrames(decodeAll(chunks), SAMPLE);
    }
  },
);

test('several frames in one chunk all come out of one push', { timeout: 60_000 }, () => {
  const decoder = new FrameDecoder();
  assertFrames(decoder.push(SAMPLE_STREAM), SAMPLE);
  assert.equal(decoder.pending, 0);
  // A whole frame plus part of the next: one frame now, the rest held.
  const first = encodeFrame(SAMPLE[0]!.meta).length;
  assertFrames(decoder.push(SAMPLE_STREAM.subarray(0, first + 5)), SAMPLE.slice(0, 1));
  assert.equal(decoder.pending, 5);
  assertFrames(decoder.push(SAMPLE_STREAM.subarray(first + 5)), SAMPLE.slice(1));
});

test('a payload that lies in one chunk is a view of it, not a copy', { timeout: 60_000 }, () => {
  const chunk = concat(encodeFrame({ a: 1 }, bytes(100)), encodeFrame({ b: 2 }, bytes(50, 3)));
  const frames = new FrameDecoder().push(chunk);
  assert.equal(frames.length, 2);
  const firstLength = encodeFrame({ a: 1 }, bytes(100)).length;
  assert.equal(frames[0]!.payload.buffer, chunk.buffer);
  assert.equal(frames[0]!.payload.byteOffset, firstLength - 100);
  assert.equal(frames[1]!.payload.buffer, chunk.buffer);
  assert.equal(frames[1]!.payload.byteOffset, chunk.length - 50);
  // Also when the prefix and meta came in an earlier chunk.
  const frame = encodeFrame({ c: 3 }, bytes(64));
  const payloadChunk = frame.slice(frame.length - 64);
  const decoder = new FrameDecoder();
  assert.deepEqual(decoder.push(frame.subarray(0, frame.length - 64)), []);
  const [late] = decoder.push(payloadChunk);
  assert.equal(late!.payload.buffer, payloadChunk.buffer);
});

test('a bad magic is PROTOCOL naming the magic, as soon as the prefix is in', { timeout: 60_000 }, () => {
  const decoder = new FrameDecoder();
  assert.deepEqual(decoder.push(rawFrame('{}', 0n, { magic: 0xdeadbeef }).subarray(0, PREFIX_BYTES - 1)), []);
  assertOffloadError(() => decoder.push(new Uint8Array([0])), 'PROTOCOL', /magic/, /0xdeadbeef/);
  assertOffloadError(
    () => new FrameDecoder().push(new TextEncoder().encode('GET / HTTP/1.1\r\nHost: x\r\n\r\n')),
    'PROTOCOL',
    /magic/,
  );
});

test(
  'a meta length of 0 or over MAX_META_BYTES is PROTOCOL naming the length, before the meta arrives',
  { timeout: 60_000 },
  () => {
    assertOffloadError(() => new FrameDecoder().push(rawFrame('', 0n)), 'PROTOCOL', /meta length 0\b/);
    const over = rawFrame('', 0n, { metaLength: MAX_META_BYTES + 1 });
    assertOffloadError(
      () => new FrameDecoder().push(over),
      'PROTOCOL',
      new RegExp(`meta length ${MAX_META_BYTES + 1}\\b`),
    );
    assertOffloadError(
      () => new FrameDecoder().push(rawFrame('', 0n, { metaLength: 0xffffffff })),
      'PROTOCOL',
      /meta length 4294967295\b/,
    );
  },
);

test(
  'a payload length over MAX_PAYLOAD_BYTES is PROTOCOL naming the length, before the payload arrives',
  { timeout: 60_000 },
  () => {
    const over = BigInt(MAX_PAYLOAD_BYTES) + 1n;
    assertOffloadError(
      () => new FrameDecoder().push(rawFrame('{}', over)),
      'PROTOCOL',
      /payload length/,
      new RegExp(`${over}`),
    );
    // Lengths beyond 2^53 must not be rounded into range.
    assertOffloadError(
      () => new FrameDecoder().push(rawFrame('{}', 2n ** 64n - 1n)),
      'PROTOCOL',
      /payload length 18446744073709551615\b/,
    );
    assertOffloadError(() => new FrameDecoder().push(rawFrame('{}', 2n ** 53n + 1n)), 'PROTOCOL', /payload length/);
    // Exactly the maximum is a legal header: the decoder waits for the payload.
    const decoder = new FrameDecoder();
    assert.deepEqual(decoder.push(rawFrame('{}', BigInt(MAX_PAYLOAD_BYTES))), []);
  },
);

test('meta that is not UTF-8 or not JSON is PROTOCOL saying so', { timeout: 60_000 }, () => {
  for (const meta of [new Uint8Array([0x7b, 0xff, 0x7d]), new Uint8Array([0xc3]), new Uint8Array([0xed, 0xa0, 0x80])]) {
    assertOffloadError(() => new FrameDecoder().push(rawFrame(meta)), 'PROTOCOL', /not UTF-8 JSON/);
  }
  for (const meta of ['{', '{"a":}', "{'a':1}", '{} {}', 'undefined', ' ']) {
    assertOffloadError(() => new FrameDecoder().push(rawFrame(meta)), 'PROTOCOL', /not UTF-8 JSON/);
  }
});

test('meta that is JSON but not an object is PROTOCOL saying so', { timeout: 60_000 }, () => {
  for (const meta of ['[]', '[{"a":1}]', 'null', '0', '"text"', 'true']) {
    assertOffloadError(() => new FrameDecoder().push(rawFrame(meta)), 'PROTOCOL', /not a JSON object/);
  }
});

test('fuzz: mutated frames decode to plain-object metas or fail with PROTOCOL only', { timeout: 60_000 }, () => {
  const seed = process.env.FRAME_FUZZ_SEED ? Number(process.env.FRAME_FUZZ_SEED) : Date.now() >>> 0;
  const random = xorshift(seed);
  const int = (below: number) => Math.floor(random() * below);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
  const randomBytes = (length: number) => Uint8Array.from({ length }, () => int(256));

  const metas: Record<string, unknown>[] = [
    {},
    { op: 'run', id: 7 },
    { s: 'ünï🚀' },
    { list: [1, [2, [3]]], o: { p: null } },
  ];
  // An own "__proto__" key must come back as a key, not as the meta's prototype.
  metas.push(JSON.parse('{"__proto__":{"polluted":true}}') as Record<string, unknown>);
  const validFrame = () => encodeFrame(pick(metas), randomBytes(pick([0, 0, 1, 7, 16, 40, 300])));
  const interesting = [
    0,
    1,
    2,
    15,
    16,
    255,
    65535,
    MAX_META_BYTES,
    MAX_META_BYTES + 1,
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_BYTES + 1,
    0x7fffffff,
    0xffffffff,
  ];
  const nonObjects = ['[]', 'null', '1', '"s"', 'true', '[{}]', '{', '\u00ff'];

  const mutations: ((input: Uint8Array) => Uint8Array)[] = [
    // Bit flips anywhere.
    (input) => {
      const out = input.slice();
      for (let n = 1 + int(8); n > 0 && out.length > 0; n--) out[int(out.length)]! ^= 1 << int(8);
      return out;
    },
    // Truncation.
    (input) => input.slice(0, int(input.length + 1)),
    // A length field set to something interesting or random.
    (input) => {
      const out = input.slice();
      if (out.length < PREFIX_BYTES) return out;
      const view = new DataView(out.buffer);
      const value = random() < 0.5 ? pick(interesting) : int(2 ** 32);
      if (random() < 0.5) view.setUint32(4, value, true);
      else
        view.setBigUint64(
          8,
          random() < 0.8 ? BigInt(value) : (BigInt(int(2 ** 32)) << 32n) | BigInt(int(2 ** 32)),
          true,
        );
      return out;
    },
    // Random bytes, sometimes behind a valid magic so the length checks are reached.
    () => {
      const out = randomBytes(int(64));
      if (out.length >= 4 && random() < 0.5) new DataView(out.buffer).setUint32(0, FRAME_MAGIC, true);
      return out;
    },
    // Meta bytes replaced, lengths kept consistent, so the UTF-8 / JSON / object checks are reached.
    () => (random() < 0.5 ? rawFrame(pick(nonObjects), 0n) : rawFrame(randomBytes(1 + int(20)), BigInt(int(4)))),
    // A run of bytes overwritten with random ones.
    (input) => {
      const out = input.slice();
      const from = int(out.length + 1);
      out.set(randomBytes(Math.min(out.length - from, 1 + int(8))), from);
      return out;
    },
  ];

  const started = performance.now();
  let inputs = 0;
  let framesSeen = 0;
  let failures = 0;
  for (; inputs < 12_000; inputs++) {
    // Concatenations of valid and mutated frames, sometimes mutated again as a whole.
    const parts = Array.from({ length: 1 + int(3) }, () =>
      random() < 0.6 ? pick(mutations)(validFrame()) : validFrame(),
    );
    let input = concat(...parts);
    if (random() < 0.3) input = pick(mutations)(input);

    // Fed whole or in a few random pieces: the outcome class must not depend on the split.
    const cuts = Array.from({ length: int(4) }, () => int(input.length + 1)).sort((a, b) => a - b);
    const chunks = [0, ...cuts].map((from, i) => input.subarray(from, cuts[i] ?? input.length));
    const decoder = new FrameDecoder();
    try {
      for (const chunk of chunks) {
        for (const frame of decoder.push(chunk)) {
          framesSeen++;
          const { meta } = frame;
          assert.ok(
            typeof meta === 'object' &&
              meta !== null &&
              !Array.isArray(meta) &&
              Object.getPrototypeOf(meta) === Object.prototype,
            'meta is a plain object',
          );
          assert.ok(frame.payload instanceof Uint8Array, 'payload is a Uint8Array');
        }
      }
    } catch (error) {
      if (OffloadError.is(error, 'PROTOCOL')) {
        failures++;
        continue;
      }
      assert.fail(
        `fuzz input ${inputs} (seed ${seed}, replay with FRAME_FUZZ_SEED=${seed}) [${Array.from(input).join(',')}]: ${(error as Error)?.stack ?? String(error)}`,
      );
    }
  }
  // Both outcomes must be common, or the mutations are not reaching the decoder's checks.
  assert.ok(
    framesSeen > 1000 && failures > 1000,
    `seed ${seed}: ${framesSeen} frames, ${failures} PROTOCOL errors over ${inputs} inputs`,
  );
  assert.ok(performance.now() - started < 5000, `fuzz took ${Math.round(performance.now() - started)} ms`);
});

test('a payload sink receives the payload in place, however the stream is split', { timeout: 60_000 }, () => {
  const payload = new Uint8Array(5000).map((_, i) => i * 7);
  const stream = encodeFrame({ op: 'data', id: 3 }, payload);
  const landing = new Uint8Array(6000);
  const asked: unknown[] = [];
  const decoder = new FrameDecoder((meta, length) => {
    asked.push([meta.op, length]);
    return landing.subarray(1000, 1000 + length);
  });
  const frames = [];
  for (let at = 0; at < stream.length; at += 333) frames.push(...decoder.push(stream.slice(at, at + 333)));
  assert.equal(frames.length, 1);
  assert.deepEqual(asked, [['data', 5000]]);
  assert.equal(frames[0]!.payload.buffer, landing.buffer, 'the payload is the sink view');
  assert.equal(frames[0]!.payload.byteOffset, 1000);
  assert.deepEqual(frames[0]!.payload, payload);
  assert.equal(decoder.pending, 0);
});

test('a sink view of the wrong length is ignored: the payload gets its own array', { timeout: 60_000 }, () => {
  const payload = new Uint8Array(64).fill(9);
  const decoder = new FrameDecoder(() => new Uint8Array(10));
  const [frame] = decoder.push(encodeFrame({ op: 'data' }, payload));
  assert.deepEqual(frame!.payload, payload);
});

test(
  'direct reads: the rest of a sink payload is offered for reads to land in, and counted with landed()',
  { timeout: 60_000 },
  () => {
    const payload = new Uint8Array(100_000).map((_, i) => (i * 13) & 0xff);
    const stream = encodeFrame({ op: 'chunk', id: 1 }, payload);
    const landing = new Uint8Array(200_000);
    const decoder = new FrameDecoder((_meta, length) => landing.subarray(50_000, 50_000 + length));
    assert.equal(decoder.directTarget(), undefined, 'no frame begun: nothing to read into');
    const head = stream.length - payload.length;
    // The head and 10 payload bytes come in one read, as a socket would give them.
    assert.deepEqual(decoder.push(stream.subarray(0, head + 10)), []);
    let frames: Frame[] = [];
    let reads = 0;
    for (let target = decoder.directTarget(); target; target = decoder.directTarget()) {
      assert.equal(target.buffer, landing.buffer);
      assert.equal(target.byteOffset, 50_000 + 10 + reads * 7919, 'the view starts where the payload has reached');
      const length = Math.min(7919, target.length);
      const at = head + 10 + reads * 7919;
      target.set(stream.subarray(at, at + length)); // what the socket's read does
      decoder.landed(length);
      reads++;
      frames = decoder.push(new Uint8Array(0));
      if (frames.length > 0) break;
    }
    assert.equal(frames.length, 1);
    assert.equal(frames[0]!.payload.byteOffset, 50_000);
    assert.deepEqual(frames[0]!.payload, payload);
    assert.equal(decoder.directTarget(), undefined, 'the payload is complete: the next read is a frame head');
    assert.equal(decoder.pending, 0);
  },
);

test('no direct read while other bytes are buffered, nor for a frame without a sink view', { timeout: 60_000 }, () => {
  const decoder = new FrameDecoder((meta, length) => (meta.op === 'chunk' ? new Uint8Array(length) : undefined));
  const plain = encodeFrame({ op: 'data' }, new Uint8Array(1000));
  decoder.push(plain.subarray(0, 100));
  assert.equal(decoder.directTarget(), undefined, 'no sink view for this frame');
  decoder.push(plain.subarray(100));
  const chunk = encodeFrame({ op: 'chunk' }, new Uint8Array(1000).fill(1));
  decoder.add(chunk.subarray(0, chunk.length - 500));
  decoder.add(new Uint8Array(0));
  assert.equal(decoder.directTarget(), undefined, 'the head is buffered but not yet parsed');
  assert.equal(decoder.next(), undefined);
  assert.equal(decoder.directTarget()!.length, 500, 'after parsing, the rest of the payload');
});

test(
  'a receiver given borrowed bytes keeps none of them: payloads and buffered bytes are copies',
  { timeout: 60_000 },
  async () => {
    const { FrameReceiver } = await import('../src/transport/transport.js');
    const frames: Frame[] = [];
    const transport = {
      closed: false,
      stats: { framesSent: 0, framesReceived: 0, bytesSent: 0, bytesReceived: 0 },
      onFrame: (frame: Frame) => frames.push(frame),
      close() {},
    };
    const receiver = new FrameReceiver(transport as never);
    const scratch = new Uint8Array(4096);
    const stream = new Uint8Array([
      ...encodeFrame({ op: 'a' }, new Uint8Array(100).fill(7)),
      ...encodeFrame({ op: 'b' }, new Uint8Array(3000).fill(8)),
    ]);
    // Like a socket reading into one reused array: each read overwrites the last.
    for (let at = 0; at < stream.length; at += 1000) {
      const length = Math.min(1000, stream.length - at);
      scratch.set(stream.subarray(at, at + length));
      receiver.receive(scratch.subarray(0, length), true);
      scratch.fill(0xee);
    }
    assert.deepEqual(
      frames.map((frame) => frame.meta.op),
      ['a', 'b'],
    );
    assert.notEqual(frames[0]!.payload.buffer, scratch.buffer);
    assert.deepEqual(
      frames[0]!.payload,
      new Uint8Array(100).fill(7),
      'a payload from one read survives the array being reused',
    );
    assert.deepEqual(frames[1]!.payload, new Uint8Array(3000).fill(8), 'a payload over several reads survives too');
  },
);
