// The proxy under malformed input: 10,000 fuzzed frames in process, 100,000 over TCP against a
// real `offload proxy` (more with `npm run fuzz`) beside a client that never reads its replies,
// then garbage over a socket; the proxy closes
// only the offending connections, serves on, and gives its memory back.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Offload } from '../src/index.js';
import { ProxyServer } from '../src/proxy/server.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { encodeFrame, FrameDecoder } from '../src/transport/frame.js';
import { fuzzProxy, loopbackTarget, tcpTarget, type FuzzReport } from './helpers/proxy-fuzz.js';
import { proxyStats, proxyStatsUntil, startProxy } from './helpers/proxy.js';

const token = 'fuzz-token-0123456789';
const MiB = 1024 * 1024;

function seedOf(): number {
  return Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
}

function checkReport(report: FuzzReport, frames: number, seed: number): void {
  assert.deepEqual(report.violations, [], `seed ${seed} (rerun with FUZZ_SEED=${seed}): ${JSON.stringify(report)}`);
  assert.ok(report.frames >= frames);
  assert.ok(report.closedByProxy > 0, 'some frames were malformed enough to close the connection');
  assert.ok(report.replies > report.connections, 'most connections went on answering');
  assert.ok(Object.keys(report.errors).length >= 5, `a variety of coded errors: ${JSON.stringify(report.errors)}`);
}

/** A client's whole round: write, read back, check. */
async function served(address: string): Promise<void> {
  const client = await Offload.init({ host: false, webgpu: false, proxies: [address], token });
  try {
    const device = client.devices[0]!;
    const buffer = await device.alloc(16);
    const out = new Uint8Array(16);
    await device.queue().write(buffer, new Uint8Array(16).fill(5)).done;
    await device.queue().read(buffer, out).done;
    assert.deepEqual([...new Set(out)], [5]);
  } finally {
    await client.shutdown();
  }
}

describe('proxy under malformed frames, in process', { timeout: 240_000 }, () => {
  let server: ProxyServer;
  before(async () => {
    server = await ProxyServer.start({
      listen: '127.0.0.1:0',
      token,
      runtime: { host: { threads: 1, memoryBytes: 64 * MiB }, webgpu: false },
    });
  });
  after(async () => {
    await server.shutdown();
  });

  it('survives 10,000 random and mutated frames, closing offenders with PROTOCOL', { timeout: 120_000 }, async () => {
    const seed = seedOf();
    checkReport(await fuzzProxy(loopbackTarget(server), { token, frames: 10_000, seed }), 10_000, seed);
    await served(server.address);
  });

  it('closes a socket that sends garbage with a PROTOCOL reply, and serves the next client', async () => {
    const socket = net.connect(Number(server.address.split(':')[1]), '127.0.0.1');
    const decoder = new FrameDecoder();
    const frames: Record<string, unknown>[] = [];
    socket.on('data', (chunk: Buffer) =>
      frames.push(...decoder.push(new Uint8Array(chunk)).map((frame) => frame.meta)),
    );
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('GET / HTTP/1.1\r\nHost: proxy\r\n\r\n');
    await new Promise((resolve) => socket.once('close', resolve));
    assert.deepEqual(frames, [], 'not a frame: closed without an answer');
    await served(server.address);
  });
});

describe('a real proxy process under 100,000 fuzzed frames over TCP', { timeout: 420_000 }, () => {
  it(
    'stays up, closes only offenders, serves a client afterwards, and its memory returns near its baseline',
    { timeout: 400_000 },
    async () => {
      const proxy = await startProxy({ token, threads: 1, memory: '64M' });
      try {
        await served(proxy.address); // warm: the first session's one-time costs are not growth
        const baseline = await proxyStatsUntil(proxy, (stats) => stats.sessions === 0);
        const seed = seedOf();
        // Beside the fuzzer, a client that never reads: it logs in, then sends reads and pings
        // for as long as the proxy takes them, reading nothing (the proxy stops reading it).
        const deaf = net.connect(Number(proxy.address.split(':')[1]), '127.0.0.1');
        deaf.on('error', () => {});
        await new Promise((resolve) => deaf.once('connect', resolve));
        deaf.write(encodeFrame({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token }));
        deaf.write(encodeFrame({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 64 * 1024, kind: 'device' }));
        deaf.write(encodeFrame({ op: 'queue', id: 3, queue: 1, device: 0 }));
        deaf.pause();
        const noise = Buffer.concat(
          Array.from({ length: 1000 }, (_, i) =>
            encodeFrame(
              i % 10 === 0
                ? { op: 'read', id: 4, queue: 1, buffer: 1, offset: 0, bytes: 64 * 1024 }
                : { op: 'ping', id: 5 },
            ),
          ),
        );
        let deafWrites = 0;
        let fuzzing = true;
        const deafFlood = (async () => {
          // Until the proxy stops taking its requests; then it waits, reading nothing, to the end.
          while (fuzzing && !deaf.destroyed && deaf.write(noise)) {
            deafWrites++;
            await new Promise((resolve) => setImmediate(resolve));
          }
        })();
        const report = await fuzzProxy(tcpTarget(proxy.address, 8), { token, frames: 100_000, seed }).finally(() => {
          fuzzing = false;
        });
        await deafFlood;
        const duringDeaf = await proxyStats(proxy);
        console.log(
          `# a client that never read sent ${deafWrites * 1000} requests during the fuzz; proxy RSS ${(duringDeaf.rssBytes / MiB).toFixed(1)} MiB (baseline ${(baseline.rssBytes / MiB).toFixed(1)})`,
        );
        assert.ok(duringDeaf.rssBytes - baseline.rssBytes < 160 * MiB, 'the client that never reads is bounded');
        deaf.destroy();
        assert.equal(proxy.child.exitCode, null, `the proxy exited:\n${proxy.output().slice(-4000)}`);
        checkReport(report, 100_000, seed);
        await served(proxy.address);
        const settled = await proxyStatsUntil(
          proxy,
          (stats) => stats.sessions === 0 && stats.connections === 0 && stats.contexts === 0,
          30_000,
        );
        assert.deepEqual(
          [settled.sessions, settled.connections, settled.contexts, settled.buffers, settled.proxyMemoryBytes],
          [0, 0, 0, 0, 0],
          JSON.stringify(settled),
        );
        // What the proxy holds after a full collection: its heap and the memory outside it (frames,
        // images, wasm memories) back near the baseline, whatever the number of connections (a
        // leak of one image per client left 100 MiB after 10,000 of them). RSS is the OS's view
        // (the allocator keeps some freed pages): near, not equal.
        const last = await proxyStats(proxy);
        const grown = (bytes: number) => Number((bytes / MiB).toFixed(1));
        const growth = {
          heapMiB: grown(last.heapUsedBytes - baseline.heapUsedBytes),
          externalMiB: grown(last.externalBytes - baseline.externalBytes),
          rssMiB: grown(last.rssBytes - baseline.rssBytes),
        };
        console.log(`# network fuzz: ${JSON.stringify({ seed, ...report, growth })}`);
        assert.ok(
          growth.heapMiB + growth.externalMiB < 32 && growth.rssMiB < 160,
          `the proxy grew over ${report.connections} connections: ${JSON.stringify(growth)}`,
        );
      } finally {
        await proxy.stop();
      }
    },
  );
});
