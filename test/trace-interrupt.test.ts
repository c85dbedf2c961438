// OFFLOAD_TRACE survives an interrupt: SIGINT or SIGTERM writes the trace so far (an operation
// still running ends at the interrupt, marked `interrupted`), then the process ends by that
// signal, as it would have without the trace. A program that listens to the signal itself keeps
// it: the trace is then written at its exit.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

const index = JSON.stringify(new URL('../src/index.ts', import.meta.url).href);

/** Writes, then blocks its queue on a host function that never returns, a fill behind it; prints 'ready'. */
const program = (ownListener: boolean) => `
  import { Offload } from ${index};
  const runtime = await Offload.init({ host: { threads: 1, memoryBytes: 4 << 20 }, webgpu: false, proxies: [] });
  const device = runtime.devices[0];
  const q = device.queue();
  q.write(await device.alloc(64), new Uint8Array(64));
  await q.finish();
  q.hostFunction(() => new Promise(() => {}));
  q.fill(await device.alloc(16), 1);
  ${ownListener ? "process.on('SIGINT', () => { console.log('own handler'); process.exit(5); });" : ''}
  setInterval(() => {}, 1000);
  console.log('ready');
`;

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs the program with OFFLOAD_TRACE=file, sends it `signal` once it is ready. */
function interrupt(file: string, signal: NodeJS.Signals, ownListener = false): Promise<Ended> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', program(ownListener)], {
      env: { ...process.env, OFFLOAD_TRACE: file, OFFLOAD_PROXIES: '' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes('ready') && !child.killed) child.kill(signal);
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.once('exit', (code, ended) => {
      clearTimeout(timer);
      resolve({ code, signal: ended, stdout, stderr });
    });
  });
}

interface Trace {
  traceEvents: { name: string; ph: string; ts: number; dur?: number; args?: Record<string, unknown> }[];
  metadata: { 'offload-ts': { interrupted?: string } };
}

describe('a trace of an interrupted run', { timeout: 180_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-trace-interrupt-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    it(`is written on ${signal}, which then ends the process as usual`, async () => {
      const file = path.join(dir, `${signal}.json`);
      const ended = await interrupt(file, signal);
      assert.equal(ended.signal, signal, `ended by ${signal}: ${JSON.stringify(ended)}`);
      // Valid JSON, as Perfetto opens it: spans with times and durations.
      const trace = JSON.parse(await readFile(file, 'utf8')) as Trace;
      assert.equal(trace.metadata['offload-ts'].interrupted, signal);
      const spans = trace.traceEvents.filter((event) => event.ph === 'X');
      const write = spans.find((span) => span.name === 'write');
      assert.ok(write && write.dur! >= 0 && write.args?.interrupted === undefined, 'the finished write is a span');
      const running = spans.filter((span) => span.args?.interrupted === true);
      assert.deepEqual(
        running.map((span) => span.name),
        ['fill'],
        `the operations still queued end at the interrupt: ${JSON.stringify(spans)}`,
      );
      for (const span of spans) assert.ok(Number.isFinite(span.ts) && Number.isFinite(span.dur));
    });
  }

  it('is left to a program that listens to the signal itself, and written at its exit', async () => {
    const file = path.join(dir, 'own.json');
    const ended = await interrupt(file, 'SIGINT', true);
    assert.equal(ended.code, 5, JSON.stringify(ended));
    assert.match(ended.stdout, /own handler/);
    const trace = JSON.parse(await readFile(file, 'utf8')) as Trace;
    assert.equal(trace.metadata['offload-ts'].interrupted, undefined);
    assert.ok(trace.traceEvents.some((event) => event.name === 'write'));
  });
});
