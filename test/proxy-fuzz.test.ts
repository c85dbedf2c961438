// The proxy under malformed input: 10,000 fuzzed frames (more with scripts/fuzz-frames.ts), then
// garbage over a real socket; the proxy closes only the offending connections and serves on.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Offload } from '../src/index.js';
import { ProxyServer } from '../src/proxy/server.js';
import { FrameDecoder } from '../src/transport/frame.js';
import { fuzzProxy } from './helpers/proxy-fuzz.js';

const token = 'fuzz-token-0123456789';

describe('proxy under malformed frames', { timeout: 240_000 }, () => {
  let server: ProxyServer;
  before(async () => {
    server = await ProxyServer.start({ listen: '127.0.0.1:0', token, runtime: { host: { threads: 1, memoryBytes: 64 * 1024 * 1024 } } });
  });
  after(async () => {
    await server.shutdown();
  });

  it('survives 10,000 random and mutated frames, closing offenders with PROTOCOL', { timeout: 120_000 }, async () => {
    const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
    const report = await fuzzProxy(server, { token, frames: 10_000, seed });
    assert.deepEqual(report.violations, [], `seed ${seed} (rerun with FUZZ_SEED=${seed}): ${JSON.stringify(report)}`);
    assert.ok(report.frames >= 10_000);
    assert.ok(report.closedByProxy > 0, 'some frames were malformed enough to close the connection');
    assert.ok(report.replies > report.connections, 'most connections went on answering');
    assert.ok(Object.keys(report.errors).length >= 5, `a variety of coded errors: ${JSON.stringify(report.errors)}`);
  });

  it('closes a socket that sends garbage with a PROTOCOL reply, and serves the next client', async () => {
    const socket = net.connect(Number(server.address.split(':')[1]), '127.0.0.1');
    const decoder = new FrameDecoder();
    const frames: Record<string, unknown>[] = [];
    socket.on('data', (chunk: Buffer) => frames.push(...decoder.push(new Uint8Array(chunk)).map((frame) => frame.meta)));
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('GET / HTTP/1.1\r\nHost: proxy\r\n\r\n');
    await new Promise((resolve) => socket.once('close', resolve));
    assert.deepEqual(frames, [], 'not a frame: closed without an answer');

    const client = await Offload.init({ host: false, proxies: [server.address], token });
    const device = client.devices[0]!;
    const buffer = await device.alloc(16);
    const out = new Uint8Array(16);
    await device.queue().write(buffer, new Uint8Array(16).fill(5)).done;
    await device.queue().read(buffer, out).done;
    assert.deepEqual([...new Set(out)], [5]);
    await client.shutdown();
  });
});
