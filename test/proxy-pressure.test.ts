// Clients that make a real `offload proxy` hold what they never pay for: replies they never read,
// frames they trickle, rectangles of one-byte rows that would hold the proxy's event loop. Each
// attack runs beside a legitimate client, and each test asserts the proxy's RSS growth and its
// event-loop delay during the attack (`stats` after SIGUSR2; the delay is the longest since the
// previous stats). The attacks are scaled down from those measured against an unguarded proxy
// (+787 MiB of pings in 5 s; 8 frames of 60 MiB; 16 copies of 1-byte rows), same principle.
import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, it } from 'node:test';
import { Offload, type Runtime } from '../src/index.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { encodeFrame, encodeHead, FrameDecoder, type Frame } from '../src/transport/frame.js';
import { checkServed, proxyStats, startProxy, type ProxyProcess } from './helpers/proxy.js';
import { RawClient } from './helpers/raw-client.js';

const MiB = 1024 * 1024;
const mib = (bytes: number): string => `${(bytes / MiB).toFixed(1)} MiB`;

function client(proxy: ProxyProcess): Promise<Runtime> {
  return Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
}

/** A legitimate client's whole round; resolves with how long it took, in ms. */
async function served(proxy: ProxyProcess, token = proxy.token): Promise<number> {
  assert.equal(proxy.child.exitCode, null, `the proxy exited:\n${proxy.output().slice(-4000)}`);
  const start = Date.now();
  await checkServed({ proxies: [proxy.address], token });
  return Date.now() - start;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A logged-in socket that reads only when told: what a client that never reads its replies looks like. */
async function loggedInSocket(proxy: ProxyProcess): Promise<{ socket: net.Socket; frames: Frame[] }> {
  const at = proxy.address.lastIndexOf(':');
  const socket = net.connect({ host: proxy.address.slice(0, at), port: Number(proxy.address.slice(at + 1)) });
  socket.on('error', () => {});
  const decoder = new FrameDecoder();
  const frames: Frame[] = [];
  socket.on('data', (chunk: Buffer) => frames.push(...decoder.push(new Uint8Array(chunk))));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.write(encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: proxy.token }));
  for (let i = 0; i < 500 && !frames.some((frame) => frame.meta.id === 1); i++) await sleep(10);
  assert.equal(frames[0]?.meta.error, undefined, 'logged in');
  return { socket, frames };
}

