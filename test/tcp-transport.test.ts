import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import {
  connectTcp,
  formatAddress,
  HIGH_WATER_BYTES,
  listenTcp,
  parseAddress,
  type TcpListener,
} from '../src/transport/tcp.js';
import type { Transport } from '../src/transport/transport.js';
import type { Frame } from '../src/transport/frame.js';
import { OffloadError, type ErrorCode } from '../src/errors.js';

/** Rejects if `promise` takes longer than `ms`, so a bug shows as a failure, never a hang. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function assertOffloadError(error: unknown, code: ErrorCode, ...patterns: RegExp[]): void {
  assert.ok(OffloadError.is(error, code), `expected ${code}, got ${String(error)}`);
  for (const pattern of patterns) assert.match(error.message, pattern);
}

/** Resolves with the first close reason; counts every onClose call. */
function watchClose(transport: Transport): { closed: Promise<OffloadError | undefined>; calls: () => number } {
  let calls = 0;
  const closed = new Promise<OffloadError | undefined>((resolve) => {
    transport.onClose = (reason) => {
      calls++;
      resolve(reason);
    };
  });
  return { closed, calls: () => calls };
}

/** Collects frames until `count` have arrived. */
function collect(transport: Transport, count: number): Promise<Frame[]> {
  const frames: Frame[] = [];
  return new Promise((resolve) => {
    transport.onFrame = (frame) => {
      frames.push(frame);
      if (frames.length === count) resolve(frames);
    };
  });
}

/** A listener on an ephemeral loopback port whose accepted transports are handed out in order. */
async function listen(): Promise<{ listener: TcpListener; accepted: () => Promise<Transport> }> {
  const queue: Transport[] = [];
  const waiters: ((transport: Transport) => void)[] = [];
  const listener = await listenTcp('127.0.0.1:0', (transport) => {
    const waiter = waiters.shift();
    if (waiter) waiter(transport);
    else queue.push(transport);
  });
  const accepted = () =>
    within(
      queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise<Transport>((resolve) => waiters.push(resolve)),
      2000,
      'a connection',
    );
  return { listener, accepted };
}

/** A connected client/server pair, and a cleanup for both ends and the listener. */
async function pair(): Promise<{
  client: Transport;
  server: Transport;
  listener: TcpListener;
  done: () => Promise<void>;
}> {
  const { listener, accepted } = await listen();
  const client = await within(connectTcp(listener.address, { timeoutMs: 2000 }), 3000, 'connect');
  const server = await accepted();
  const done = async () => {
    client.close();
    server.close();
    await within(listener.close(), 2000, 'listener.close()');
  };
  return { client, server, listener, done };
}

test('parseAddress reads host:port and [v6]:port', { timeout: 60_000 }, () => {
  assert.deepEqual(parseAddress('127.0.0.1:7000'), { host: '127.0.0.1', port: 7000 });
  assert.deepEqual(parseAddress('localhost:0'), { host: 'localhost', port: 0 });
  assert.deepEqual(parseAddress('  node-7.cluster:65535 '), { host: 'node-7.cluster', port: 65535 });
  assert.deepEqual(parseAddress('[::1]:7000'), { host: '::1', port: 7000 });
  assert.deepEqual(parseAddress('[fe80::1:2]:1'), { host: 'fe80::1:2', port: 1 });
  assert.equal(formatAddress(parseAddress('[::1]:7000')), '[::1]:7000');
  assert.equal(formatAddress(parseAddress('127.0.0.1:7000')), '127.0.0.1:7000');
});

test('parseAddress rejects junk with INVALID_ARGUMENT naming the text', { timeout: 60_000 }, () => {
  for (const text of [
    '',
    'localhost',
    '127.0.0.1',
    ':7000',
    'host:',
    'host:port',
    'host:65536',
    'host:123456',
    '::1:7000',
    '[::1]',
    '[::1]7000',
    '[zz]:1',
    'a b:1',
    'host:-1',
    'host:1.5',
  ]) {
    assert.throws(
      () => parseAddress(text),
      (error: unknown) => {
        assertOffloadError(error, 'INVALID_ARGUMENT', /is not a TCP address/);
        assert.ok(
          (error as Error).message.includes(`'${text}'`),
          `message names '${text}': ${(error as Error).message}`,
        );
        return true;
      },
    );
  }
});

