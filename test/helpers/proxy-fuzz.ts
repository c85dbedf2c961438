/**
 * A frame fuzzer for the proxy. Each connection starts with a valid hello and then sends frames
 * derived from valid requests by random mutation: of the meta (fields dropped, retyped, out of
 * range, ops swapped) and of the bytes (bit flips, truncation, corrupted lengths, garbage).
 * Two targets: an in-process ProxyServer over in-memory transports (ten thousand frames take
 * seconds, every byte still goes through the frame decoder), and a real `offload proxy`
 * process over TCP or WebSocket, several connections at once (the network fuzzer).
 *
 * What must hold: the proxy neither exits nor throws nor rejects unhandled, it answers every
 * connection it keeps open, every reply's error is an OffloadError code other than an internal
 * failure, and every connection it closes is closed with PROTOCOL. Used by
 * test/proxy-fuzz.test.ts and scripts/fuzz-frames.ts (`npm run fuzz`).
 */
import { readFile } from 'node:fs/promises';
import { ErrorCode, OffloadError, errors } from '../../src/errors.js';
import { decodeBundle } from '../../src/image/bundle.js';
import { serveClient } from '../../src/proxy/handlers.js';
import { PeerLinks } from '../../src/proxy/peer-links.js';
import { CHUNK_BYTES, PROTOCOL_VERSION } from '../../src/protocol/wire.js';
import type { ProxyServer } from '../../src/proxy/server.js';
import { encodeFrame, FrameDecoder, type Frame, type MetaCodec } from '../../src/transport/frame.js';
import { compactMeta } from '../../src/protocol/compact.js';
import { fixtureBundle } from './fixtures.js';
import { LoopbackTransport } from '../../src/transport/loopback.js';
import { openByteStream } from './byte-stream.js';

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
const OPS = [
  'hello',
  'ping',
  'register',
  'load',
  'unload',
  'alloc',
  'free',
  'queue',
  'queue-destroy',
  'write',
  'read',
  'copy',
  'send-peer',
  'launch',
  'record',
  'wait',
  'wait-host',
  'signal',
  'sync',
  'chunk',
  'ready',
  'data',
  'reply',
  'fill',
  'write-rect',
  'read-rect',
  'copy-rect',
  'memory-info',
  'global',
];

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
    {
      meta: { op: 'alloc', id, device: 0, buffer: 10 + random.below(50), bytes: 64, kind: 'device' },
      payload: new Uint8Array(0),
    },
    { meta: { op: 'queue', id, queue: 2 + random.below(20), device: 0 }, payload: new Uint8Array(0) },
    { meta: { op: 'write', id, queue: 1, buffer: 1, offset: random.below(64), bytes: 8 }, payload: small },
    { meta: { op: 'write', id, queue: 1, buffer: 1, offset: 0, bytes: 16, stream: true }, payload: new Uint8Array(0) },
    { meta: { op: 'chunk', id: id - 1, offset: 0 }, payload: small },
    { meta: { op: 'read', id, queue: 1, buffer: 1, offset: 0, bytes: 16 }, payload: new Uint8Array(0) },
    {
      meta: { op: 'copy', id, queue: 1, src: 1, srcOffset: 0, dst: 2, dstOffset: 8, bytes: 16 },
      payload: new Uint8Array(0),
    },
    {
      meta: {
        op: 'launch',
        id,
        queue: 1,
        image: 1,
        kernel: 'add_i32',
        teams: 2,
        threads: 1,
        args: [4, 1, { buffer: 1 }],
      },
      payload: new Uint8Array(0),
    },
    {
      meta: {
        op: 'launch',
        id,
        queue: 1,
        image: 1,
        kernel: 'sum_i64',
        teams: 1,
        threads: 1,
        args: [{ i64: '12345678901234' }, { buffer: 2 }],
      },
      payload: new Uint8Array(0),
    },
    { meta: { op: 'record', id, queue: 1, event: id }, payload: new Uint8Array(0) },
    { meta: { op: 'wait', id, queue: 1, event: id - 1 }, payload: new Uint8Array(0) },
    { meta: { op: 'wait-host', id, queue: 2, gate: random.below(4) }, payload: new Uint8Array(0) },
    { meta: { op: 'signal', id, gate: random.below(4) }, payload: new Uint8Array(0) },
    { meta: { op: 'sync', id, queue: 1 }, payload: new Uint8Array(0) },
    { meta: { op: 'free', id, buffer: random.below(60) }, payload: new Uint8Array(0) },
    { meta: { op: 'load', id, image: 1, device: 0 }, payload: new Uint8Array(0) },
    {
      meta: { op: 'register', id, image: 2 + random.below(5), ...imageMeta },
      payload: random.below(2) ? image : random.bytes(64),
    },
    {
      meta: { op: 'fill', id, queue: 1, buffer: 1, offset: random.below(64), bytes: 8, pattern: [1, 2, 3, 4] },
      payload: new Uint8Array(0),
    },
    {
      meta: {
        op: 'write-rect',
        id,
        queue: 1,
        buffer: 1,
        width: 4,
        height: 2,
        depth: 1,
        offset: random.below(8),
        rowPitch: 8,
        slicePitch: 16,
      },
      payload: small,
    },
    {
      meta: {
        op: 'read-rect',
        id,
        queue: 1,
        buffer: 2,
        width: 4,
        height: 2,
        depth: 1,
        offset: 0,
        rowPitch: 8,
        slicePitch: 16,
      },
      payload: new Uint8Array(0),
    },
    {
      meta: {
        op: 'copy-rect',
        id,
        queue: 1,
        width: 4,
        height: 2,
        depth: 1,
        src: 1,
        srcOffset: 0,
        srcRowPitch: 8,
        srcSlicePitch: 16,
        dst: 2,
        dstOffset: 4,
        dstRowPitch: 8,
        dstSlicePitch: 16,
      },
      payload: new Uint8Array(0),
    },
    { meta: { op: 'memory-info', id, device: 0 }, payload: new Uint8Array(0) },
    {
      meta: { op: 'global', id, image: 1, device: 0, name: 'tallies', buffer: 60 + random.below(20) },
      payload: new Uint8Array(0),
    },
    { meta: { op: 'record', id, queue: 1, event: id, timing: true }, payload: new Uint8Array(0) },
    {
      meta: {
        op: 'send-peer',
        id,
        queue: 1,
        src: 1,
        srcOffset: 0,
        bytes: 8,
        peer: '127.0.0.1:1',
        grant: 'g'.repeat(43),
        device: 0,
        dst: 1,
        dstOffset: 0,
      },
      payload: new Uint8Array(0),
    },
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
      else if (typeof value === 'string')
        meta[key] = random.pick(['', 'add_i32', 'no_such_kernel', 'host', 'shared', 'device', 'x'.repeat(100)]);
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

