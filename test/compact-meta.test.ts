/**
 * The compact form of launch frames (src/protocol/compact.ts): exact round trips, JSON for what
 * it does not carry, every malformed byte PROTOCOL, and its negotiation in the hello with a real
 * proxy (a client that does not offer it, or a proxy that does not take it, speaks JSON).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { OffloadError } from '../src/errors.js';
import { RemoteConnection } from '../src/plugins/remote/connection.js';
import { compactMeta } from '../src/protocol/compact.js';
import { decodeRequest } from '../src/protocol/decode-request.js';
import { args, gridSize, string, uint, type Field, type Fields } from '../src/protocol/fields.js';
import { REQUESTS } from '../src/protocol/messages.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import {
  COMPACT_MAGIC,
  encodeFrame,
  FRAME_MAGIC,
  FrameDecoder,
  PREFIX_BYTES,
  type Frame,
} from '../src/transport/frame.js';
import { LoopbackTransport } from '../src/transport/loopback.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';
import { Random } from './helpers/proxy-fuzz.js';
import { RawClient } from './helpers/raw-client.js';

const magicOf = (frame: Uint8Array) => new DataView(frame.buffer, frame.byteOffset).getUint32(0, true);

/** `meta` through the codec and a decoder that speaks it: the meta that comes out, and the magic it went with. */
function roundTrip(meta: Record<string, unknown>): { meta: Record<string, unknown>; magic: number } {
  const bytes = encodeFrame(meta, undefined, compactMeta);
  const frames = new FrameDecoder(undefined, undefined, () => compactMeta).push(bytes);
  assert.equal(frames.length, 1);
  return { meta: frames[0]!.meta, magic: magicOf(bytes) };
}

/** The compact meta bytes of `meta` (without the prefix). */
function compactBytes(meta: Record<string, unknown>): Uint8Array {
  const bytes = encodeFrame(meta, undefined, compactMeta);
  assert.equal(magicOf(bytes), COMPACT_MAGIC);
  return bytes.slice(PREFIX_BYTES);
}

function assertProtocol(fn: () => unknown, pattern?: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(OffloadError.is(error, 'PROTOCOL'), `expected PROTOCOL, got ${String(error)}`);
    if (pattern) assert.match(error.message, pattern);
    return true;
  });
}

const launch = (fields: Record<string, unknown> = {}): Record<string, unknown> => ({
  op: 'launch',
  queue: 3,
  image: 1,
  kernel: 'saxpy',
  teams: 64,
  threads: 1,
  args: [10_000, 2.5, { buffer: 4 }, { buffer: 5, offset: 64 }],
  id: 17,
  ...fields,
});

