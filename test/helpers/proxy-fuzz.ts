/**
 * A frame fuzzer for the proxy: connections over in-memory transports (so ten thousand frames
 * take seconds, while every byte still goes through the frame decoder) to a real ProxyServer,
 * each starting with a valid hello and then sending frames derived from valid requests by random
 * mutation: of the meta (fields dropped, retyped, out of range, ops swapped) and of the bytes
 * (bit flips, truncation, corrupted lengths, garbage).
 *
 * What must hold: nothing throws out of the proxy, nothing rejects unhandled, every reply's
 * error is an OffloadError code other than an internal failure, and every connection the proxy
 * closes is closed with PROTOCOL. Used by test/proxy-fuzz.test.ts and scripts/fuzz-frames.ts.
 */
import { readFile } from 'node:fs/promises';
import { ErrorCode, OffloadError } from '../../src/errors.js';
import { decodeBundle } from '../../src/image/bundle.js';
import { ProxyConnection } from '../../src/proxy/connection.js';
import { PeerLinks } from '../../src/proxy/peer-links.js';
import { PROTOCOL_VERSION } from '../../src/proxy/protocol.js';
import type { ProxyServer } from '../../src/proxy/server.js';
import { encodeFrame, type Frame } from '../../src/transport/frame.js';
import { fixtureBundle } from './fixtures.js';
import { LoopbackTransport } from './loopback.js';

/** xorshift32: small, seedable, good enough to pick mutations. */
export class Random {
  constructor(private state: number) {
    if (this.state === 0) this.state = 0x9e3779b9;
  }

  next(): number {
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state;
  }

  below(n: number): number {
    return this.next() % n;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)]!;
  }

  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.next() & 0xff;
    return out;
  }
}

export interface FuzzReport {
  frames: number;
  connections: number;
  /** Connections the proxy closed (each with PROTOCOL). */
  closedByProxy: number;
  replies: number;
  /** Replies with an error, by code. */
  errors: Record<string, number>;
  /** Invariant violations; empty when all is well. */
  violations: string[];
}

const CODES = new Set<string>(Object.values(ErrorCode));
const OPS = ['hello', 'ping', 'register', 'load', 'unload', 'alloc', 'free', 'queue', 'queue-destroy', 'write', 'read', 'copy', 'send-peer', 'launch', 'record', 'wait', 'wait-host', 'signal', 'sync', 'chunk', 'ready', 'data', 'reply'];

function randomValue(random: Random): unknown {
  switch (random.below(14)) {
    case 0:
      return -random.below(1000) - 1;
    case 1:
      return random.next() / 7;
    case 2:
      return 2 ** 53 + random.below(10);
    case 3:
      return 2 ** random.below(64);
    case 4:
      return '';
    case 5:
      return String.fromCharCode(...random.bytes(random.below(40)));
    case 6:
      return null;
    case 7:
      return [random.below(5), 'x', { buffer: random.below(4) }];
    case 8:
      return { i64: String(random.next()), buffer: -1 };
    case 9:
      return random.below(2) === 0;
    case 10:
      return { code: random.pick([...CODES, 'BOGUS']), message: 'fuzz' };
    case 11:
      return random.below(8);
    case 12:
      return 'x'.repeat(5000);
    default:
      return random.below(2 ** 31);
  }
}