/** One fuzzing connection to the proxy, whatever carries it. */
export interface FuzzLink {
  onFrame: (frame: Frame) => void;
  send(meta: Record<string, unknown>, payload?: Uint8Array): void;
  /** Raw bytes, as if they came off the wire. */
  inject(bytes: Uint8Array): void;
  /** Sends and reads launch frames in their compact form from now on (the hello offers it). */
  speakCompact(): void;
  /**
   * Resolves once the proxy has handled what was sent so far (as far as can be told after raw
   * bytes): true if the connection is still open. Rejects if the proxy neither answers nor
   * closes in time (it hangs).
   */
  drain(): Promise<boolean>;
  /**
   * Why the proxy closed the connection: PROTOCOL when it said so (the reason itself, or its
   * last reply), 'garbage' when it closed without a word after bytes that were not a frame.
   */
  closeReason(): OffloadError | 'garbage' | undefined;
  close(): void;
}

export interface FuzzTarget {
  connect(): Promise<FuzzLink>;
  /** Connections fuzzed at once (default 1). */
  concurrency?: number;
  /** Whether the proxy runs in this process (then unhandled rejections here are its own). */
  inProcess: boolean;
}

/** An in-process proxy over in-memory transports. */
export function loopbackTarget(server: ProxyServer): FuzzTarget {
  return {
    inProcess: true,
    async connect() {
      const [client, proxySide] = LoopbackTransport.pair();
      serveClient(proxySide, server.runtime, server, new PeerLinks());
      const link: FuzzLink = {
        onFrame: () => {},
        send: (meta, payload) => void client.send(meta, payload),
        inject: (bytes) => client.other.inject(bytes),
        speakCompact: () => (client.metaCodec = compactMeta),
        drain: async () => {
          await settle();
          await settle();
          return !client.closed;
        },
        closeReason: () => client.closeReason,
        close: () => client.close(),
      };
      client.onFrame = (frame) => link.onFrame(frame);
      return link;
    },
  };
}

