/**
 * liboffload's further operations on the wire to a real `offload proxy`: what they cost (a fill
 * of 64 MiB is one small frame, a rectangle one frame each way) and what a hostile client gets
 * for malformed or oversized ones (a coded answer, the proxy alive). Their behaviour on every
 * device is in the conformance suite.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Offload, type Runtime } from '../src/index.js';
import type { RemoteDevice } from '../src/plugins/remote/device.js';
import { checkServed, startProxy, type ProxyProcess } from './helpers/proxy.js';
import { RawClient } from './helpers/raw-client.js';

const MiB = 1024 * 1024;

describe('liboffload operations over the wire', { timeout: 180_000 }, () => {
  let proxy: ProxyProcess;
  let runtime: Runtime;

  before(async () => {
    proxy = await startProxy({ threads: 1, memory: '128M' });
    runtime = await Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: proxy.token });
  });
  after(async () => {
    await runtime?.shutdown();
    await proxy?.stop();
  });

  const wire = () => (runtime.devices[0]!.plugin as RemoteDevice).connection.transport.stats;
  const carried = (before: ReturnType<typeof wire>) => {
    const now = wire();
    return {
      bytes: now.bytesSent + now.bytesReceived - before.bytesSent - before.bytesReceived,
      frames: now.framesSent - before.framesSent,
    };
  };

  it('fills 64 MiB with under 1 KiB on the wire, and the bytes are there (sampled with one readRect)', async () => {
    const device = runtime.devices[0]!;
    const buffer = await device.alloc(64 * MiB);
    const q = device.queue();
    await q.finish();
    const start = { ...wire() };
    await q.fill(buffer, Uint32Array.of(0x01020304)).done;
    const cost = carried(start);
    assert.ok(cost.bytes < 1024, `a 64 MiB fill carried ${cost.bytes} bytes`);
    assert.equal(cost.frames, 1, 'one request frame');
    // 8 bytes of every 64 KiB row of the buffer, in one frame each way.
    const rows = (64 * MiB) / (64 * 1024);
    const samples = new Uint8Array(8 * rows);
    const before = { ...wire() };
    await q.readRect(buffer, samples, { width: 8, height: rows, src: { offset: 12, rowPitch: 64 * 1024 } }).done;
    assert.equal(carried(before).frames, 1, 'readRect is one request');
    const expected = new Uint8Array(new Uint32Array(2 * rows).fill(0x01020304).buffer);
    assert.deepEqual(samples, expected);
    // writeRect: one frame, carrying the rows packed (not the pitches between them).
    const write = { ...wire() };
    await q.writeRect(buffer, new Uint8Array(16 * 100).fill(9), { width: 16, height: 100, dst: { rowPitch: 4096 } })
      .done;
    const written = carried(write);
    assert.equal(written.frames, 1);
    assert.ok(written.bytes < 16 * 100 + 1024, `writeRect of 1600 bytes of rows carried ${written.bytes}`);
    await buffer.free();
  });

  it('answers hostile fill, rectangle, memory-info and timed record requests with coded errors; the proxy lives', async () => {
    const raw = await RawClient.open(proxy.address);
    try {
      assert.equal((await raw.login(proxy.token)).error, undefined);
      raw.send({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 4096, kind: 'device' });
      raw.send({ op: 'queue', id: 3, queue: 1, device: 0 });
      assert.equal(await raw.error(2), undefined);
      assert.equal(await raw.error(3), undefined);
      const fill = { op: 'fill', queue: 1, buffer: 1, offset: 0, bytes: 4096 };
      raw.send({ ...fill, id: 4, pattern: [1, 2, 3] });
      assert.equal((await raw.error(4))?.code, 'INVALID_ARGUMENT');
      raw.send({ op: 'sync', id: 5, queue: 1 });
      await raw.reply(5);
      raw.send({ ...fill, id: 6, pattern: [1, 2, 3, 4], bytes: 8192 });
      assert.equal((await raw.error(6))?.code, 'OUT_OF_BOUNDS');
      raw.send({ op: 'sync', id: 7, queue: 1 });
      await raw.reply(7);
      // A read of 2^40 bytes of rows is refused before anything is allocated.
      const rect = {
        queue: 1,
        buffer: 1,
        width: 2 ** 20,
        height: 2 ** 20,
        depth: 1,
        offset: 0,
        rowPitch: 2 ** 20,
        slicePitch: 2 ** 40,
      };
      raw.send({ op: 'read-rect', id: 8, ...rect });
      const huge = await raw.error(8);
      assert.equal(huge?.code, 'INVALID_ARGUMENT');
      assert.match(huge.message, /more than one reply carries/);
      raw.send({ op: 'read-rect', id: 9, ...rect, width: 64, height: 65, rowPitch: 64, slicePitch: 64 * 65 });
      assert.equal((await raw.error(9))?.code, 'OUT_OF_BOUNDS');
      raw.send({ op: 'sync', id: 10, queue: 1 });
      await raw.reply(10);
      // 2^40 empty slices: refused at once (no loop over them), as liboffload's INVALID_SIZE.
      const empty = {
        op: 'copy-rect',
        queue: 1,
        width: 4,
        height: 0,
        depth: 2 ** 40,
        src: 1,
        srcOffset: 0,
        srcRowPitch: 4,
        srcSlicePitch: 0,
        dst: 1,
        dstOffset: 0,
        dstRowPitch: 4,
        dstSlicePitch: 0,
      };
      raw.send({ ...empty, id: 15 });
      assert.equal((await raw.error(15, 2000))?.code, 'INVALID_ARGUMENT');
      raw.send({ op: 'sync', id: 16, queue: 1 });
      await raw.reply(16);
      raw.send({ op: 'memory-info', id: 11, device: 99 });
      assert.equal((await raw.error(11))?.code, 'NOT_FOUND');
      raw.send({ op: 'memory-info', id: 12, device: 0 });
      const info = await raw.reply(12);
      assert.ok(
        (info.freeBytes as number) <= (info.totalBytes as number) && (info.totalBytes as number) > 0,
        JSON.stringify(info),
      );
      raw.send({ op: 'record', id: 13, queue: 1, event: 1, timing: true });
      assert.equal(typeof (await raw.reply(13)).time, 'number');
      // Rows that do not match their announced size, and a pattern that is not bytes, close the connection with PROTOCOL.
      raw.send(
        { op: 'write-rect', id: 14, ...rect, width: 4, height: 4, rowPitch: 4, slicePitch: 16 },
        new Uint8Array(15),
      );
      assert.equal((await raw.error(14))?.code, 'PROTOCOL');
      await raw.closedWithin(5000);
      const second = await RawClient.open(proxy.address);
      await second.login(proxy.token);
      second.send({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 64, kind: 'device' });
      second.send({ op: 'queue', id: 3, queue: 1, device: 0 });
      second.send({
        op: 'fill',
        id: 4,
        queue: 1,
        buffer: 1,
        offset: 0,
        bytes: 64,
        pattern: new Array<number>(4097).fill(1), // longer than any fill pattern may be
      });
      assert.equal((await second.error(4))?.code, 'PROTOCOL');
      await second.closedWithin(5000);
      const third = await RawClient.open(proxy.address);
      await third.login(proxy.token);
      third.send({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 64, kind: 'device' });
      third.send({ op: 'queue', id: 3, queue: 1, device: 0 });
      third.send({ op: 'fill', id: 4, queue: 1, buffer: 1, offset: 0, bytes: 64, pattern: [256] });
      assert.match((await third.error(4))?.message ?? '', /integers 0 to 255/);
      await third.closedWithin(5000);
    } finally {
      raw.close();
    }
    assert.equal(proxy.child.exitCode, null);
    await checkServed({ proxies: [proxy.address], token: proxy.token });
  });
});
