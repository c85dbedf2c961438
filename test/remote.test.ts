// Remote devices beyond the conformance suite: proxy-to-proxy copies, isolation, tokens,
// proxies and clients that die. Every proxy is a real `offload proxy` child process.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Offload, type Device, type Runtime } from '../src/index.js';
import { RemoteConnection } from '../src/plugins/remote/connection.js';
import type { RemoteDevice } from '../src/plugins/remote/device.js';
import type { ProxyStats } from '../src/proxy/server.js';
import type { OutgoingRequest } from '../src/protocol/messages.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { encodeFrame, FrameDecoder } from '../src/transport/frame.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { proxyStats, proxyStatsUntil, startPeeredProxies, startProxy, type ProxyProcess } from './helpers/proxy.js';

const MiB = 1024 * 1024;

/** The client's transport to the proxy of `device` (to count the bytes that crossed it). */
function transportOf(device: Device) {
  return (device.plugin as RemoteDevice).connection.transport;
}

function pattern(bytes: number, seed: number): Uint8Array {
  const data = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i++) data[i] = (i * 31 + seed) & 0xff;
  return data;
}

describe('two proxies', { timeout: 180_000 }, () => {
  let proxies: ProxyProcess[];
  let runtime: Runtime;
  let a: Device;
  let b: Device;
  const token = 'two-proxies-token';

  before(async () => {
    proxies = await startPeeredProxies(2, { token, threads: 1 });
    runtime = await Offload.init({
      host: { threads: 1, memoryBytes: 16 * MiB },
      proxies: proxies.map((p) => p.address),
      token,
    });
  });
  after(async () => {
    await runtime.shutdown();
    await Promise.all(proxies.map((p) => p.stop()));
  });

  it('numbers local devices first, then each proxy in order, with where they live', () => {
    assert.deepEqual(
      runtime.devices.map((d) => [d.info.plugin, d.info.location]),
      [
        ['host', 'local'],
        ['remote', proxies[0]!.address],
        ['remote', proxies[1]!.address],
      ],
    );
    [, a, b] = runtime.devices as [Device, Device, Device];
  });

  it('copies proxy to proxy without the bytes passing through the client, on either queue', async () => {
    const bytes = 24 * MiB;
    const src = await a.alloc(bytes);
    const dst = await b.alloc(bytes);
    const data = pattern(bytes, 7);
    await a.queue().write(src, data).done;
    const [ta, tb] = [transportOf(a), transportOf(b)];
    const before = [ta.stats.bytesSent + ta.stats.bytesReceived, tb.stats.bytesSent + tb.stats.bytesReceived];

    await a.queue().copy(dst, src).done; // pushed by the source's proxy
    const pushed = new Uint8Array(bytes);
    await b.queue().read(dst, pushed).done;
    assert.ok(Buffer.from(pushed).equals(Buffer.from(data)), 'push copy: the bytes arrived intact');

    await b.queue().write(dst, new Uint8Array(bytes)).done;
    const mid = [ta.stats.bytesSent + ta.stats.bytesReceived, tb.stats.bytesSent + tb.stats.bytesReceived];
    await b.queue().copy(dst, src, { srcOffset: MiB, dstOffset: 2 * MiB, byteLength: 8 * MiB }).done; // pulled by the destination's queue
    const pulled = new Uint8Array(8 * MiB);
    await b.queue().read(dst, pulled, { offset: 2 * MiB }).done;
    assert.ok(
      Buffer.from(pulled).equals(Buffer.from(data.subarray(MiB, 9 * MiB))),
      'pull copy: the bytes arrived intact',
    );
    const end = [ta.stats.bytesSent + ta.stats.bytesReceived, tb.stats.bytesSent + tb.stats.bytesReceived];

    // Between `before` and `mid` the client moved 2 x 24 MiB on b's connection (the read and the
    // zeroing write) and nothing bulk on a's; the copies themselves add only small frames.
    const copyTraffic = mid[0]! - before[0]! + (end[0]! - mid[0]!) + (end[1]! - mid[1]! - 8 * MiB);
    assert.ok(copyTraffic < 64 * 1024, `the copies moved ${copyTraffic} bytes over the client's connections`);
    await Promise.all([src.free(), dst.free()]);
  });

  it('keeps a copy after the work before it on the same queue', async () => {
    const src = await a.alloc(4 * MiB);
    const dst = await b.alloc(4 * MiB);
    const q = a.queue();
    const data = pattern(4 * MiB, 3);
    q.write(src, data);
    q.copy(dst, src);
    await q.finish();
    const out = new Uint8Array(4 * MiB);
    await b.queue().read(dst, out).done;
    assert.ok(Buffer.from(out).equals(Buffer.from(data)));
    await Promise.all([src.free(), dst.free()]);
  });
});