/**
 * A proxy listening at `address` (a real process), over TCP sockets, or over WebSocket for a
 * `ws://` address (the same bytes, cut into messages); `concurrency` connections at once.
 */
export function tcpTarget(address: string, concurrency = 8): FuzzTarget {
  let pings = 2 ** 40; // ids of the fuzzer's own pings: far from the frames' ids
  return {
    inProcess: false,
    concurrency,
    async connect() {
      const socket = await openByteStream(address);
      let codec: MetaCodec | undefined;
      const decoder = new FrameDecoder(undefined, undefined, () => codec);
      let closed = false;
      let injected = false;
      let lastError: { code?: unknown; message?: unknown } | undefined;
      const waiting = new Map<number, (open: boolean) => void>();
      const link: FuzzLink = {
        onFrame: () => {},
        send: (meta, payload) => {
          if (!closed) socket.write(encodeFrame(meta, payload, codec));
        },
        speakCompact: () => (codec = compactMeta),
        inject: (bytes) => {
          injected = true;
          if (!closed) socket.write(bytes);
        },
        drain: async () => {
          if (closed) return false;
          if (injected) {
            // Past raw bytes the proxy may rightly wait for the rest of a frame they began: a
            // ping would only complete it. Give the proxy a moment; the connection ends soon.
            await new Promise((resolve) => setTimeout(resolve, 1));
            return !closed;
          }
          const id = pings++;
          return new Promise((resolve, reject) => {
            const timer = setTimeout(
              () => reject(new Error(`the proxy neither answered a ping nor closed within 10 s`)),
              10_000,
            );
            waiting.set(id, (open) => {
              clearTimeout(timer);
              resolve(open);
            });
            link.send({ op: 'ping', id });
          });
        },
        closeReason: () => {
          if (lastError?.code === 'PROTOCOL') return errors.protocol(String(lastError.message));
          if (injected) return 'garbage';
          return lastError
            ? new OffloadError(
                'DEVICE_LOST',
                `closed after a ${String(lastError.code)} reply: ${String(lastError.message)}`,
              )
            : undefined;
        },
        close: () => socket.destroy(),
      };
      socket.onData = (chunk) => {
        let frames: Frame[];
        try {
          frames = decoder.push(chunk);
        } catch (error) {
          lastError = { code: 'FUZZER', message: `the proxy sent a malformed frame: ${String(error)}` };
          socket.destroy();
          return;
        }
        for (const frame of frames) {
          const error = frame.meta.error as { code?: unknown; message?: unknown } | undefined;
          if (error !== undefined) lastError = error;
          const done = waiting.get(frame.meta.id as number);
          if (done) {
            waiting.delete(frame.meta.id as number);
            done(true);
          } else {
            link.onFrame(frame);
          }
        }
      };
      void socket.closed.then(() => {
        closed = true;
        for (const done of waiting.values()) done(false);
        waiting.clear();
      });
      return link;
    },
  };
}

export interface FuzzOptions {
  token: string;
  frames: number;
  seed: number;
  perConnection?: number;
}

