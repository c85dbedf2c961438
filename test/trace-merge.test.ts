/**
 * One trace across processes: under `offload launch -np 2`, each proxy keeps the spans of the
 * program's work and hands them back at shutdown; they land in the program's one trace file
 * (Chrome/Perfetto JSON), each proxy's devices as processes of their own, on the program's clock.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { TraceEvent } from '../src/runtime/trace.js';
import { Offload } from '../src/index.js';
import { listenTcp } from '../src/transport/tcp.js';

const root = fileURLToPath(new URL('..', import.meta.url));
let dir: string;

interface TraceFile {
  traceEvents: TraceEvent[];
  metadata: { 'offload-ts': { proxies: { proxy: string; offsetUs: number; roundTripUs: number }[] } };
}

describe('one trace across processes', { timeout: 180_000 }, () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-merged-trace-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("merges both proxies' spans into the program's trace under 'offload launch -np 2', clocks aligned", async () => {
    const file = path.join(dir, 'trace.json');
    const env = {
      ...process.env,
      OFFLOAD_TRACE: file,
      OFFLOAD_HOST_THREADS: '1',
      OFFLOAD_WEBGPU: 'off',
      OFFLOAD_PROXIES: '',
    };
    const status = await new Promise<number>((resolve) =>
      execFile(
        process.execPath,
        ['--import', 'tsx', 'src/cli/main.ts', 'launch', '-np', '2', 'test/fixtures/launch-app.ts'],
        { cwd: root, env },
        (error) => resolve(error ? Number(error.code) : 0),
      ),
    );
    assert.equal(status, 3, 'the app ran to its end');
    const trace = JSON.parse(await readFile(file, 'utf8')) as TraceFile;
    const clocks = trace.metadata['offload-ts'].proxies;
    assert.equal(clocks.length, 2);
    for (const clock of clocks) {
      assert.match(clock.proxy, /^127\.0\.0\.1:\d+$/);
      assert.ok(
        Number.isFinite(clock.offsetUs) && clock.roundTripUs > 0 && clock.roundTripUs < 5_000_000,
        JSON.stringify(clock),
      );
    }
    const processes = trace.traceEvents
      .filter((e) => e.name === 'process_name')
      .map((e) => ({ pid: e.pid, name: String(e.args!.name) }));
    for (const [k, clock] of clocks.entries()) {
      const pid = 1000 + k * 1000;
      assert.ok(
        processes.some((p) => p.pid === pid && p.name.startsWith(`proxy ${clock.proxy} device 0: host`)),
        JSON.stringify(processes),
      );
      const spans = trace.traceEvents.filter((e) => e.ph === 'X' && e.pid === pid);
      assert.deepEqual([...new Set(spans.map((e) => e.name))].sort(), ['add_i32', 'read', 'write']);
      // The proxy ran the launch inside the program's launch span (program device 1 + k), up to the
      // alignment's error (half a round trip) and a little scheduling slack.
      const ours = trace.traceEvents.find((e) => e.ph === 'X' && e.pid === 1 + k && e.name === 'add_i32')!;
      const theirs = spans.find((e) => e.name === 'add_i32')!;
      const slack = clock.roundTripUs + 20_000;
      assert.ok(
        theirs.ts >= ours.ts - slack && theirs.ts + theirs.dur! <= ours.ts + ours.dur! + slack,
        `proxy launch ${theirs.ts}+${theirs.dur} vs ours ${ours.ts}+${ours.dur}`,
      );
    }
  });

  it("keeps only well-formed events of a proxy's trace, and counts what it left out", async () => {
    // A proxy that serves no device and answers 'trace' with events good and bad.
    const good = [
      { name: 'process_name', cat: '__metadata', ph: 'M', ts: 0, pid: 0, tid: 0, args: { name: 'device 0: fake' } },
      { name: 'write', cat: 'queue', ph: 'X', ts: 5_000_000, dur: 10, pid: 0, tid: 1, args: { bytes: 4 } },
    ];
    const bad = [
      { name: 'huge pid', cat: 'queue', ph: 'X', ts: 1, dur: 1, pid: 1e12, tid: 0 },
      { name: 'other phase', cat: 'queue', ph: 'B', ts: 1, pid: 0, tid: 0 },
      { name: 'text time', cat: 'queue', ph: 'X', ts: '1', dur: 1, pid: 0, tid: 0 },
      { name: 7, cat: 'queue', ph: 'X', ts: 1, dur: 1, pid: 0, tid: 0 },
      { name: 'x'.repeat(10_000), cat: 'queue', ph: 'X', ts: 1, dur: 1, pid: 0, tid: 0 },
      null,
      'not an event',
    ];
    const listener = await listenTcp('127.0.0.1:0', (transport) => {
      transport.onFrame = ({ meta }) => {
        if (meta.op === 'hello') transport.send({ op: 'reply', id: meta.id, devices: [], peers: [], now: 2_000_000 });
        else if (meta.op === 'trace')
          transport.send(
            { op: 'reply', id: meta.id, dropped: 3 },
            new TextEncoder().encode(JSON.stringify([...good, ...bad])),
          );
        else transport.send({ op: 'reply', id: meta.id });
      };
    });
    try {
      const file = path.join(dir, 'hostile.json');
      const runtime = await Offload.init({
        host: false,
        webgpu: false,
        mpi: false,
        proxies: [listener.address],
        token: 'a-token-of-sixteen-bytes-or-more',
        trace: file,
      });
      await runtime.shutdown();
      const trace = JSON.parse(await readFile(file, 'utf8')) as TraceFile & {
        metadata: { 'offload-ts': { droppedProxyEvents: number } };
      };
      const merged = trace.traceEvents.filter((e) => e.pid >= 1000);
      assert.deepEqual(
        merged.map((e) => e.name),
        ['process_name', 'write'],
      );
      assert.equal(merged[0]!.args!.name, `proxy ${listener.address} device 0: fake`);
      const { offsetUs } = trace.metadata['offload-ts'].proxies[0]!;
      assert.equal(merged[1]!.ts, 5_000_000 - offsetUs, "moved onto the program's clock");
      assert.equal(trace.metadata['offload-ts'].droppedProxyEvents, 3 + bad.length);
    } finally {
      await listener.close();
    }
  });
});