test('1000 small frames each way arrive in order, and the stats count them', { timeout: 10_000 }, async () => {
  const { client, server, listener, done } = await pair();
  try {
    assert.equal(client.peer, listener.address);
    assert.match(server.peer, /^127\.0\.0\.1:\d+$/);
    const atServer = collect(server, 1000);
    const atClient = collect(client, 1000);
    for (let i = 0; i < 1000; i++) {
      assert.equal(client.send({ seq: i, from: 'client' }, new Uint8Array([i & 0xff, i >> 8])), true);
      assert.equal(server.send({ seq: i, from: 'server' }, i % 2 === 0 ? undefined : new Uint8Array([i & 0xff])), true);
    }
    const [serverFrames, clientFrames] = await within(Promise.all([atServer, atClient]), 5000, '1000 frames each way');
    serverFrames.forEach((frame, i) => {
      assert.deepEqual(frame.meta, { seq: i, from: 'client' });
      assert.deepEqual([...frame.payload], [i & 0xff, i >> 8]);
    });
    clientFrames.forEach((frame, i) => {
      assert.deepEqual(frame.meta, { seq: i, from: 'server' });
      assert.deepEqual([...frame.payload], i % 2 === 0 ? [] : [i & 0xff]);
    });
    // Every byte written is counted on both ends, prefix and meta included.
    assert.equal(client.stats.framesSent, 1000);
    assert.equal(server.stats.framesReceived, 1000);
    assert.equal(server.stats.framesSent, 1000);
    assert.equal(client.stats.framesReceived, 1000);
    assert.equal(server.stats.bytesReceived, client.stats.bytesSent);
    assert.equal(client.stats.bytesReceived, server.stats.bytesSent);
    assert.ok(client.stats.bytesSent > 1000 * (16 + 2));
    assert.equal(client.closed, false);
  } finally {
    await done();
  }
});

test(
  'a 20 MiB payload in 1 MiB frames honours the high-water mark and arrives intact',
  { timeout: 20_000 },
  async () => {
    const { client, server, done } = await pair();
    try {
      const total = 20 << 20;
      const chunk = 1 << 20;
      const data = new Uint8Array(total);
      for (let i = 0; i < total; i += 4) new DataView(data.buffer).setUint32(i, Math.imul(i, 2654435761) >>> 0, true);
      const received = collect(server, total / chunk);

      let queuedBefore = 0;
      let firstRefusalAt = -1;
      let refusals = 0;
      for (let offset = 0; offset < total; offset += chunk) {
        // Each frame sends its own view of `data`, untouched until sent: the transport does not copy.
        const accepted = client.send({ offset }, data.subarray(offset, offset + chunk));
        queuedBefore += chunk;
        if (!accepted) {
          refusals++;
          if (firstRefusalAt < 0) firstRefusalAt = queuedBefore;
          await within(client.drained(), 5000, 'drained()');
        }
      }
      // Nothing reads while the loop runs synchronously, so the queue must pass the mark.
      assert.ok(refusals > 0, 'send returned false at least once');
      assert.ok(firstRefusalAt >= HIGH_WATER_BYTES, `send refused after only ${firstRefusalAt} bytes`);

      const frames = await within(received, 10_000, '20 MiB');
      const joined = Buffer.concat(frames.map((frame) => frame.payload));
      frames.forEach((frame, i) => assert.deepEqual(frame.meta, { offset: i * chunk }));
      assert.equal(joined.length, total);
      assert.ok(joined.equals(data), 'payload bytes arrive intact');
      assert.equal(server.stats.bytesReceived, client.stats.bytesSent);
    } finally {
      await done();
    }
  },
);

test(
  'connecting to a closed port rejects with DEVICE_LOST naming the address within a second',
  { timeout: 5000 },
  async () => {
    const { listener } = await listen();
    const address = listener.address;
    await listener.close();
    const started = performance.now();
    await assert.rejects(within(connectTcp(address, { timeoutMs: 1000 }), 2000, 'the refusal'), (error: unknown) => {
      assertOffloadError(error, 'DEVICE_LOST', new RegExp(address.replace(/[.[\]]/g, '\\$&')));
      return true;
    });
    assert.ok(performance.now() - started < 1000, `took ${Math.round(performance.now() - started)} ms`);
  },
);

test(
  'a bad address rejects (not throws) with INVALID_ARGUMENT; a busy port rejects listenTcp',
  { timeout: 60_000 },
  async () => {
    // Passing the promise itself: a synchronous throw would escape assert.rejects and fail here.
    const check = (error: unknown) => {
      assertOffloadError(error, 'INVALID_ARGUMENT', /'nonsense'/);
      return true;
    };
    await assert.rejects(connectTcp('nonsense'), check);
    await assert.rejects(
      listenTcp('nonsense', () => {}),
      check,
    );
    const { listener } = await listen();
    try {
      await assert.rejects(
        listenTcp(listener.address, () => {}),
        (error: unknown) => {
          assertOffloadError(
            error,
            'INVALID_ARGUMENT',
            new RegExp(`cannot listen on ${listener.address.replace(/\./g, '\\.')}`),
          );
          return true;
        },
      );
    } finally {
      await listener.close();
    }
  },
);