describe('the compact form of launch frames', { timeout: 120_000 }, () => {
  it('carries launches and bare replies exactly, in the compact frame', () => {
    const cases: [Record<string, unknown>, Record<string, unknown>][] = [
      [
        launch(),
        {
          op: 'launch',
          id: 17,
          queue: 3,
          image: 1,
          teams: 64,
          threads: 1,
          timeoutMs: undefined,
          teamMemoryBytes: undefined,
          kernel: 'saxpy',
          args: [10_000, 2.5, { buffer: 4, offset: 0 }, { buffer: 5, offset: 64 }],
        },
      ],
      [
        launch({
          id: 2 ** 53 - 1,
          queue: 2 ** 32,
          image: 0,
          kernel: `ünï🚀${'k'.repeat(300)}`,
          teams: [1, 2, 3],
          threads: [4],
          timeoutMs: 2 ** 40,
          teamMemoryBytes: 65_536,
          args: [NaN, -0, Infinity, -Infinity, { i64: '-9223372036854775808' }, { buffer: 2 ** 40, offset: 2 ** 52 }],
        }),
        {
          op: 'launch',
          id: 2 ** 53 - 1,
          queue: 2 ** 32,
          image: 0,
          teams: [1, 2, 3],
          threads: [4],
          timeoutMs: 2 ** 40,
          teamMemoryBytes: 65_536,
          kernel: `ünï🚀${'k'.repeat(300)}`,
          args: [NaN, -0, Infinity, -Infinity, { i64: '-9223372036854775808' }, { buffer: 2 ** 40, offset: 2 ** 52 }],
        },
      ],
      [
        { op: 'reply', id: 0 },
        { op: 'reply', id: 0 },
      ],
      [
        { op: 'reply', id: 2 ** 53 - 1 },
        { op: 'reply', id: 2 ** 53 - 1 },
      ],
    ];
    for (const [meta, expected] of cases) {
      const out = roundTrip(meta);
      assert.equal(out.magic, COMPACT_MAGIC, `${String(meta.op)} travels compact`);
      assert.deepStrictEqual(out.meta, expected);
    }
    const { meta } = roundTrip(launch({ args: [-0] }));
    assert.ok(Object.is((meta.args as number[])[0], -0), '-0 keeps its sign');
    // The same kernel again, and another, come out right past the decoder's cache of the last name.
    for (const kernel of ['saxpy', 'saxpz', 'saxpy', 'ab', 'a', ''])
      assert.equal(roundTrip(launch({ kernel })).meta.kernel, kernel);
    // A bare reply is 9 bytes of meta, against 20-odd of JSON.
    assert.equal(compactBytes({ op: 'reply', id: 5 }).length, 9);
  });

  it('carries every field declared for a launch, each through both decoders', () => {
    // A value of each field's kind, different from launch()'s: a field declared in REQUESTS.launch
    // reaches the proxy's decoder in both forms with no other edit.
    const sample = (field: Field<unknown>): unknown =>
      field.compact === uint.compact
        ? 2 ** 40 + 3
        : field.compact === string.compact
          ? 'another'
          : field.compact === gridSize.compact
            ? [5, 6]
            : field.compact === args.compact
              ? [{ i64: '-1' }, 0.25]
              : assert.fail('a launch field of a kind this test does not know');
    for (const [name, field] of Object.entries(REQUESTS.launch as Fields)) {
      const meta = launch({ [name]: sample(field) });
      const out = roundTrip(meta);
      assert.equal(out.magic, COMPACT_MAGIC, name);
      const request = decodeRequest({ meta: out.meta, payload: new Uint8Array(0) });
      assert.deepStrictEqual((request as unknown as Record<string, unknown>)[name], sample(field), name);
      const fromJson = decodeRequest({
        meta: JSON.parse(JSON.stringify(meta)) as Record<string, unknown>,
        payload: new Uint8Array(0),
      });
      assert.deepStrictEqual(fromJson, request, `${name}: the JSON form decodes the same`);
    }
  });

  it('sends JSON for what it does not carry, and that decodes as before', () => {
    const json: Record<string, unknown>[] = [
      { op: 'ping', id: 1 },
      { op: 'reply', id: 1, error: { code: 'INVALID_ARGUMENT', message: 'no' } },
      { op: 'reply', id: 1, address: 4096, grant: 'g' },
      { op: 'reply', id: 1.5 },
      { op: 'reply', id: -1 },
      launch({ id: '17' }),
      launch({ queue: 2 ** 53 }),
      launch({ teams: [1, 2, 3, 4] }),
      launch({ teams: [] }),
      launch({ threads: [1, -1] }),
      launch({ timeoutMs: 0.5 }),
      launch({ kernel: 7 }),
      launch({ args: 'none' }),
      launch({ args: ['1'] }),
      launch({ args: [null] }),
      launch({ args: [{ i64: '1'.repeat(21) }] }),
      launch({ args: [{ i64: '١٢' }] }),
      launch({ args: [{ buffer: -1 }] }),
      launch({ args: [{ buffer: 1, offset: 2 ** 53 }] }),
    ];
    for (const meta of json) {
      const out = roundTrip(meta);
      assert.equal(out.magic, FRAME_MAGIC, `${JSON.stringify(meta)} travels as JSON`);
      assert.deepStrictEqual(out.meta, JSON.parse(JSON.stringify(meta)));
    }
  });

  it('refuses a compact frame with PROTOCOL where the receiver does not speak it', () => {
    const bytes = encodeFrame({ op: 'reply', id: 1 }, undefined, compactMeta);
    assertProtocol(() => new FrameDecoder().push(bytes), /bad frame magic 0x3143464f \(expected 0x314c464f\)/);
  });

  it('refuses every malformed compact meta with PROTOCOL naming what is wrong', () => {
    const full = compactBytes(
      launch({ teams: [2, 2], timeoutMs: 100, teamMemoryBytes: 64, args: [1, { i64: '5' }, { buffer: 1, offset: 2 }] }),
    );
    // Cut anywhere: each field says it ends early.
    for (let length = 0; length < full.length; length++)
      assertProtocol(() => compactMeta.decode(full.subarray(0, length)), /ends inside its|after its end/);
    assertProtocol(() => compactMeta.decode(Uint8Array.of(...full, 0)), /1 bytes after its end/);
    assertProtocol(() => compactMeta.decode(Uint8Array.of(9)), /unknown kind 9/);
    const patched = (at: number, ...values: number[]) => {
      const bytes = full.slice();
      bytes.set(values, at);
      return bytes;
    };
    assertProtocol(() => compactMeta.decode(patched(1, 4)), /unknown flags 4/);
    // kind, presence, id, queue, image: the teams' rank is byte 26.
    assert.equal(full[26], 2, "the teams' rank is where the test says");
    assertProtocol(() => compactMeta.decode(patched(26, 4)), /teams has rank 4/);
    // The high word of the id at 2^21: the id would be 2^53 or more.
    assertProtocol(() => compactMeta.decode(patched(6, 0, 0, 0x20, 0)), /id is not below 2\^53/);
    const reply = compactBytes({ op: 'reply', id: 1 });
    reply[8] = 0xff;
    assertProtocol(() => compactMeta.decode(reply), /id is not below 2\^53/);
    // An argument of an unknown kind, and a kernel name that is not UTF-8.
    const lastArg = full.length - 17;
    assert.equal(full[lastArg], 1, 'the buffer argument starts where the test says');
    assertProtocol(() => compactMeta.decode(patched(lastArg, 3)), /argument 2 has the unknown kind 3/);
    // The i64 before it ('5', its one character just before the buffer argument) made not ASCII.
    assert.equal(full[lastArg - 1], '5'.charCodeAt(0));
    assertProtocol(() => compactMeta.decode(patched(lastArg - 1, 0xe9)), /argument 1 is not ASCII/);
    const name = compactBytes(launch({ kernel: 'ab', args: [] }));
    const nameAt = name.length - 4;
    name.set([0xc3, 0x28], nameAt);
    assertProtocol(() => compactMeta.decode(name), /kernel is not UTF-8/);
    // A count of 65,535 arguments in a few bytes: refused at the first missing one, nothing allocated for the rest.
    const many = compactBytes(launch({ args: [] }));
    many.set([0xff, 0xff], many.length - 2);
    assertProtocol(() => compactMeta.decode(many), /ends inside its argument 0/);
  });

  it('fuzz: mutated compact metas decode to objects or fail with PROTOCOL only', () => {
    const seed = process.env.COMPACT_FUZZ_SEED ? Number(process.env.COMPACT_FUZZ_SEED) : Date.now() >>> 0;
    const random = new Random(seed);
    const int = (below: number) => random.below(below);
    const samples = [
      compactBytes(launch()),
      compactBytes(launch({ teams: [1, 2, 3], threads: [7, 7], timeoutMs: 9, args: [{ i64: '-12' }, NaN] })),
      compactBytes({ op: 'reply', id: 77 }),
    ];
    let decoded = 0;
    for (let round = 0; round < 20_000; round++) {
      const bytes = samples[int(samples.length)]!.slice();
      for (let flips = 1 + int(4); flips > 0; flips--) bytes[int(bytes.length)] = int(256);
      const cut = int(5) === 0 ? bytes.subarray(0, int(bytes.length + 1)) : bytes;
      try {
        const meta = compactMeta.decode(cut);
        assert.equal(Object.getPrototypeOf(meta), Object.prototype, `seed ${seed}`);
        assert.ok(meta.op === 'launch' || meta.op === 'reply', `seed ${seed}`);
        decoded++;
      } catch (error) {
        assert.ok(OffloadError.is(error, 'PROTOCOL'), `seed ${seed}: ${String(error)}`);
      }
    }
    assert.ok(decoded > 0, 'some mutations still decode (the fuzzer reaches past the first checks)');
  });
});

