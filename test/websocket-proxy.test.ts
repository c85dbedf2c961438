// The proxy over WebSocket (ws:// and wss://): remote launches from Node, the Origin check
// before any frame, and hostile bytes (frames too large, malformed, trickled, never read) getting
// the same answers as over TCP, from in-process proxies and a real `offload proxy` process; then
// the frame fuzzer pointed at its WebSocket listener (5,000 frames here; `npm run fuzz -- 100000 --ws`
// for the long run).
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Offload } from '../src/index.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { ProxyServer } from '../src/proxy/server.js';
import { encodeFrame, encodeHead, FRAME_MAGIC, FrameDecoder, writeU32, type Frame } from '../src/transport/frame.js';
import { HEARTBEAT_OP } from '../src/transport/heartbeat.js';
import { MAX_MESSAGE_BYTES, parseWebSocketAddress } from '../src/transport/websocket.js';
import { checkOrigins } from '../src/transport/websocket-node.js';
import { rejectsWith } from './conformance/suite.js';
import { openByteStream, type ByteStream } from './helpers/byte-stream.js';
import { fuzzProxy, tcpTarget } from './helpers/proxy-fuzz.js';
import { checkServed, proxyStats, startProxy } from './helpers/proxy.js';

const token = 'websocket-token-0123456789';
const MiB = 1024 * 1024;
const PAGE = 'http://page.example:8080';
const certs = fileURLToPath(new URL('fixtures/tls/', import.meta.url));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A frame whose prefix says `metaBytes` and `payloadBytes` and whose meta is `meta` as given (maybe not JSON). */
function rawFrame(meta: Uint8Array, metaBytes = meta.length, payloadBytes = 0): Uint8Array {
  const bytes = new Uint8Array(16 + meta.length);
  writeU32(bytes, 0, FRAME_MAGIC);
  writeU32(bytes, 4, metaBytes);
  writeU32(bytes, 8, payloadBytes % 2 ** 32);
  writeU32(bytes, 12, Math.floor(payloadBytes / 2 ** 32));
  bytes.set(meta, 16);
  return bytes;
}

const hello = () => encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token });
const text = (value: string) => new TextEncoder().encode(value);

/** What a proxy answered on one connection: its replies (code and message of errors) and whether it closed it. */
interface Answers {
  replies: { id: unknown; code?: string; message?: string }[];
  closed: boolean;
}

/**
 * Runs `script` on a fresh stream to `address` (`login`: once the hello has been answered, so
 * that what follows never races the session being made); waits until the proxy closes it or
 * `waitMs` pass.
 */
async function answers(
  address: string,
  script: (stream: ByteStream) => Promise<void> | void,
  { waitMs = 1000, login = false }: { waitMs?: number; login?: boolean } = {},
): Promise<Answers> {
  const stream = await openByteStream(address);
  const decoder = new FrameDecoder();
  const frames: Frame[] = [];
  stream.onData = (bytes) => frames.push(...decoder.push(bytes));
  try {
    if (login) {
      stream.write(hello());
      for (let i = 0; i < 1000 && !frames.some((frame) => frame.meta.id === 1); i++) await sleep(10);
    }
    await script(stream);
    await Promise.race([stream.closed, sleep(waitMs)]);
    return {
      replies: frames
        .filter((frame) => frame.meta.op !== HEARTBEAT_OP)
        .map(({ meta }) => {
          const error = meta.error as { code: string; message: string } | undefined;
          return error ? { id: meta.id, code: error.code, message: error.message } : { id: meta.id };
        }),
      closed: stream.isClosed,
    };
  } finally {
    stream.destroy();
  }
}

/** Each hostile connection: what it sends (and how long the proxy may take to answer). */
const hostile: Record<
  string,
  { script: (stream: ByteStream) => Promise<void> | void; waitMs?: number; login?: boolean }
