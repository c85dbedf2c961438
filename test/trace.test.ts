// OFFLOAD_TRACE / Offload.init({ trace }): Chrome trace events that Perfetto opens.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { map, Offload, type OffloadError } from '../src/index.js';
import { Tracer } from '../src/runtime/trace.js';
import { fixtureBundle } from './helpers/fixtures.js';

interface TraceEvent {
  name: string;
  cat: string;
  ph: string;
  ts: number;
  dur?: number;
  pid: number;
  tid: number;
  args?: Record<string, unknown>;
}

async function readTrace(file: string): Promise<TraceEvent[]> {
  const parsed = JSON.parse(await readFile(file, 'utf8')) as { traceEvents: TraceEvent[] };
  return parsed.traceEvents;
}

describe('trace', { timeout: 180_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-trace-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('has a track per queue and for mapping, spans with bytes and kernel names, and only the needed copies', async () => {
    const file = path.join(dir, 'trace.json');
    const runtime = await Offload.init({ host: { threads: 2, memoryBytes: 16 * 1024 * 1024 }, trace: file });
    const device = runtime.devices[0]!;
    const add = await device.kernel(await runtime.register(await fixtureBundle()), 'add_i32');
    const data = new Int32Array(256);
    await runtime.targetData(device, [map.tofrom(data, 'data')], async () => {
      for (let i = 0; i < 100; i++) await runtime.target(device, add, { teams: 2 }, [256, 1, map.tofrom(data, 'data')]);
    });
    const q = device.queue();
    q.write(await device.alloc(64), new Uint8Array(64));
    await q.finish();
    await runtime.shutdown();

    const events = await readTrace(file);
    const names = events.filter((e) => e.ph === 'M').map((e) => e.args!.name);
    assert.ok(names.includes(`device 0: ${device.info.name}`));
    assert.ok(names.includes('mapping'));
    assert.ok(names.filter((name) => String(name).startsWith('queue ')).length >= 2, 'one track per queue');

    const spans = events.filter((e) => e.ph === 'X');
    for (const span of spans) assert.ok(span.dur! >= 0 && span.ts > 0, `span ${span.name} has a time`);
    const launches = spans.filter((e) => e.name === 'add_i32');
    assert.equal(launches.length, 100);
    assert.deepEqual(launches[0]!.args, { kernel: 'add_i32', teams: 2, threads: 1 });
    // The mapped array moved once each way; the only other copy is the plain 64-byte write.
    const moved = (name: string) => spans.filter((e) => e.name === name).map((e) => e.args!.bytes);
    assert.deepEqual(moved('write'), [1024, 64]);
    assert.deepEqual(moved('read'), [1024]);
    const mapping = spans.filter((e) => e.cat === 'mapping');
    assert.ok(
      mapping.some(
        (e) => e.name === 'targetData enter' && e.args!.clauses === 'tofrom(data)' && e.args!.bytes === 1024,
      ),
    );
    assert.equal(mapping.filter((e) => e.name === 'target add_i32').length, 100);

    // Operations of one queue do not overlap: each starts after the previous one ended.
    const byTrack = new Map<number, TraceEvent[]>();
    for (const span of spans.filter((e) => e.cat === 'queue'))
      byTrack.set(span.tid, [...(byTrack.get(span.tid) ?? []), span]);
    for (const track of byTrack.values()) {
      track.sort((a, b) => a.ts - b.ts);
      for (let i = 1; i < track.length; i++) assert.ok(track[i]!.ts >= track[i - 1]!.ts + track[i - 1]!.dur! - 1e-3);
    }
  });

  it('is written at exit from OFFLOAD_TRACE, even without shutdown', async () => {
    const file = path.join(dir, 'env-trace.json');
    const script = `
      import { Offload } from ${JSON.stringify(new URL('../src/index.ts', import.meta.url).href)};
      const runtime = await Offload.init({ host: { threads: 1, memoryBytes: 4 << 20 } });
      const device = runtime.devices[0];
      const q = device.queue();
      q.write(await device.alloc(16), new Uint8Array(16));
      await q.finish();
      process.exit(0);
    `;
    await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      env: { ...process.env, OFFLOAD_TRACE: file },
    });
    const events = await readTrace(file);
    assert.equal(events.filter((e) => e.name === 'write' && e.args!.bytes === 16).length, 1);
  });

  it('keeps at most its maxSpans spans (a traced proxy session), counting the rest as dropped', async () => {
    const tracer = new Tracer(undefined, 100);
    await Promise.all(
      Array.from({ length: 1000 }, (_, i) => {
        const done = Promise.resolve();
        tracer.operation(0, 'host', 1 + (i % 3), 'write', { bytes: i }, done);
        return done;
      }),
    );
    await new Promise((resolve) => setImmediate(resolve));
    const { events, dropped } = tracer.take();
    assert.equal(events.filter((event) => event.ph === 'X').length, 100);
    assert.equal(dropped, 900);
    assert.ok(
      events.some((event) => event.ph === 'M' && event.name === 'thread_name'),
      'tracks still named',
    );
  });

  it('refuses a trace option that is not a path or a boolean', async () => {
    await assert.rejects(Offload.init({ trace: 42 as never }), /options\.trace must be a file path, or true/);
  });

  it('keeps the trace without a file (trace: true) for runtime.trace(), before and after shutdown', async () => {
    const runtime = await Offload.init({ host: { threads: 1, memoryBytes: 16 * 1024 * 1024 }, trace: true });
    const lib = await runtime.register(await fixtureBundle());
    const device = runtime.devices[0]!;
    const y = new Float32Array(64);
    await runtime.target(device, await device.kernel(lib, 'saxpy'), { teams: 2 }, [64, 2, map.to(y), map.tofrom(y)]);
    const during = await runtime.trace();
    assert.equal(during.displayTimeUnit, 'ms');
    const launches = (doc: typeof during) => doc.traceEvents.filter((e) => e.ph === 'X' && e.name === 'saxpy');
    assert.equal(launches(during).length, 1, JSON.stringify(during.traceEvents.map((e) => e.name)));
    assert.deepEqual(JSON.parse(JSON.stringify(during)), during, 'plain JSON');
    const context = await runtime.createContext();
    assert.equal((await context.trace()).traceEvents.length, during.traceEvents.length, "a context's is its runtime's");
    await context.shutdown();
    await runtime.shutdown();
    const final = await runtime.trace();
    assert.equal(launches(final).length, 1);
    const plain = await Offload.init({ host: { threads: 1, memoryBytes: 16 * 1024 * 1024 } });
    try {
      await assert.rejects(
        plain.trace(),
        (e: OffloadError) => e.code === 'INVALID_ARGUMENT' && /trace: true/.test(e.message),
      );
    } finally {
      await plain.shutdown();
    }
  });
});