export async function fuzzProxy(target: FuzzTarget, options: FuzzOptions): Promise<FuzzReport> {
  const perConnection = options.perConnection ?? 40;
  const report: FuzzReport = { frames: 0, connections: 0, closedByProxy: 0, replies: 0, errors: {}, violations: [] };
  const violation = (text: string) => {
    if (report.violations.length < 20) report.violations.push(text);
  };
  const onUnhandled = (reason: unknown) => violation(`unhandled rejection: ${String(reason)}`);
  const onUncaught = (error: unknown) => violation(`uncaught exception: ${String(error)}`);
  if (target.inProcess) {
    process.on('unhandledRejection', onUnhandled);
    process.on('uncaughtException', onUncaught);
  }

  const bundle = decodeBundle(await readFile(await fixtureBundle()));
  const image = bundle.images[0]!.bytes;
  const { offset: _offset, size: _size, ...info } = bundle.images[0]!.info;
  const imageMeta = { name: 'fuzz', info, entries: bundle.manifest.entries };
  let id = 1;

  /** One connection's life: a valid session, then mutated frames, then whether and how it ended. */
  const fuzzConnection = async (random: Random): Promise<void> => {
    const link = await target.connect();
    report.connections++;
    /** Bytes asked for by this connection's well-formed reads, by id, and the data sent for them so far. */
    const reads = new Map<number, { asked: number; sent: number }>();
    link.onFrame = (frame) => {
      report.replies++;
      if (frame.meta.op === 'data') {
        // A read's data comes in chunks of 1 to CHUNK_BYTES bytes, never more in all than it asked for.
        const read = reads.get(frame.meta.id as number);
        const length = frame.payload.byteLength;
        if (length === 0 || length > CHUNK_BYTES) violation(`a data frame of ${length} bytes`);
        if (read && (read.sent += length) > read.asked)
          violation(`${read.sent} bytes of data for a read of ${read.asked}`);
      }
      const error = frame.meta.error as { code?: unknown; message?: unknown } | undefined;
      if (error === undefined) return;
      const code = String(error.code);
      report.errors[code] = (report.errors[code] ?? 0) + 1;
      if (!CODES.has(code)) violation(`reply error with unknown code ${code}`);
      if (code === 'INTERNAL') violation(`internal failure for ${JSON.stringify(frame.meta).slice(0, 300)}`);
    };
    if (report.connections % 10 === 3) {
      // Before login: anything but a hello ends the connection at once, with PROTOCOL.
      report.frames++;
      const frame = mutateMeta(random, corpus(random, id++, image, imageMeta), false);
      link.send(frame.meta, frame.payload);
      if (await link.drain())
        return violation(`a ${String(frame.meta.op)} frame before login left the connection open`);
      report.closedByProxy++;
      return;
    }
    // A valid session: hello, the fixture image (on some connections), two buffers, a queue.
    // Half the sessions speak the compact form of launch frames, so its decoder is fuzzed too.
    const compact = report.connections % 4 < 2;
    link.send({ op: 'hello', id: id++, version: PROTOCOL_VERSION, token: options.token, compact });
    if (compact) link.speakCompact();
    if (report.connections % 5 === 1) {
      link.send({ op: 'register', id: id++, image: 1, ...imageMeta }, image);
      link.send({ op: 'load', id: id++, image: 1, device: 0 });
    }
    link.send({ op: 'alloc', id: id++, device: 0, buffer: 1, bytes: 256, kind: 'device' });
    link.send({ op: 'alloc', id: id++, device: 0, buffer: 2, bytes: 256, kind: 'device' });
    link.send({ op: 'queue', id: id++, queue: 1, device: 0 });
    let open = await link.drain();
    if (!open) violation(`a valid session was closed: ${String(link.closeReason())}`);

    // Every other connection keeps its frames well-formed, so it lives long enough for its
    // wrong-but-valid requests to be answered with coded errors.
    const wellFormed = report.connections % 2 === 0;
    for (let n = 0; n < perConnection && open; n++) {
      report.frames++;
      const frame = corpus(random, id++, image, imageMeta);
      const kind = wellFormed ? random.pick([0, 0, 9]) : random.below(10);
      if (kind < 6) {
        const mutated = mutateMeta(random, frame, wellFormed);
        if (mutated.meta.op === 'read' && typeof mutated.meta.bytes === 'number')
          reads.set(mutated.meta.id as number, { asked: mutated.meta.bytes, sent: 0 });
        link.send(mutated.meta, mutated.payload);
      } else if (kind < 9) {
        link.inject(mutateBytes(random, encodeFrame(frame.meta, frame.payload, compact ? compactMeta : undefined)));
      } else {
        link.send(frame.meta, frame.payload);
      }
      if (n % 8 === 7) open = await link.drain();
    }
    if (await link.drain()) {
      link.close();
      return;
    }
    report.closedByProxy++;
    const reason = link.closeReason();
    if (reason !== 'garbage' && !(reason instanceof OffloadError && reason.code === 'PROTOCOL'))
      violation(`connection closed with ${String(reason)}, not PROTOCOL`);
  };

  try {
    const workers = Array.from({ length: target.concurrency ?? 1 }, async (_, worker) => {
      // Each worker its own stream of choices: the same seed makes the same frames.
      const random = new Random((options.seed + worker * 0x9e3779b9) >>> 0);
      while (report.frames < options.frames && report.violations.length === 0) {
        try {
          await fuzzConnection(random);
        } catch (error) {
          violation(String(error));
        }
        await settle();
      }
    });
    await Promise.all(workers);
  } finally {
    if (target.inProcess) {
      process.off('unhandledRejection', onUnhandled);
      process.off('uncaughtException', onUncaught);
    }
  }
  return report;
}