> = {
  'a frame other than hello before login': { script: (s) => void s.write(encodeFrame({ op: 'ping', id: 1 })) },
  'a hello over 4 KiB': {
    script: (s) =>
      void s.write(encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token, pad: 'x'.repeat(5000) })),
  },
  'a payload before login': {
    script: (s) =>
      void s.write(encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token }, new Uint8Array(8))),
  },
  'HTTP where frames are due': { script: (s) => void s.write('GET / HTTP/1.1\r\nHost: proxy\r\n\r\n') },
  'a wrong token': {
    script: (s) =>
      void s.write(encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: 'wrong-token-0123456789' })),
  },
  'silence past --login-timeout': { script: () => {}, waitMs: 3000 },
  'a frame announcing a 1 TiB payload': { login: true, script: (s) => void s.write(rawFrame(text('{}'), 2, 2 ** 40)) },
  'a meta of 70,000 bytes': { login: true, script: (s) => void s.write(rawFrame(new Uint8Array(0), 70_000)) },
  'a bad magic': { login: true, script: (s) => void s.write(text('OFLXgarbage-garbage-garbage')) },
  'a meta that is not JSON': { login: true, script: (s) => void s.write(rawFrame(text('{"op":"ping","id":'))) },
  'an unknown op': { login: true, script: (s) => void s.write(encodeFrame({ op: 'nonsense', id: 2 })) },
  'an alloc of -1 bytes': {
    login: true,
    script: (s) => void s.write(encodeFrame({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: -1, kind: 'device' })),
  },
  'an alloc on a device that does not exist, then a ping': {
    login: true,
    script: (s) =>
      void s.write(
        concat(
          encodeFrame({ op: 'alloc', id: 2, device: 7, buffer: 1, bytes: 16, kind: 'device' }),
          encodeFrame({ op: 'ping', id: 3 }),
        ),
      ),
  },
  'a frame trickled a byte every 200 ms': {
    // --peer-timeout 6000: a frame must gain 16 KiB a second.
    login: true,
    script: async (s) => {
      s.write(encodeHead({ op: 'ping', id: 2 }, MiB));
      for (let i = 0; i < 20 && s.write(new Uint8Array(1)); i++) await sleep(200);
    },
    waitMs: 0,
  },
};

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