describe('bulk transfers', { timeout: 180_000 }, () => {
  it('streams a large write at an offset intact, without holding up another queue for its duration', async () => {
    const proxy = await startProxy({ threads: 1, memory: '128M' });
    const runtime = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    try {
      const device = runtime.devices[0]!;
      const big = await device.alloc(66 * MiB);
      const small = await device.alloc(64);
      const data = pattern(64 * MiB, 11);
      const order: string[] = [];
      const bulk = device
        .queue()
        .write(big, data, { offset: MiB + 3 })
        .done.then(() => order.push('bulk'));
      const quick = device.queue();
      quick.write(small, new Uint8Array(64).fill(1));
      const echo = new Uint8Array(64);
      quick.read(small, echo);
      await quick.finish().then(() => order.push('small'));
      await bulk;
      assert.deepEqual(order, ['small', 'bulk'], 'the small queue finished while the bulk write streamed');
      const back = new Uint8Array(64 * MiB);
      await device.queue().read(big, back, { offset: MiB + 3 }).done;
      assert.ok(Buffer.from(back).equals(Buffer.from(data)));
      const edges = new Uint8Array(2);
      await device.queue().read(big, edges.subarray(0, 1), { offset: MiB + 2 }).done;
      await device.queue().read(big, edges.subarray(1), { offset: 65 * MiB + 3 }).done;
      assert.deepEqual([...edges], [0, 0], 'nothing written outside the range');
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('streams a large read straight from device memory as the queue found it: a fill after it on the queue, and a free, wait for every byte to leave', async () => {
    const proxy = await startProxy({ threads: 1, memory: '128M' });
    const runtime = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    try {
      const device = runtime.devices[0]!;
      const big = await device.alloc(48 * MiB);
      const queue = device.queue();
      for (let round = 0; round < 3; round++) {
        const data = pattern(48 * MiB, round);
        await queue.write(big, data).done;
        const back = new Uint8Array(48 * MiB - 3);
        queue.read(big, back, { offset: 3 });
        // Done by the proxy alone, as soon as the queue gets there: it must not reach bytes of
        // the read still waiting to be sent.
        queue.fill(big, Uint32Array.of(0xdeadbeef));
        await queue.finish();
        assert.ok(Buffer.from(back).equals(Buffer.from(data).subarray(3)), `round ${round}`);
      }
      const back = new Uint8Array(48 * MiB);
      const read = queue.read(big, back).done;
      await big.free();
      await read;
      assert.ok(
        back.every((byte, i) => byte === [0xef, 0xbe, 0xad, 0xde][i % 4]),
        'the read before the free got the fill',
      );
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });
});

describe('one proxy, several clients', { timeout: 180_000 }, () => {
  let proxy: ProxyProcess;
  before(async () => {
    proxy = await startProxy({ threads: 1, memory: '64M' });
  });
  after(async () => {
    await proxy.stop();
  });

  it('isolates clients: a buffer id of another client is INVALID_BUFFER', async () => {
    const owner = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    const other = await RemoteConnection.open(proxy.address, { token: proxy.token });
    try {
      const device = owner.devices[0]!;
      const buffer = await device.alloc(64);
      await device.queue().write(buffer, new Uint8Array(64).fill(9)).done;
      const id = (buffer.allocation as unknown as { id: number }).id;
      await other.request({ op: 'queue', queue: 1, device: 0 });
      await rejectsWith(
        other.request({ op: 'read', queue: 1, buffer: id, offset: 0, bytes: 64 }),
        'INVALID_BUFFER',
        /not a live buffer of this client/,
      );
      await rejectsWith(other.request({ op: 'free', buffer: id }), 'INVALID_BUFFER');
      const out = new Uint8Array(64);
      await device.queue().read(buffer, out).done;
      assert.deepEqual([...new Set(out)], [9], "the owner's buffer is untouched");
    } finally {
      other.close();
      await owner.shutdown();
    }
  });

  it('answers a wrong token with UNAUTHORIZED and nothing else, and keeps serving', async () => {
    await rejectsWith(
      Offload.init({ host: false, proxies: [proxy.address], token: 'not-the-token' }),
      'UNAUTHORIZED',
      /wrong token/,
    );
    if (process.env.OFFLOAD_TOKEN === undefined) {
      await rejectsWith(
        Offload.init({ host: false, proxies: [proxy.address] }),
        'INVALID_ARGUMENT',
        /no token is given/,
      );
    }
    const runtime = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    assert.equal(runtime.devices.length, 1);
    await runtime.shutdown();
  });

  it('stops the kernel of a client that leaves while it loops, frees its context, and serves the next client', async () => {
    const leaving = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    const device = leaving.devices[0]!;
    const spin = await device.kernel(await leaving.register(await fixtureBundle()), 'spin');
    const flag = await device.alloc(4);
    const q = device.queue();
    q.write(flag, new Int32Array(1));
    q.launch(spin, { teams: 2 }, [flag]).done.catch(() => {});
    await proxyStatsUntil(proxy, (stats) => stats.devices[0]!.inFlight === 1);
    (device.plugin as RemoteDevice).connection.close();
    await leaving.shutdown();
    const gone = (stats: ProxyStats): boolean =>
      stats.sessions === 0 &&
      stats.contexts === 0 &&
      stats.devices[0]!.contexts === 1 &&
      stats.devices[0]!.inFlight === 0 &&
      stats.devices[0]!.images === 0;
    const after = await proxyStatsUntil(proxy, gone);
    assert.deepEqual(
      [after.sessions, after.contexts, after.devices[0]!.inFlight, after.devices[0]!.images],
      [0, 0, 0, 0],
      JSON.stringify(after),
    );
    const next = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    try {
      const iota = await next.devices[0]!.kernel(await next.register(await fixtureBundle()), 'iota_i32');
      const out = await next.devices[0]!.alloc(64);
      const result = new Int32Array(16);
      const q2 = next.devices[0]!.queue();
      q2.launch(iota, { teams: 2 }, [16, out]);
      q2.read(out, result);
      await q2.finish();
      assert.equal(result[15], 15);
    } finally {
      await next.shutdown();
    }
  });

  it('frees the context of a client that is killed: its memory, buffers and queues', async () => {
    const idle = await proxyStatsUntil(proxy, (stats) => stats.sessions === 0);
    // The child fills 48 MiB of its context's memory and is killed without shutting down.
    const script = `
      import { Offload } from ${JSON.stringify(new URL('../src/index.ts', import.meta.url).href)};
      const runtime = await Offload.init({ host: false, proxies: [${JSON.stringify(proxy.address)}], token: ${JSON.stringify(proxy.token)} });
      const device = runtime.devices[0];
      const buffer = await device.alloc(48 * 1024 * 1024);
      const q = device.queue();
      await q.write(buffer, new Uint8Array(48 * 1024 * 1024).fill(7)).done;
      console.log('allocated');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('allocated') && resolve());
        child.once('exit', (code) => reject(new Error(`the client exited early (${code})`)));
      });
      const busy = await proxyStats(proxy);
      assert.deepEqual([busy.sessions, busy.buffers, busy.contexts], [1, 1, 1]);
      assert.ok(
        busy.rssBytes > idle.rssBytes + 40 * MiB,
        `the child's 48 MiB are resident (${busy.rssBytes - idle.rssBytes} bytes more)`,
      );
      child.kill('SIGKILL');
      const freed = await proxyStatsUntil(
        proxy,
        (stats) => stats.sessions === 0 && stats.rssBytes < idle.rssBytes + 16 * MiB,
      );
      assert.deepEqual(
        [freed.sessions, freed.connections, freed.queues, freed.buffers, freed.images, freed.contexts],
        [0, 0, 0, 0, 0, 0],
      );
      assert.ok(
        freed.rssBytes < idle.rssBytes + 16 * MiB,
        `the memory went back (${freed.rssBytes - idle.rssBytes} bytes above idle)`,
      );
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('a proxy with a launch time limit', { timeout: 180_000 }, () => {
  it("stops a client's endless loop at --launch-timeout; its device and the client's memory go on", async () => {
    const proxy = await startProxy({ threads: 2, args: ['--launch-timeout', '300'] });
    const runtime = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    try {
      const device = runtime.devices[0]!;
      const library = await runtime.register(await fixtureBundle());
      const spin = await device.kernel(library, 'spin');
      const iota = await device.kernel(library, 'iota_i32');
      const flag = await device.alloc(4);
      const out = await device.alloc(64);
      const q = device.queue();
      q.write(flag, new Int32Array(1));
      q.write(out, new Int32Array(16).fill(-1));
      // No limit of its own: the proxy's applies; a longer one of its own is capped too.
      await rejectsWith(q.launch(spin, { teams: 2 }, [flag]).done, 'TIMEOUT', /kernel 'spin' .*time limit of 300 ms/);
      await q.finish().catch(() => {});
      await rejectsWith(
        q.launch(spin, { teams: 1, timeoutMs: 60_000 }, [flag]).done,
        'TIMEOUT',
        /time limit of 300 ms/,
      );
      await q.finish().catch(() => {});
      const before = new Int32Array(16);
      q.read(out, before);
      q.launch(iota, { teams: 2 }, [8, out]);
      const after = new Int32Array(16);
      q.read(out, after);
      await q.finish();
      assert.deepEqual([...before], new Array(16).fill(-1), 'memory written before the runaway launches is intact');
      assert.deepEqual([...after], [0, 1, 2, 3, 4, 5, 6, 7, ...new Array(8).fill(-1)], 'the next launch runs');
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('refuses a bad --launch-timeout, naming it', async () => {
    await assert.rejects(
      startProxy({ args: ['--launch-timeout', '5s'] }),
      /--launch-timeout must be a whole number of milliseconds/,
    );
  });
});

describe('peer links', { timeout: 180_000 }, () => {
  it("a link logs in with a buffer's write grant, no token, and may write into that buffer only", async () => {
    const proxy = await startProxy({ threads: 1 });
    const runtime = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    try {
      const device = runtime.devices[0]!;
      const target = await device.alloc(64);
      const other = await device.alloc(64);
      const grant = (target.allocation as unknown as { grant: string }).grant;
      const ids = (buffer: typeof target): number => (buffer.allocation as unknown as { id: number }).id;
      const link = await RemoteConnection.open(proxy.address, { grant });
      try {
        await link.request({ op: 'queue', queue: 1, device: 0 });
        await link.request(
          { op: 'write', queue: 1, buffer: ids(target), offset: 0, bytes: 4 },
          new Uint8Array([1, 2, 3, 4]),
        );
        const refused: OutgoingRequest[] = [
          { op: 'write', queue: 1, buffer: ids(other), offset: 0, bytes: 4 },
          { op: 'read', queue: 1, buffer: ids(target), offset: 0, bytes: 4 },
          { op: 'free', buffer: ids(target) },
          { op: 'alloc', device: 0, buffer: 99, bytes: 8, kind: 'device' },
          { op: 'copy', queue: 1, src: ids(other), dst: ids(target), srcOffset: 0, dstOffset: 0, bytes: 4 },
        ];
        for (const request of refused) {
          const payload = request.op === 'write' ? new Uint8Array(4) : undefined;
          await rejectsWith(
            link.request(request, payload),
            'UNAUTHORIZED',
            /a peer link may only write into the buffer it was granted/,
          );
        }
      } finally {
        link.close();
      }
      const out = new Uint8Array(4);
      await device.queue().read(target, out).done;
      assert.deepEqual([...out], [1, 2, 3, 4], 'the granted write landed');
      await target.free();
      await rejectsWith(RemoteConnection.open(proxy.address, { grant }), 'UNAUTHORIZED', /no such grant/);
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('refuses to link to an address that is not one of its --peers, without connecting to it', async () => {
    let knocks = 0;
    const bystander = net.createServer((socket) => {
      knocks++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => bystander.listen(0, '127.0.0.1', resolve));
    const bystanderAddress = `127.0.0.1:${(bystander.address() as net.AddressInfo).port}`;
    const proxy = await startProxy({ threads: 1 });
    const runtime = await Offload.init({ host: false, proxies: [proxy.address], token: proxy.token });
    try {
      const device = runtime.devices[0]!;
      const src = await device.alloc(16);
      const connection = (device.plugin as RemoteDevice).connection;
      await connection.request({ op: 'queue', queue: 77, device: 0 });
      const id = (src.allocation as unknown as { id: number }).id;
      const request: OutgoingRequest = {
        op: 'send-peer',
        queue: 77,
        src: id,
        srcOffset: 0,
        bytes: 16,
        peer: bystanderAddress,
        grant: 'x',
        device: 0,
        dst: 1,
        dstOffset: 0,
      };
      await rejectsWith(connection.request(request), 'UNAUTHORIZED', /links only to its peers .* is not one of them/);
      assert.equal(knocks, 0, 'the proxy did not connect to the address it was given');
    } finally {
      await runtime.shutdown();
      await proxy.stop();
      bystander.close();
    }
  });

  it('copies between two proxies that are not peers through the client, correctly', async () => {
    const token = randomBytes(16).toString('hex');
    const proxies = await Promise.all([startProxy({ token, threads: 1 }), startProxy({ token, threads: 1 })]);
    const runtime = await Offload.init({ host: false, proxies: proxies.map((proxy) => proxy.address), token });
    try {
      const [a, b] = runtime.devices as [Device, Device];
      const data = pattern(3 * MiB, 5);
      const src = await a.alloc(data.byteLength);
      const dst = await b.alloc(data.byteLength);
      await a.queue().write(src, data).done;
      await a.queue().copy(dst, src).done;
      const back = new Uint8Array(data.byteLength);
      await b.queue().read(dst, back).done;
      assert.ok(globalThis.Buffer.from(back).equals(globalThis.Buffer.from(data)));
    } finally {
      await runtime.shutdown();
      await Promise.all(proxies.map((proxy) => proxy.stop()));
    }
  });
});

describe('a peer that stops answering', { timeout: 180_000 }, () => {
  it('a stopped proxy (SIGSTOP) is DEVICE_LOST within the peer timeout: pending and later calls fail, shutdown ends', async () => {
    const proxy = await startProxy({ threads: 1 });
    const runtime = await Offload.init({
      host: false,
      proxies: [proxy.address],
      token: proxy.token,
      peerTimeoutMs: 1000,
    });
    try {
      const device = runtime.devices[0]!;
      const buffer = await device.alloc(16);
      const q = device.queue();
      await q.write(buffer, new Uint8Array(16)).done;
      proxy.child.kill('SIGSTOP');
      const started = Date.now();
      const pending = q.read(buffer, new Uint8Array(16));
      await rejectsWith(pending.done, 'DEVICE_LOST', /sent nothing for 1000 ms \(OFFLOAD_PEER_TIMEOUT\)/);
      const took = Date.now() - started;
      assert.ok(took >= 900 && took < 5000, `took ${took} ms`);
      await rejectsWith(q.finish(), 'DEVICE_LOST');
      await rejectsWith(device.alloc(8), 'DEVICE_LOST');
      const stopping = Date.now();
      await runtime.shutdown();
      assert.ok(Date.now() - stopping < 5000, 'shutdown ended');
    } finally {
      proxy.child.kill('SIGCONT');
      await proxy.stop();
    }
  });

  it('a client that logs in and then says nothing loses its session after --peer-timeout', async () => {
    const proxy = await startProxy({ threads: 1, args: ['--peer-timeout', '1000'] });
    try {
      const socket = net.connect(Number(proxy.address.split(':')[1]), '127.0.0.1');
      const replies: Record<string, unknown>[] = [];
      const decoder = new FrameDecoder();
      socket.on('data', (chunk: globalThis.Buffer) =>
        replies.push(...decoder.push(new Uint8Array(chunk)).map((frame) => frame.meta)),
      );
      const closed = new Promise((resolve) => socket.once('close', resolve));
      socket.write(encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: proxy.token }));
      await proxyStatsUntil(proxy, (stats) => stats.sessions === 1);
      await closed;
      assert.equal(replies[0]!.op, 'reply', 'it was logged in');
      const after = await proxyStatsUntil(proxy, (stats) => stats.sessions === 0 && stats.contexts === 0);
      assert.equal(after.sessions, 0);
    } finally {
      await proxy.stop();
    }
  });
});

describe('a proxy killed mid-queue', { timeout: 180_000 }, () => {
  it('fails pending and later operations with DEVICE_LOST within a second; local devices go on', async () => {
    const proxy = await startProxy({ threads: 1 });
    const runtime = await Offload.init({
      host: { threads: 1, memoryBytes: 16 * MiB },
      proxies: [proxy.address],
      token: proxy.token,
    });
    try {
      const [local, remote] = runtime.devices as [Device, Device];
      const library = await runtime.register(await fixtureBundle());
      const busy = await remote.kernel(library, 'busy');
      const out = await remote.alloc(8);
      const q = remote.queue();
      q.launch(busy, { teams: 1 }, [2_000_000_000, out]); // long enough to be mid-queue
      const finished = q.finish();
      finished.catch(() => {}); // awaited below, after the kill
      const pending = [q.launch(busy, { teams: 1 }, [1, out]).done, q.record().done, finished];
      await new Promise((resolve) => setTimeout(resolve, 200));
      const killed = Date.now();
      await proxy.kill();
      for (const result of pending) await rejectsWith(result, 'DEVICE_LOST');
      const elapsed = Date.now() - killed;
      assert.ok(elapsed < 1000, `DEVICE_LOST took ${elapsed} ms`);
      await rejectsWith(q.write(out, new Uint8Array(8)).done, 'DEVICE_LOST');
      await rejectsWith(remote.alloc(8), 'DEVICE_LOST');
      await rejectsWith(q.finish(), 'DEVICE_LOST');

      const add = await local.kernel(library, 'add_i32');
      const buffer = await local.alloc(16);
      const lq = local.queue();
      lq.write(buffer, new Int32Array([1, 2, 3, 4]));
      lq.launch(add, { teams: 1 }, [4, 10, buffer]);
      const result = new Int32Array(4);
      lq.read(buffer, result);
      await lq.finish();
      assert.deepEqual([...result], [11, 12, 13, 14]);
    } finally {
      await runtime.shutdown();
      await proxy.kill();
    }
  });

  it('fails Offload.init with DEVICE_LOST naming a proxy that is not there', async () => {
    const proxy = await startProxy({ threads: 1 });
    await proxy.kill();
    await rejectsWith(
      Offload.init({ host: false, proxies: [proxy.address], token: proxy.token }),
      'DEVICE_LOST',
      new RegExp(proxy.address.replace(/\./g, '\\.')),
    );
  });
});

describe('offload launch', { timeout: 180_000 }, () => {
  it('starts N proxies wired to the app and stops them when it exits', async () => {
    const app = fileURLToPath(new URL('./fixtures/launch-app.ts', import.meta.url));
    const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
    const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', main, 'launch', '-np', '2', app, 'extra-arg'], {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: { ...process.env, OFFLOAD_HOST_THREADS: '1' },
      });
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.once('exit', (exitCode) => resolve({ code: exitCode, stdout: out }));
    });
    assert.equal(code, 3, `the app's exit status comes back; output:\n${stdout}`);
    const report = JSON.parse(stdout.split('\n').find((line) => line.startsWith('{'))!) as {
      plugins: string[];
      args: string[];
      sum: number;
      proxies: string[];
    };
    assert.deepEqual(report.plugins, ['host', 'remote', 'remote']);
    assert.deepEqual(report.args, ['extra-arg']);
    assert.equal(report.sum, 2 * (1 + 2 + 3 + 4) + 2 * 4 * 10);
    // The proxies are gone: connecting to them fails.
    for (const address of report.proxies)
      await rejectsWith(RemoteConnection.open(address, { token: 'x', timeoutMs: 2000 }), 'DEVICE_LOST');
  });
});