/** Valid requests for a session that has image 1 (the fixture), buffers 1-2, queue 1. */
function corpus(random: Random, id: number, image: Uint8Array, imageMeta: Record<string, unknown>): Frame {
  const small = random.bytes(8);
  const frames: Frame[] = [
    { meta: { op: 'ping', id }, payload: new Uint8Array(0) },
    { meta: { op: 'alloc', id, device: 0, buffer: 10 + random.below(50), bytes: 64, kind: 'device' }, payload: new Uint8Array(0) },
    { meta: { op: 'queue', id, queue: 2 + random.below(20), device: 0 }, payload: new Uint8Array(0) },
    { meta: { op: 'write', id, queue: 1, buffer: 1, offset: random.below(64), bytes: 8 }, payload: small },
    { meta: { op: 'write', id, queue: 1, buffer: 1, offset: 0, bytes: 16, stream: true }, payload: new Uint8Array(0) },
    { meta: { op: 'chunk', id: id - 1, offset: 0 }, payload: small },
    { meta: { op: 'read', id, queue: 1, buffer: 1, offset: 0, bytes: 16 }, payload: new Uint8Array(0) },
    { meta: { op: 'copy', id, queue: 1, src: 1, srcOffset: 0, dst: 2, dstOffset: 8, bytes: 16 }, payload: new Uint8Array(0) },
    { meta: { op: 'launch', id, queue: 1, image: 1, kernel: 'add_i32', teams: 2, threads: 1, args: [4, 1, { buffer: 1 }] }, payload: new Uint8Array(0) },
    { meta: { op: 'launch', id, queue: 1, image: 1, kernel: 'sum_i64', teams: 1, threads: 1, args: [{ i64: '12345678901234' }, { buffer: 2 }] }, payload: new Uint8Array(0) },
    { meta: { op: 'record', id, queue: 1, event: id }, payload: new Uint8Array(0) },
    { meta: { op: 'wait', id, queue: 1, event: id - 1 }, payload: new Uint8Array(0) },
    { meta: { op: 'wait-host', id, queue: 2, gate: random.below(4) }, payload: new Uint8Array(0) },
    { meta: { op: 'signal', id, gate: random.below(4) }, payload: new Uint8Array(0) },
    { meta: { op: 'sync', id, queue: 1 }, payload: new Uint8Array(0) },
    { meta: { op: 'free', id, buffer: random.below(60) }, payload: new Uint8Array(0) },
    { meta: { op: 'load', id, image: 1, device: 0 }, payload: new Uint8Array(0) },
    { meta: { op: 'register', id, image: 2 + random.below(5), ...imageMeta }, payload: random.below(2) ? image : random.bytes(64) },
    { meta: { op: 'send-peer', id, queue: 1, src: 1, srcOffset: 0, bytes: 8, peer: '127.0.0.1:1', grant: 'g'.repeat(43), device: 0, dst: 1, dstOffset: 0 }, payload: new Uint8Array(0) },
  ];
  return random.pick(frames);
}

/**
 * Most mutations keep every field well-typed but wrong (ids nobody owns, offsets out of
 * range, unknown kernels): those must get coded error replies. The others break the
 * frame's shape (fields dropped or retyped, ops swapped): those must close with PROTOCOL.
 */
function mutateMeta(random: Random, frame: Frame, semanticOnly: boolean): Frame {
  const meta = { ...frame.meta };
  const keys = Object.keys(meta).filter((key) => key !== 'op' && key !== 'id');
  const semantic = semanticOnly || random.below(10) < 7;
  for (let n = 1 + random.below(3); n > 0 && keys.length > 0; n--) {
    const key = random.pick(keys);
    if (semantic) {
      const value = meta[key];
      if (typeof value === 'number') meta[key] = random.pick([0, 1, 3, 255, 4096, 2 ** 20, 2 ** 40, random.below(100)]);
      else if (typeof value === 'string') meta[key] = random.pick(['', 'add_i32', 'no_such_kernel', 'host', 'shared', 'device', 'x'.repeat(100)]);
      else if (Array.isArray(value)) meta[key] = value.slice(0, random.below(value.length + 1));
      continue;
    }
    switch (random.below(4)) {
      case 0:
        delete meta[key];
        break;
      case 1:
        meta.op = random.pick(OPS);
        break;
      case 2:
        meta[`x${random.below(3)}`] = randomValue(random);
        break;
      default:
        meta[key] = randomValue(random);
    }
  }
  // Peers are the one thing not fuzzed: a random address would have the proxy dial out.
  if (meta.op === 'send-peer') meta.peer = '127.0.0.1:1';
  return { meta, payload: random.below(4) === 0 ? random.bytes(random.below(64)) : frame.payload };
}