describe('a proxy over WebSocket, beside the same proxy over TCP', { timeout: 120_000 }, () => {
  let tcp: ProxyServer;
  let ws: ProxyServer;
  before(async () => {
    const options = {
      token,
      loginTimeoutMs: 1000,
      peerTimeoutMs: 6000,
      runtime: { host: { threads: 1, memoryBytes: 64 * MiB }, webgpu: false as const },
    };
    tcp = await ProxyServer.start({ ...options, listen: '127.0.0.1:0' });
    ws = await ProxyServer.start({ ...options, listen: 'ws://127.0.0.1:0', allowOrigins: [PAGE] });
  });
  after(async () => {
    await Promise.all([tcp?.shutdown(), ws?.shutdown()]);
  });

  it('says it listens on a ws:// address and runs a remote launch for a Node client', async () => {
    assert.match(ws.address, /^ws:\/\/127\.0\.0\.1:\d+$/);
    await checkServed({ proxies: [ws.address], token });
    // A program sends no Origin: it is let in, and judged by its token alone.
    await rejectsWith(
      Offload.init({ host: false, webgpu: false, proxies: [ws.address], token: 'not-the-token-0123456789' }),
      'UNAUTHORIZED',
    );
  });

  it('answers every hostile connection exactly as over TCP', async () => {
    const names = Object.keys(hostile);
    const run = (address: string) =>
      Promise.all(names.map((name) => answers(address, hostile[name]!.script, hostile[name])));
    const [overTcp, overWs] = await Promise.all([run(tcp.address), run(ws.address)]);
    const table = (list: Answers[]) =>
      Object.fromEntries(
        names.map((name, i) => [
          name,
          // How many bytes a trickled frame gained in its window depends on timing, not on the transport.
          JSON.parse(
            JSON.stringify(list[i]).replace(/gained \d+ bytes in (\d+) ms \(\d+ so far\)/, 'gained N bytes in $1 ms'),
          ),
        ]),
      );
    assert.deepEqual(table(overWs), table(overTcp));
    // And the answers are the ones a proxy owes (the same over both, checked once).
    const by = table(overTcp) as Record<string, Answers>;
    assert.deepEqual(by['a frame other than hello before login'], {
      replies: [{ id: 1, code: 'PROTOCOL', message: "the first frame must be 'hello', not 'ping'" }],
      closed: true,
    });
    assert.match(by['a hello over 4 KiB']!.replies[0]!.message!, /before login/);
    assert.match(by['a payload before login']!.replies[0]!.message!, /before login/);
    assert.deepEqual(by['HTTP where frames are due'], { replies: [], closed: true });
    assert.equal(by['a wrong token']!.replies[0]!.code, 'UNAUTHORIZED');
    assert.match(by['silence past --login-timeout']!.replies[0]!.message!, /no login within 1000 ms/);
    const codes = (name: string) => by[name]!.replies.map((reply) => [reply.id, reply.code ?? 'ok']);
    assert.deepEqual(codes('a frame announcing a 1 TiB payload'), [
      [1, 'ok'],
      [0, 'PROTOCOL'],
    ]);
    assert.deepEqual(codes('a meta of 70,000 bytes'), [
      [1, 'ok'],
      [0, 'PROTOCOL'],
    ]);
    assert.deepEqual(by['a bad magic'], { replies: [{ id: 1 }], closed: true });
    assert.deepEqual(by['a meta that is not JSON'], { replies: [{ id: 1 }], closed: true });
    assert.deepEqual(codes('an unknown op'), [
      [1, 'ok'],
      [2, 'PROTOCOL'],
    ]);
    assert.deepEqual(codes('an alloc of -1 bytes'), [
      [1, 'ok'],
      [2, 'PROTOCOL'],
    ]);
    assert.deepEqual(codes('an alloc on a device that does not exist, then a ping'), [
      [1, 'ok'],
      [2, 'NOT_FOUND'],
      [3, 'ok'],
    ]);
    assert.equal(by['an alloc on a device that does not exist, then a ping']!.closed, false);
    assert.match(by['a frame trickled a byte every 200 ms']!.replies[1]!.message!, /gained N bytes in 1000 ms/);
    assert.equal(by['a frame trickled a byte every 200 ms']!.closed, true);
    // Both proxies serve on.
    await Promise.all([checkServed({ proxies: [tcp.address], token }), checkServed({ proxies: [ws.address], token })]);
  });

  it('refuses a page whose origin is not allowed with HTTP 403, before any frame, and lets an allowed one in', async () => {
    // The connections of the tests before have all closed: any the page made would show.
    for (let i = 0; i < 500 && ws.stats(0).connections > 0; i++) await sleep(10);
    const before = ws.stats(0).connections;
    const refused = await openByteStream(ws.address, { origin: 'https://evil.example' }).then(
      () => assert.fail('a page of another origin was let in'),
      (error: { status?: number; response?: NodeJS.ReadableStream }) => error,
    );
    assert.equal(refused.status, 403);
    let body = '';
    refused.response!.setEncoding('utf8');
    for await (const chunk of refused.response!) body += String(chunk);
    assert.match(body, /origin 'https:\/\/evil\.example' may not use this proxy: start it with --allow-origin/);
    assert.equal(ws.stats(0).connections, before, 'no connection reached the proxy');
    // The allowed page logs in and is served.
    const page = await answers(ws.address, (s) => void s.write(encodeFrame({ op: 'ping', id: 2 })), {
      login: true,
      waitMs: 300,
    });
    assert.deepEqual(page, { replies: [{ id: 1 }, { id: 2 }], closed: false });
    const allowed = await openByteStream(ws.address, { origin: PAGE });
    allowed.destroy();
  });

  it('closes a connection that sends a text message or a message over 64 KiB, and serves the next', async () => {
    const textual = await openByteStream(ws.address);
    textual.message!('{"op":"hello"}');
    await textual.closed;
    assert.match(textual.closeStatus!.reason, /^PROTOCOL: .* sent a text message/);
    const large = await openByteStream(ws.address);
    large.write(hello());
    large.message!(new Uint8Array(MAX_MESSAGE_BYTES + 1));
    await large.closed;
    assert.equal(large.closeStatus!.code, 1009, 'message too big');
    await checkServed({ proxies: [ws.address], token });
  });

  it('answers plain HTTP with 426, and drops the oldest of many connections that never ask for their upgrade', async () => {
    const { host, port } = parseWebSocketAddress(ws.address);
    const response = await fetch(`http://${host}:${port}/`);
    assert.equal(response.status, 426);
    assert.match(await response.text(), /offload proxy/);
    const silent = await Promise.all(
      Array.from(
        { length: 70 },
        () =>
          new Promise<net.Socket>((resolve, reject) => {
            const socket = net.connect({ host, port }, () => resolve(socket));
            socket.on('error', reject);
          }),
      ),
    );
    const closed = silent.map((socket) => new Promise<void>((resolve) => socket.once('close', () => resolve())));
    await Promise.race([Promise.all(closed.slice(0, 6)), sleep(5000)]);
    assert.equal(silent.filter((socket) => socket.destroyed || socket.readyState !== 'open').length, 6);
    await checkServed({ proxies: [ws.address], token });
    for (const socket of silent) socket.destroy();
  });

  it('refuses to start with an origin not written as a browser sends it, with origins on TCP, or wss:// without a certificate', async () => {
    assert.throws(() => checkOrigins(['https://page.example/']), {
      code: 'INVALID_ARGUMENT',
      message: /--allow-origin/,
    });
    assert.throws(() => checkOrigins(['page.example']), { code: 'INVALID_ARGUMENT' });
    assert.equal(checkOrigins(['*', 'http://127.0.0.1:8080']).size, 2);
    await rejectsWith(
      ProxyServer.start({
        listen: '127.0.0.1:0',
        token,
        allowOrigins: [PAGE],
        runtime: { host: false, webgpu: false },
      }),
      'INVALID_ARGUMENT',
      /WebSocket listeners only/,
    );
    await rejectsWith(
      ProxyServer.start({ listen: 'wss://127.0.0.1:0', token, runtime: { host: false, webgpu: false } }),
      'INVALID_ARGUMENT',
      /--tls-cert/,
    );
    await rejectsWith(
      Offload.init({ host: false, webgpu: false, proxies: ['ws://127.0.0.1:1/?token=x'], token }),
      'INVALID_ARGUMENT',
      /never in the address/,
    );
  });
});