describe('back-pressure and progress on a real proxy', { timeout: 240_000 }, () => {
  it('a client that never reads its replies stops being read, and pays for the replies waiting to go', async () => {
    // The legitimate client is a tenant of its own: the attacker's quotas are not its.
    const proxy = await startProxy({
      threads: 1,
      memory: '64M',
      args: ['--quota-pending', '16M'],
      tenants: ['bystander'],
    });
    try {
      const { socket, frames } = await loggedInSocket(proxy);
      socket.write(encodeFrame({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 256 * 1024, kind: 'device' }));
      socket.write(encodeFrame({ op: 'queue', id: 3, queue: 1, device: 0 }));
      for (let i = 0; i < 500 && !frames.some((frame) => frame.meta.id === 3); i++) await sleep(10);
      socket.pause(); // from here on, nothing is read
      const before = await proxyStats(proxy);
      // 400 reads of 256 KiB, each answered in its reply (100 MiB of replies), then pings, for 4 s.
      const reads = Buffer.concat(
        Array.from({ length: 400 }, (_, i) =>
          encodeFrame({ op: 'read', id: 10 + i, queue: 1, buffer: 1, offset: 0, bytes: 256 * 1024 }),
        ),
      );
      const pings = Buffer.concat(Array.from({ length: 10_000 }, () => encodeFrame({ op: 'ping', id: 5 })));
      let sent = 0;
      let blocked = 0;
      const until = Date.now() + 4000;
      const flood = (async () => {
        for (let first = true; Date.now() < until; first = false) {
          sent += first ? 0 : 10_000;
          if (!socket.write(first ? reads : pings)) {
            const start = Date.now();
            await Promise.race([new Promise((resolve) => socket.once('drain', resolve)), sleep(until - Date.now())]);
            blocked += Date.now() - start;
          }
          // The legitimate client runs in this process too.
          await new Promise((resolve) => setImmediate(resolve));
        }
      })();
      const servedMs = await served(proxy, proxy.tenants!.bystander);
      await flood;
      const during = await proxyStats(proxy);
      const grown = during.rssBytes - before.rssBytes;
      console.log(
        `unread replies: 400 reads of 256 KiB and ${sent} pings sent, writes blocked ${blocked} ms; proxy RSS ${mib(before.rssBytes)} -> ${mib(during.rssBytes)} ` +
          `(+${mib(grown)}), heap ${mib(during.heapUsedBytes)}, event-loop delay max ${during.eventLoopDelayMaxMs?.toFixed(0)} ms; ` +
          `a legitimate client served in ${servedMs} ms meanwhile`,
      );
      // 16 MiB of replies it may leave unread (--quota-pending), 1 MiB queued before reading stops,
      // and the allocator's slack after 100 MiB of reads came and went (unguarded: +174 MiB).
      assert.ok(grown < 64 * MiB, `the proxy grew by ${mib(grown)}`);
      // The client reads again: every request is answered, and the connection goes on.
      socket.resume();
      const answered = () => frames.filter((frame) => frame.meta.op === 'reply' && frame.meta.id !== 1).length;
      const expected = 2 + 400 + sent;
      for (let i = 0; i < 6000 && answered() < expected; i++) await sleep(10);
      assert.equal(answered(), expected, 'every request answered once the client reads');
      // Reads past the 16 MiB of replies it may leave unread failed, saying so; the rest were served.
      const failed = frames.filter((frame) => frame.meta.error !== undefined);
      const readsServed = 400 - failed.length;
      console.log(`unread replies: ${readsServed} reads served, ${failed.length} refused`);
      assert.ok(failed.length > 0 && readsServed >= 64, `${readsServed} reads served`);
      for (const frame of failed) {
        const error = frame.meta.error as { code: string; message: string };
        assert.equal(error.code, 'OUT_OF_MEMORY');
        assert.match(error.message, /\(offload proxy --quota-pending\)/);
      }
      socket.write(encodeFrame({ op: 'ping', id: 6 }));
      for (let i = 0; i < 500 && !frames.some((frame) => frame.meta.id === 6); i++) await sleep(10);
      assert.ok(frames.some((frame) => frame.meta.id === 6));
      socket.destroy();
    } finally {
      await proxy.stop();
    }
  });

  it('a trickled frame closes its connection with PROTOCOL, and unfinished frames count against --proxy-memory', async () => {
    // --peer-timeout 6000: a frame must gain 16 KiB each second.
    const proxy = await startProxy({ threads: 1, args: ['--peer-timeout', '6000', '--proxy-memory', '64M'] });
    try {
      const before = await proxyStats(proxy);
      // Four connections each announce a 40 MiB frame and send 8 MiB of it: only one fits in 64M.
      const raws = await Promise.all(Array.from({ length: 4 }, () => RawClient.open(proxy.address)));
      for (const raw of raws) assert.equal((await raw.login(proxy.token)).error, undefined);
      const started = Date.now();
      await Promise.all(
        raws.map(async (raw) => {
          if (await raw.write(encodeHead({ op: 'ping', id: 2 }, 40 * MiB))) await raw.write(new Uint8Array(8 * MiB));
        }),
      );
      // Then a byte every 500 ms.
      const trickle = setInterval(() => {
        for (const raw of raws) void raw.write(new Uint8Array(1));
      }, 500);
      try {
        const servedMs = await served(proxy);
        await Promise.all(raws.map((raw) => raw.closedWithin(10_000)));
        const closedAfter = Date.now() - started;
        const during = await proxyStats(proxy);
        const errors = raws.map(
          (raw) =>
            raw.frames.find((frame) => frame.meta.id === 0)?.meta.error as {
              code: string;
              message: string;
            },
        );
        console.log(
          `trickled frames: closed after ${closedAfter} ms with ${errors.map((error) => error?.code).join(', ')}; ` +
            `proxy RSS ${mib(before.rssBytes)} -> ${mib(during.rssBytes)} (+${mib(during.rssBytes - before.rssBytes)}), ` +
            `event-loop delay max ${during.eventLoopDelayMaxMs?.toFixed(0)} ms; a legitimate client served in ${servedMs} ms`,
        );
        const refused = errors.filter((error) => error?.code === 'OUT_OF_MEMORY');
        const slow = errors.filter((error) => error?.code === 'PROTOCOL');
        assert.equal(refused.length, 3, JSON.stringify(errors));
        assert.match(refused[0]!.message, /\(offload proxy --proxy-memory\)/);
        assert.doesNotMatch(refused[0]!.message, /holds \d+/, 'no word of what other clients hold');
        assert.equal(slow.length, 1, JSON.stringify(errors));
        assert.match(slow[0]!.message, /a frame of 4194\d{4} bytes gained \d+ bytes in 1000 ms/);
        assert.ok(closedAfter < 8000, `closed after ${closedAfter} ms`);
        const after = await proxyStats(proxy);
        assert.equal(after.proxyMemoryBytes, before.proxyMemoryBytes, 'the unfinished frames are given back');
      } finally {
        clearInterval(trickle);
      }
      await served(proxy);
    } finally {
      await proxy.stop();
    }
  });

  it('one tenant cannot fill the last eighth of --proxy-memory: another tenant is served beside its unfinished frames', async () => {
    const proxy = await startProxy({ threads: 1, args: ['--proxy-memory', '64M'], tenants: ['bystander'] });
    const raws: RawClient[] = [];
    try {
      const open = async (): Promise<RawClient> => {
        const raw = await RawClient.open(proxy.address);
        raws.push(raw);
        assert.equal((await raw.login(proxy.token)).error, undefined);
        return raw;
      };
      // 50 MiB of frames in progress are the tenant's; 7 MiB more would reach into the last 8.
      const holder = await open();
      await holder.write(encodeHead({ op: 'ping', id: 2 }, 50 * MiB));
      const greedy = await open();
      await greedy.write(encodeHead({ op: 'ping', id: 2 }, 7 * MiB));
      await greedy.closedWithin(10_000);
      const error = greedy.frames.find((frame) => frame.meta.id === 0)?.meta.error as { code: string; message: string };
      assert.equal(error?.code, 'OUT_OF_MEMORY');
      assert.match(error.message, /the last eighth is kept for clients holding less \(offload proxy --proxy-memory\)/);
      assert.doesNotMatch(error.message, /bystander/);
      // The other tenant registers an image, allocates and launches within the eighth kept.
      await served(proxy, proxy.tenants!.bystander);
    } finally {
      for (const raw of raws) raw.close();
      await proxy.stop();
    }
  });

  it('copies of one-byte rows run in slices: the event loop stays free and the data is right', async () => {
    const proxy = await startProxy({ threads: 1, memory: '96M' });
    const runtime = await client(proxy);
    try {
      const device = runtime.devices[0]!;
      const rows = 8 * MiB;
      const src = await device.alloc(rows);
      const pattern = new Uint8Array(rows).map((_, i) => (i * 7) & 0xff);
      await device.queue().write(src, pattern).done;
      const dsts = await Promise.all(Array.from({ length: 4 }, () => device.alloc(rows)));
      const before = await proxyStats(proxy);
      const started = Date.now();
      const copies = dsts.map((dst) => {
        const queue = device.queue();
        queue.copyRect(dst, src, { width: 1, height: rows });
        return queue.finish();
      });
      // A ping's worth of work meanwhile: the legitimate client's round.
      await sleep(200);
      const servedMs = await served(proxy);
      await Promise.all(copies);
      const copiedMs = Date.now() - started;
      const during = await proxyStats(proxy);
      console.log(
        `4 copyRects of ${rows} one-byte rows: ${copiedMs} ms; proxy event-loop delay max ${during.eventLoopDelayMaxMs?.toFixed(0)} ms, ` +
          `RSS ${mib(before.rssBytes)} -> ${mib(during.rssBytes)}; a legitimate client served in ${servedMs} ms meanwhile`,
      );
      assert.ok(during.eventLoopDelayMaxMs < 500, `the event loop was held ${during.eventLoopDelayMaxMs} ms`);
      for (const dst of dsts) {
        const out = new Uint8Array(rows);
        await device.queue().read(dst, out).done;
        assert.ok(Buffer.compare(out, pattern) === 0, 'the copy is exact');
      }
      // A copy whose slices outlast the launch time limit fails with TIMEOUT; one past the buffer with OUT_OF_BOUNDS.
      const queue = device.queue();
      await assert.rejects(
        queue.copyRect(dsts[0]!, src, { width: 1, height: rows, src: { offset: 1 } }).done,
        (error: Error & { code: string }) => error.code === 'OUT_OF_BOUNDS',
      );
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('a sliced copy longer than --launch-timeout fails with TIMEOUT naming it', async () => {
    const proxy = await startProxy({ threads: 1, memory: '64M', args: ['--launch-timeout', '300'] });
    const runtime = await client(proxy);
    try {
      const device = runtime.devices[0]!;
      const [src, dst] = await Promise.all([device.alloc(16 * MiB), device.alloc(16 * MiB)]);
      const error = await device
        .queue()
        .copyRect(dst, src, { width: 1, height: 16 * MiB })
        .done.then(
          () => undefined,
          (failure: unknown) => failure as Error & { code: string },
        );
      assert.equal(error?.code, 'TIMEOUT');
      assert.match(error.message, /launch time limit of 300 ms \(offload proxy --launch-timeout\)/);
      await served(proxy);
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('a queue over --quota-queues fails as OUT_OF_MEMORY naming it, and the client goes on', async () => {
    const proxy = await startProxy({ threads: 1, memory: '64M', args: ['--quota-queues', '2'] });
    const runtime = await client(proxy);
    try {
      const device = runtime.devices[0]!;
      const buffer = await device.alloc(64);
      const [a, b, c] = [device.queue(), device.queue(), device.queue()];
      await a.write(buffer, new Uint8Array(64).fill(1)).done;
      await b.write(buffer, new Uint8Array(64).fill(2)).done;
      const error = await c.write(buffer, new Uint8Array(64).fill(3)).done.then(
        () => undefined,
        (failure: unknown) => failure as Error & { code: string },
      );
      assert.equal(error?.code, 'OUT_OF_MEMORY', error?.message);
      assert.match(
        error.message,
        /the proxy allows 2 per token, however many connections use it \(offload proxy --quota-queues\)/,
      );
      await a.destroy();
      const out = new Uint8Array(64);
      await device.queue().read(buffer, out).done;
      assert.deepEqual([...new Set(out)], [2]);
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('fits --max-connections to the file limit, and a flood of silent sockets leaves room for clients', async () => {
    // A soft limit of 200 files: (200 - 64) / 2 = 68 connections, of which 17 may be logging in.
    const proxy = await startProxy({ threads: 1, memory: '64M', launcher: ['prlimit', '--nofile=200'] });
    try {
      const before = await proxyStats(proxy);
      assert.equal(before.maxConnections, 68);
      // 150 sockets that never log in nor close their side, while 10 clients come and go.
      const at = proxy.address.lastIndexOf(':');
      const silent: net.Socket[] = [];
      const flood = (async () => {
        for (let i = 0; i < 150; i++) {
          const socket = net.connect({
            host: proxy.address.slice(0, at),
            port: Number(proxy.address.slice(at + 1)),
            allowHalfOpen: true,
          });
          socket.on('error', () => {});
          silent.push(socket);
          await sleep(5);
        }
      })();
      const waits: number[] = [];
      for (let i = 0; i < 10; i++) waits.push(await served(proxy));
      await flood;
      const during = await proxyStats(proxy);
      console.log(
        `silent flood under a 200-file limit: 10 of 10 clients served (${waits.join(', ')} ms); ` +
          `RSS ${mib(before.rssBytes)} -> ${mib(during.rssBytes)}, event-loop delay max ${during.eventLoopDelayMaxMs.toFixed(0)} ms`,
      );
      assert.ok(during.connections <= 68);
      for (const socket of silent) socket.destroy();
    } finally {
      await proxy.stop();
    }
  });
});