function mutateBytes(random: Random, bytes: Uint8Array): Uint8Array {
  const out = Uint8Array.from(bytes);
  const view = new DataView(out.buffer);
  switch (random.below(6)) {
    case 0:
      for (let n = 1 + random.below(4); n > 0; n--) out[random.below(out.length)]! ^= 1 << random.below(8);
      return out;
    case 1:
      return out.subarray(0, random.below(out.length));
    case 2:
      view.setUint32(4, random.pick([0, 1, 2 ** 16 + 1, random.next(), out.length]), true);
      return out;
    case 3:
      view.setBigUint64(8, random.pick([2n ** 63n, 2n ** 32n, 2n ** 26n + 1n, BigInt(random.next())]), true);
      return out;
    case 4:
      return random.bytes(1 + random.below(64));
    default: {
      const joined = new Uint8Array(out.length * 2);
      joined.set(out);
      joined.set(random.bytes(out.length), out.length);
      return joined;
    }
  }
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

export async function fuzzProxy(server: ProxyServer, options: { token: string; frames: number; seed: number; perConnection?: number }): Promise<FuzzReport> {
  const random = new Random(options.seed);
  const perConnection = options.perConnection ?? 40;
  const report: FuzzReport = { frames: 0, connections: 0, closedByProxy: 0, replies: 0, errors: {}, violations: [] };
  const violation = (text: string) => {
    if (report.violations.length < 20) report.violations.push(text);
  };
  const onUnhandled = (reason: unknown) => violation(`unhandled rejection: ${String(reason)}`);
  const onUncaught = (error: unknown) => violation(`uncaught exception: ${String(error)}`);
  process.on('unhandledRejection', onUnhandled);
  process.on('uncaughtException', onUncaught);

  const bundle = decodeBundle(await readFile(await fixtureBundle()));
  const image = bundle.images[0]!.bytes;
  const { offset: _offset, size: _size, ...info } = bundle.images[0]!.info;
  const imageMeta = { name: 'fuzz', info, entries: bundle.manifest.entries };
  let id = 1;

  try {
    while (report.frames < options.frames) {
      const [client, proxySide] = LoopbackTransport.pair();
      new ProxyConnection(proxySide, server.runtime, server, new PeerLinks());
      report.connections++;
      client.onFrame = (frame) => {
        report.replies++;
        const error = frame.meta.error as { code?: unknown; message?: unknown } | undefined;
        if (error === undefined) return;
        const code = String(error.code);
        report.errors[code] = (report.errors[code] ?? 0) + 1;
        if (!CODES.has(code)) violation(`reply error with unknown code ${code}`);
        if (String(error.message).startsWith('proxy failure')) violation(`internal failure for ${JSON.stringify(frame.meta).slice(0, 300)}`);
      };
      // A valid session: hello, the fixture image (on some connections), two buffers, a queue.
      client.send({ op: 'hello', id: id++, version: PROTOCOL_VERSION, token: options.token });
      if (report.connections % 5 === 1) {
        client.send({ op: 'register', id: id++, image: 1, ...imageMeta }, image);
        client.send({ op: 'load', id: id++, image: 1, device: 0 });
      }
      client.send({ op: 'alloc', id: id++, device: 0, buffer: 1, bytes: 256, kind: 'device' });
      client.send({ op: 'alloc', id: id++, device: 0, buffer: 2, bytes: 256, kind: 'device' });
      client.send({ op: 'queue', id: id++, queue: 1, device: 0 });
      await settle();

      // Every other connection keeps its frames well-formed, so it lives long enough for its
      // wrong-but-valid requests to be answered with coded errors.
      const wellFormed = report.connections % 2 === 0;
      for (let n = 0; n < perConnection && !client.closed; n++) {
        report.frames++;
        const frame = corpus(random, id++, image, imageMeta);
        const kind = wellFormed ? random.pick([0, 0, 9]) : random.below(10);
        if (kind < 6) {
          const mutated = mutateMeta(random, frame, wellFormed);
          client.send(mutated.meta, mutated.payload);
        } else if (kind < 9) {
          client.other.inject(mutateBytes(random, encodeFrame(frame.meta, frame.payload)));
        } else {
          client.send(frame.meta, frame.payload);
        }
        if (n % 8 === 7) await settle();
      }
      await settle();
      if (client.closed) {
        report.closedByProxy++;
        const reason = client.closeReason;
        if (!(reason instanceof OffloadError) || reason.code !== 'PROTOCOL') violation(`connection closed with ${String(reason)}, not PROTOCOL`);
      } else {
        client.close();
      }
      await settle();
    }
  } finally {
    process.off('unhandledRejection', onUnhandled);
    process.off('uncaughtException', onUncaught);
  }
  return report;
}