describe('a real `offload proxy --listen ws://`', { timeout: 240_000 }, () => {
  it('serves remote launches over ws:// and, with a certificate, over wss://', async () => {
    const plain = await startProxy({ threads: 1, memory: '64M', listen: 'ws://127.0.0.1:0' });
    const secure = await startProxy({
      threads: 1,
      memory: '64M',
      listen: 'wss://127.0.0.1:0',
      args: ['--tls-cert', path.join(certs, 'cert.pem'), '--tls-key', path.join(certs, 'key.pem')],
    });
    try {
      assert.match(plain.address, /^ws:\/\/127\.0\.0\.1:\d+$/);
      assert.match(secure.address, /^wss:\/\/127\.0\.0\.1:\d+$/);
      await checkServed({ proxies: [plain.address], token: plain.token });
      const ca = await readFile(path.join(certs, 'cert.pem'), 'utf8');
      await checkServed({ proxies: [secure.address], token: secure.token, tls: { ca } });
      await rejectsWith(
        Offload.init({ host: false, webgpu: false, proxies: [secure.address], token: secure.token }),
        'UNAUTHORIZED',
        /TLS/,
      );
    } finally {
      await Promise.all([plain.stop(), secure.stop()]);
    }
  });

  it('stops reading a client that never reads its replies, and answers everything once it reads', async () => {
    const proxy = await startProxy({
      threads: 1,
      memory: '64M',
      listen: 'ws://127.0.0.1:0',
      args: ['--quota-pending', '16M'],
    });
    try {
      const stream = await openByteStream(proxy.address);
      const decoder = new FrameDecoder();
      const frames: Frame[] = [];
      stream.onData = (bytes) => frames.push(...decoder.push(bytes));
      stream.write(
        concat(
          encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: proxy.token }),
          encodeFrame({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 256 * 1024, kind: 'device' }),
          encodeFrame({ op: 'queue', id: 3, queue: 1, device: 0 }),
        ),
      );
      for (let i = 0; i < 500 && !frames.some((frame) => frame.meta.id === 3); i++) await sleep(10);
      stream.pause(); // from here on, nothing is read
      const baseline = await proxyStats(proxy);
      // 400 reads of 256 KiB: 100 MiB of replies nobody reads.
      stream.write(
        concat(
          ...Array.from({ length: 400 }, (_, i) =>
            encodeFrame({ op: 'read', id: 10 + i, queue: 1, buffer: 1, offset: 0, bytes: 256 * 1024 }),
          ),
        ),
      );
      await sleep(2000);
      const during = await proxyStats(proxy);
      const grown = during.rssBytes - baseline.rssBytes;
      console.log(`# unread replies over WebSocket: proxy RSS +${(grown / MiB).toFixed(1)} MiB`);
      assert.ok(grown < 64 * MiB, `the proxy grew by ${(grown / MiB).toFixed(1)} MiB`);
      stream.resume();
      const answered = () => frames.filter((frame) => frame.meta.op === 'reply' && (frame.meta.id as number) >= 10);
      for (let i = 0; i < 3000 && answered().length < 400; i++) await sleep(10);
      assert.equal(answered().length, 400, 'every read answered once the client reads');
      const refused = answered().filter((frame) => frame.meta.error !== undefined);
      for (const frame of refused) assert.equal((frame.meta.error as { code: string }).code, 'OUT_OF_MEMORY');
      assert.ok(400 - refused.length >= 64, `${400 - refused.length} reads served`);
      stream.destroy();
      await checkServed({ proxies: [proxy.address], token: proxy.token });
    } finally {
      await proxy.stop();
    }
  });

  it('survives 5,000 fuzzed frames over 8 WebSocket connections, closing offenders with PROTOCOL', async () => {
    const proxy = await startProxy({ token, threads: 1, memory: '64M', listen: 'ws://127.0.0.1:0' });
    try {
      const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
      const report = await fuzzProxy(tcpTarget(proxy.address, 8), { token, frames: 5_000, seed });
      assert.deepEqual(report.violations, [], `seed ${seed} (rerun with FUZZ_SEED=${seed}): ${JSON.stringify(report)}`);
      assert.ok(report.closedByProxy > 0 && report.replies > report.connections, JSON.stringify(report));
      assert.ok(Object.keys(report.errors).length >= 5, JSON.stringify(report.errors));
      assert.equal(proxy.child.exitCode, null, `the proxy exited:\n${proxy.output().slice(-4000)}`);
      await checkServed({ proxies: [proxy.address], token });
    } finally {
      await proxy.stop();
    }
  });
});