test('the peer closing its end fires onClose with DEVICE_LOST on the other side', { timeout: 5000 }, async () => {
  const { client, server, done } = await pair();
  try {
    const atServer = watchClose(server);
    const atClient = watchClose(client);
    client.close();
    assert.equal(await within(atClient.closed, 1000, 'client onClose'), undefined);
    assertOffloadError(await within(atServer.closed, 2000, 'server onClose'), 'DEVICE_LOST', /127\.0\.0\.1/);
    assert.equal(server.closed, true);
  } finally {
    await done();
  }
});

test('a raw peer socket destroyed fires onClose with DEVICE_LOST naming the peer', { timeout: 5000 }, async () => {
  const { listener, accepted } = await listen();
  try {
    const { host, port } = parseAddress(listener.address);
    const raw = net.connect({ host, port });
    const server = await accepted();
    const atServer = watchClose(server);
    raw.destroy();
    const reason = await within(atServer.closed, 2000, 'server onClose');
    assertOffloadError(reason, 'DEVICE_LOST');
    assert.ok(reason!.message.includes(server.peer), `'${reason!.message}' names ${server.peer}`);
    assert.equal(atServer.calls(), 1);
  } finally {
    await within(listener.close(), 2000, 'listener.close()');
  }
});

test(
  'garbage bytes from a client close its transport with PROTOCOL; the listener keeps accepting',
  { timeout: 5000 },
  async () => {
    const { listener, accepted } = await listen();
    try {
      const { host, port } = parseAddress(listener.address);
      const raw = net.connect({ host, port });
      const rawClosed = new Promise<void>((resolve) => raw.once('close', () => resolve()));
      raw.on('error', () => {}); // The server's reset may surface here; only the close matters.
      const victim = await accepted();
      const atVictim = watchClose(victim);
      let framesFromGarbage = 0;
      victim.onFrame = () => framesFromGarbage++;
      raw.write('GET / HTTP/1.1\r\nHost: offload\r\n\r\n');
      assertOffloadError(await within(atVictim.closed, 2000, 'PROTOCOL close'), 'PROTOCOL', /magic/);
      await within(rawClosed, 2000, 'the garbage client to be disconnected');
      assert.equal(framesFromGarbage, 0);
      assert.equal(victim.closed, true);

      // A well-behaved client is still served.
      const good = await within(connectTcp(listener.address, { timeoutMs: 2000 }), 3000, 'second connect');
      const server = await accepted();
      const frames = collect(server, 1);
      good.send({ hello: 'again' }, new Uint8Array([1, 2, 3]));
      const [frame] = await within(frames, 2000, 'a frame from the second client');
      assert.deepEqual(frame!.meta, { hello: 'again' });
      assert.deepEqual([...frame!.payload], [1, 2, 3]);
      assert.equal(atVictim.calls(), 1);
      good.close();
    } finally {
      await within(listener.close(), 2000, 'listener.close()');
    }
  },
);

test(
  'close() is idempotent: onClose fires once, with the first reason, and later sends do nothing',
  { timeout: 5000 },
  async () => {
    const { client, server, done } = await pair();
    try {
      const atClient = watchClose(client);
      const atServer = watchClose(server);
      const first = new OffloadError('TIMEOUT', 'first reason');
      client.close(first);
      client.close(new OffloadError('PROTOCOL', 'second reason'));
      client.close();
      assert.equal(client.closed, true);
      assert.equal(await within(atClient.closed, 1000, 'onClose'), first);

      const before = { ...client.stats };
      assert.equal(client.send({ late: true }, new Uint8Array(10)), true);
      assert.deepEqual(client.stats, before);
      await within(client.drained(), 1000, 'drained() on a closed transport');

      // The socket's own 'close' event comes later and must not fire onClose again.
      await within(atServer.closed, 2000, 'server onClose');
      await new Promise((resolve) => setTimeout(resolve, 20));
      assert.equal(atClient.calls(), 1);
      assert.equal(atServer.calls(), 1);
    } finally {
      await done();
    }
  },
);

test('listener.close() resolves with connections open, and closes them', { timeout: 5000 }, async () => {
  const { listener, accepted } = await listen();
  const clients = await Promise.all(
    [0, 1].map(() => within(connectTcp(listener.address, { timeoutMs: 2000 }), 3000, 'connect')),
  );
  const servers = [await accepted(), await accepted()];
  const clientCloses = clients.map((client) => watchClose(client).closed);
  const serverCloses = servers.map((server) => watchClose(server).closed);
  await within(listener.close(), 2000, 'listener.close()');
  for (const reason of await within(Promise.all([...clientCloses, ...serverCloses]), 2000, 'every end to close')) {
    assertOffloadError(reason, 'DEVICE_LOST');
  }
  await assert.rejects(within(connectTcp(listener.address, { timeoutMs: 1000 }), 2000, 'refusal'), (error: unknown) => {
    assertOffloadError(error, 'DEVICE_LOST');
    return true;
  });
  // A second close must not hang either.
  await within(listener.close(), 2000, 'second listener.close()');
});