describe('negotiating the compact form with a real proxy', { timeout: 120_000 }, () => {
  let proxy: ProxyProcess;
  before(async () => {
    proxy = await startProxy({ threads: 1 });
  });
  after(() => proxy?.stop());

  it('answers a client that offers it in compact, and one that does not in JSON', async () => {
    const json = await RawClient.open(proxy.address);
    const compact = await RawClient.open(proxy.address, compactMeta);
    try {
      assert.equal((await json.login(proxy.token)).compact, undefined, 'the proxy does not offer what was not asked');
      assert.equal((await compact.login(proxy.token)).compact, true);
      for (const client of [json, compact]) {
        const before = client.bytesReceived;
        client.send({ op: 'ping', id: 2 });
        assert.deepEqual(await client.reply(2), { op: 'reply', id: 2 });
        // The JSON client's decoder knows no compact frame: the reply it read was JSON.
        assert.equal(
          client.bytesReceived - before,
          client === compact ? PREFIX_BYTES + 9 : PREFIX_BYTES + '{"op":"reply","id":2}'.length,
        );
      }
    } finally {
      json.close();
      compact.close();
    }
  });

  it('closes a connection that sends a compact frame before offering it', async () => {
    for (const login of [false, true]) {
      const raw = await RawClient.open(proxy.address);
      try {
        if (login) await raw.login(proxy.token);
        await raw.write(encodeFrame({ op: 'reply', id: 3 }, undefined, compactMeta));
        await raw.closedWithin(5000);
      } finally {
        raw.close();
      }
    }
  });

  it('runs launches compact with the runtime, and falls back to JSON with a proxy that does not take the offer', async () => {
    for (const takes of [true, false]) {
      const [client, fake] = LoopbackTransport.pair();
      const received: Frame[] = [];
      fake.onFrame = (frame) => {
        received.push(frame);
        if (frame.meta.op === 'hello') {
          assert.equal(frame.meta.compact, true, 'the client offers the compact form');
          if (takes) fake.metaCodec = compactMeta;
          fake.send({ op: 'reply', id: frame.meta.id, devices: [], peers: [], ...(takes ? { compact: true } : {}) });
        } else {
          fake.send({ op: 'reply', id: frame.meta.id });
        }
      };
      const connection = await RemoteConnection.open('fake', { connect: () => Promise.resolve(client) });
      try {
        const sentBefore = client.stats.bytesSent;
        await connection.request(launch() as never);
        // Compact, a buffer argument always has its offset; in JSON it is left out when 0.
        const buffer4 = takes ? { buffer: 4, offset: 0 } : { buffer: 4 };
        assert.deepEqual(received[1]!.meta.args, [10_000, 2.5, buffer4, { buffer: 5, offset: 64 }]);
        const sent = client.stats.bytesSent - sentBefore;
        if (takes) assert.equal(client.metaCodec, compactMeta);
        else assert.equal(client.metaCodec, undefined, 'taken back: the proxy did not take it');
        const id = received[1]!.meta.id;
        const { id: _id, ...fields } = launch();
        const expected = encodeFrame({ ...fields, id }, undefined, takes ? compactMeta : undefined).length;
        assert.equal(sent, expected, `the launch went ${takes ? 'compact' : 'as JSON'}`);
        assert.ok(takes ? sent < 130 : sent > 150);
      } finally {
        connection.close();
      }
    }
    assert.equal(PROTOCOL_VERSION, 1, 'the offer needs no new protocol version: both ends agree in the hello');
  });
});
