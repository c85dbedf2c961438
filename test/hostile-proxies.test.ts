/**
 * A client against hostile proxies: each test runs a small fake proxy here, speaking the real
 * frame protocol over a real socket on 127.0.0.1, that does one thing a proxy must not (trickle
 * a frame, never answer, describe its devices wrongly, send a trace that breaks merging, flood
 * print lines, forge host calls, claim to link to any address), and checks that the client ends
 * what it waits for with a coded error, stays within its bounds, and that `shutdown()` ends.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Offload, OffloadError, type Runtime } from '../src/index.js';
import { encodeFrame, FrameDecoder, type Frame } from '../src/transport/frame.js';
import { MAX_HOST_CALLS_IN_FLIGHT, REMOTE_PRINT_BUDGET_CHARS } from '../src/plugins/remote/launch-windows.js';
import { FAKE_DEVICE } from './helpers/fake-proxy.js';
import { fixtureBundle } from './helpers/fixtures.js';

const TOKEN = 'x'.repeat(16);

/** What a fake proxy does with each request: send frames back through `send`, or nothing. */
type Behaviour = (
  frame: Frame,
  send: (meta: Record<string, unknown>, payload?: Uint8Array) => void,
  socket: Socket,
) => void;

interface HostileProxy {
  address: string;
  /** Every frame the client sent (heartbeats left out). */
  received: Frame[];
  socket(): Socket;
  send(meta: Record<string, unknown>, payload?: Uint8Array): void;
  close(): Promise<void>;
}

/** Replies as a well-behaved proxy would to what every test needs (hello, queues, images, buffers); `behaviour` first. */
function ordinary(
  frame: Frame,
  send: (meta: Record<string, unknown>, payload?: Uint8Array) => void,
  images: Map<number, unknown[]>,
): void {
  const { op, id } = frame.meta;
  switch (op) {
    case 'hello':
      return send({ op: 'reply', id, devices: [FAKE_DEVICE], peers: [], now: Date.now() * 1000 });
    case 'register':
      images.set(frame.meta.image as number, frame.meta.entries as unknown[]);
      return send({ op: 'reply', id });
    case 'load': {
      const entries = (images.get(frame.meta.image as number) ?? []) as {
        name: string;
        kind: string;
        params: unknown[];
      }[];
      const kernels = entries
        .filter((entry) => entry.kind === 'kernel')
        .map(({ name, params }) => ({ name, params, format: 'wasm', staticBytes: 0 }));
      return send({ op: 'reply', id, kernels });
    }
    case 'alloc':
      return send({ op: 'reply', id, address: 64, grant: `grant-of-buffer-${frame.meta.buffer as number}` });
    case 'read':
      return send({ op: 'reply', id }, new Uint8Array(frame.meta.bytes as number).fill(7));
    case 'queue':
    case 'write':
    case 'record':
    case 'wait-host':
    case 'signal':
    case 'free':
    case 'sync':
    case 'queue-destroy':
    case 'unload':
      return send({ op: 'reply', id });
  }
}

const proxies: HostileProxy[] = [];

async function hostileProxy(behaviour: (...args: Parameters<Behaviour>) => boolean | void): Promise<HostileProxy> {
  let client: Socket | undefined;
  const received: Frame[] = [];
  const images = new Map<number, unknown[]>();
  const server: Server = createServer((socket) => {
    client = socket;
    const decoder = new FrameDecoder();
    const send = (meta: Record<string, unknown>, payload?: Uint8Array) => {
      if (!socket.destroyed) socket.write(encodeFrame(meta, payload));
    };
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      let frames: Frame[];
      try {
        frames = decoder.push(chunk);
      } catch {
        return void socket.destroy();
      }
      for (const frame of frames) {
        if (frame.meta.op === 'heartbeat') continue;
        received.push(frame);
        // The client offers compact launches; this proxy does not take them (its welcome says so).
        if (behaviour(frame, send, socket) !== true) ordinary(frame, send, images);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const proxy: HostileProxy = {
    address: `127.0.0.1:${port}`,
    received,
    socket: () => {
      if (!client) throw new Error('no client has connected');
      return client;
    },
    send: (meta, payload) => proxy.socket().write(encodeFrame(meta, payload)),
    close: () =>
      new Promise<void>((resolve) => {
        client?.destroy();
        server.close(() => resolve());
      }),
  };
  proxies.push(proxy);
  return proxy;
}

const runtimes: Runtime[] = [];

async function clientOf(addresses: string[], options: Parameters<typeof Offload.init>[0] = {}): Promise<Runtime> {
  const runtime = await Offload.init({ host: false, webgpu: false, proxies: addresses, token: TOKEN, ...options });
  runtimes.push(runtime);
  return runtime;
}

/** The error `promise` rejects with (it must reject). */
async function rejection(promise: Promise<unknown>): Promise<OffloadError> {
  const error = await promise.then(
    () => assert.fail('expected a rejection'),
    (error: unknown) => error,
  );
  assert.ok(error instanceof OffloadError, `an uncoded ${String(error)}`);
  return error;
}

afterEach(async () => {
  // shutdown() must always end: bounded here, so a hang fails the test rather than the suite.
  for (const runtime of runtimes.splice(0))
    await Promise.race([
      runtime.shutdown({ graceMs: 500 }),
      new Promise((_, reject) => setTimeout(() => reject(new Error('shutdown() did not end in 20 s')), 20_000).unref()),
    ]);
  for (const proxy of proxies.splice(0)) await proxy.close();
});

describe('a client against a hostile proxy', { timeout: 120_000 }, () => {
  it('takes a proxy that trickles one byte at a time into a frame as gone: liveness counts whole frames', async () => {
    let trickle: ReturnType<typeof setInterval> | undefined;
    const proxy = await hostileProxy((frame, _send, socket) => {
      if (frame.meta.op !== 'alloc') return;
      // A reply frame that is never finished: a byte every 100 ms, so bytes keep arriving.
      const bytes = encodeFrame({ op: 'reply', id: frame.meta.id, address: 64, grant: 'g'.repeat(60_000) });
      let at = 0;
      trickle = setInterval(() => {
        if (at < bytes.length - 1 && !socket.destroyed) socket.write(bytes.subarray(at, ++at));
      }, 100);
      return true;
    });
    try {
      const runtime = await clientOf([proxy.address], { peerTimeoutMs: 1000 });
      const started = Date.now();
      const error = await rejection(runtime.devices[0]!.alloc(8));
      assert.equal(error.code, 'DEVICE_LOST');
      assert.match(error.message, /sent nothing for 1000 ms \(OFFLOAD_PEER_TIMEOUT\): not one whole frame/);
      assert.ok(Date.now() - started < 5000, `taken as gone after ${Date.now() - started} ms`);
    } finally {
      clearInterval(trickle);
    }
  });

  it('ends a request a proxy never answers at its deadline, though the proxy sends heartbeats', async () => {
    let beat: ReturnType<typeof setInterval> | undefined;
    const proxy = await hostileProxy((frame, send) => {
      if (frame.meta.op === 'hello') beat = setInterval(() => send({ op: 'heartbeat' }), 100);
      return frame.meta.op === 'alloc';
    });
    try {
      const runtime = await clientOf([proxy.address], { peerTimeoutMs: 1000, requestTimeoutMs: 1500 });
      const started = Date.now();
      const error = await rejection(runtime.devices[0]!.alloc(8));
      assert.equal(error.code, 'DEVICE_LOST');
      assert.match(error.message, /did not answer its 'alloc' request \d+ within 1500 ms .*requestTimeoutMs/);
      const took = Date.now() - started;
      assert.ok(took >= 1400 && took < 6000, `ended after ${took} ms`);
    } finally {
      clearInterval(beat);
    }
  });

  it('refuses a hello whose devices are malformed, with PROTOCOL, and cuts long names', async () => {
    for (const [device, expected] of [
      [{ ...FAKE_DEVICE, maxTeams: 'lots' }, /device 0: field 'maxTeams' must be a non-negative integer/],
      [{ ...FAKE_DEVICE, maxTeamDims: [1, 1] }, /field 'maxTeamDims' must be three non-negative integers/],
      [{ ...FAKE_DEVICE, imageFormats: ['exe'] }, /field 'imageFormats' must be an array of image formats/],
      [{ ...FAKE_DEVICE, name: { toString: 1 } }, /field 'name' must be a string/],
      [{ ...FAKE_DEVICE, kind: 'fpga' }, /field 'kind' must be one of cpu, gpu, got "fpga"/],
      [{ ...FAKE_DEVICE, plugin: undefined }, /field 'plugin' must be one of host, remote, webgpu, got nothing/],
      ['a device', /device 0 is not an object/],
    ] as const) {
      const proxy = await hostileProxy((frame, send) => {
        if (frame.meta.op !== 'hello') return;
        send({ op: 'reply', id: frame.meta.id, devices: [device], peers: [] });
        return true;
      });
      const error = await rejection(
        Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token: TOKEN }),
      );
      assert.equal(error.code, 'PROTOCOL', error.message);
      assert.match(error.message, expected);
    }
    const many = await hostileProxy((frame, send) => {
      if (frame.meta.op !== 'hello') return;
      send({ op: 'reply', id: frame.meta.id, devices: Array(1100).fill(0), peers: [] });
      return true;
    });
    assert.equal(
      (await rejection(Offload.init({ host: false, webgpu: false, proxies: [many.address], token: TOKEN }))).code,
      'PROTOCOL',
    );
    const long = await hostileProxy((frame, send) => {
      if (frame.meta.op !== 'hello') return;
      const device = { ...FAKE_DEVICE, name: 'n'.repeat(20_000), limits: { a: 1, b: 'two', c: { d: 1 } } };
      send({ op: 'reply', id: frame.meta.id, devices: [device], peers: [] });
      return true;
    });
    const runtime = await clientOf([long.address]);
    const info = runtime.devices[0]!.info;
    assert.ok(info.name.length < 400, `a name of ${info.name.length} characters`);
    assert.deepEqual(info.limits, { a: 1 });
  });

  it('keeps a trace whose spans would break it out of it, and shutdown() ends: a name that cannot be shown, args 100,000 deep', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'hostile-trace-'));
    try {
      const events: unknown[] = [
        {
          name: 'process_name',
          cat: '__metadata',
          ph: 'M',
          ts: 0,
          pid: 0,
          tid: 0,
          args: { name: { toString: 1, valueOf: 1 } },
        },
        { name: 'thread_name', cat: '__metadata', ph: 'M', ts: 0, pid: 0, tid: 1, args: { name: { toString: 1 } } },
        { name: 'deep', cat: 'queue', ph: 'X', ts: 1, dur: 1, pid: 0, tid: 1, args: { bytes: 8 } },
        { name: 'kept', cat: 'queue', ph: 'X', ts: 2, dur: 1, pid: 0, tid: 1, args: { bytes: 16 } },
        { name: { toString: 1 }, cat: 'queue', ph: 'X', ts: 3, dur: 1, pid: 0, tid: 1 },
      ];
      // JSON.stringify cannot write 100,000 levels (nor can the proxy's side): the text is built by hand.
      const nested = `${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`;
      const text = JSON.stringify(events).replace('"args":{"bytes":8}', () => `"args":{"deep":${nested},"bytes":8}`);
      const proxy = await hostileProxy((frame, send) => {
        if (frame.meta.op !== 'trace') return;
        send({ op: 'reply', id: frame.meta.id, dropped: { toString: 1 } }, new TextEncoder().encode(text));
        return true;
      });
      const file = join(dir, 'trace.json');
      await clientOf([proxy.address], { trace: file });
      const runtime = runtimes.pop()!;
      await runtime.shutdown();
      const trace = JSON.parse(await readFile(file, 'utf8')) as {
        traceEvents: { name: string; args?: Record<string, unknown> }[];
      };
      const names = trace.traceEvents.map((event) => event.name);
      assert.ok(names.includes('kept') && names.includes('deep'), names.join(', '));
      const kept = trace.traceEvents.find((event) => event.name === 'deep')!;
      assert.deepEqual(kept.args, { bytes: 8 }, 'what is not a plain value is left out of a span');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a trace the proxy never sends ends shutdown() at the request deadline', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'hostile-trace-'));
    let beat: ReturnType<typeof setInterval> | undefined;
    try {
      const proxy = await hostileProxy((frame, send) => {
        if (frame.meta.op === 'hello') beat = setInterval(() => send({ op: 'heartbeat' }), 100);
        return frame.meta.op === 'trace';
      });
      await clientOf([proxy.address], { trace: join(dir, 'trace.json'), requestTimeoutMs: 1000 });
      const runtime = runtimes.pop()!;
      const started = Date.now();
      await runtime.shutdown();
      assert.ok(Date.now() - started < 8000, `shutdown took ${Date.now() - started} ms`);
    } finally {
      clearInterval(beat);
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("bounds a launch's print lines to its budget and drops lines while no launch runs", async () => {
    const lines: string[] = [];
    let launch: Frame | undefined;
    const proxy = await hostileProxy((frame) => {
      if (frame.meta.op !== 'launch') return;
      launch = frame;
      return true;
    });
    const bundle = await fixtureBundle();
    const runtime = await clientOf([proxy.address], { print: ({ text }) => lines.push(text) });
    const device = runtime.devices[0]!;
    const empty = await device.kernel(await runtime.register(bundle), 'empty');
    const queue = device.queue();
    await new Promise((resolve) => setTimeout(resolve, 100)); // the proxy has seen the queue
    proxy.send({ op: 'print', queue: 1, kernel: 'k', team: 0, text: 'while no launch runs: dropped' });
    await new Promise((resolve) => setTimeout(resolve, 100)); // the client has had it
    const done = queue.launch(empty, { teams: 1 }, []).done;
    while (!launch) await new Promise((resolve) => setTimeout(resolve, 10));
    // 50 MiB of lines: 100,000 frames of 512 characters, the most a line keeps.
    const line = 'p'.repeat(512);
    const frame = encodeFrame({ op: 'print', queue: 1, kernel: 'k', team: 0, text: line });
    const flood = new Uint8Array(frame.length * 1000);
    for (let i = 0; i < 1000; i++) flood.set(frame, i * frame.length);
    for (let i = 0; i < 100; i++) {
      if (!proxy.socket().write(flood)) await new Promise((resolve) => proxy.socket().once('drain', resolve));
    }
    proxy.send({ op: 'reply', id: launch.meta.id });
    await done;
    const printed = lines.slice(0, -1).reduce((sum, text) => sum + text.length, 0);
    assert.ok(printed <= REMOTE_PRINT_BUDGET_CHARS, `${printed} characters printed`);
    assert.equal(lines.length, REMOTE_PRINT_BUDGET_CHARS / 512 + 1);
    assert.match(
      lines.at(-1)!,
      /^\(99488 more lines of this launch dropped: a launch on proxy .* may print 256 KiB\)$/,
    );
    assert.ok(!lines.some((text) => text.includes('no launch runs')));
    // The queue's launch has ended (its window stays, empty, while the queue lives): a line is
    // dropped again, and a host call closes the connection.
    proxy.send({ op: 'print', queue: 1, kernel: 'k', team: 0, text: 'after the launch ended: dropped' });
    proxy.send({ op: 'host-call', call: 1, queue: 1, kernel: 'k', name: 'f', args: [1] });
    await new Promise((resolve) => setTimeout(resolve, 100)); // the client has had them
    const refused = await rejection(queue.launch(empty, { teams: 1 }, []).done);
    assert.equal(refused.code, 'DEVICE_LOST');
    assert.match(refused.message, /host call 1 for queue 1, which has no launch running/);
    assert.ok(!lines.some((text) => text.includes('after the launch ended')));
  });

  it('refuses host calls while no launch of the queue runs, and more than a bound in flight, with PROTOCOL', async () => {
    let launch: Frame | undefined;
    const proxy = await hostileProxy((frame) => {
      if (frame.meta.op !== 'launch') return;
      launch = frame;
      return true;
    });
    const bundle = await fixtureBundle();
    const runtime = await clientOf([proxy.address]);
    let called = 0;
    runtime.hostFunctions.add('f', () => new Promise<number>(() => called++));
    const device = runtime.devices[0]!;
    const empty = await device.kernel(await runtime.register(bundle), 'empty');
    const queue = device.queue();
    await new Promise((resolve) => setTimeout(resolve, 100));
    proxy.send({ op: 'host-call', call: 1, queue: 1, kernel: 'k', name: 'f', args: [1] });
    await new Promise((resolve) => setTimeout(resolve, 100)); // the client has had it
    const refused = await rejection(queue.launch(empty, { teams: 1 }, []).done);
    assert.equal(refused.code, 'DEVICE_LOST');
    assert.match(refused.message, /host call 1 for queue 1, which has no launch running/);
    assert.equal(called, 0, 'a forged call reached no function');

    // A second proxy floods a running launch with calls that are never answered here.
    launch = undefined;
    const flooding = await hostileProxy((frame) => {
      if (frame.meta.op !== 'launch') return;
      launch = frame;
      return true;
    });
    const other = await clientOf([flooding.address]);
    other.hostFunctions.add('f', () => new Promise<number>(() => called++));
    const otherDevice = other.devices[0]!;
    const otherEmpty = await otherDevice.kernel(await other.register(bundle), 'empty');
    const done = otherDevice.queue().launch(otherEmpty, { teams: 1 }, []).done;
    while (!launch) await new Promise((resolve) => setTimeout(resolve, 10));
    const calls = [];
    for (let call = 1; call <= MAX_HOST_CALLS_IN_FLIGHT + 10; call++)
      calls.push(encodeFrame({ op: 'host-call', call, queue: 1, kernel: 'k', name: 'f', args: [call] }));
    flooding.socket().write(Buffer.concat(calls));
    const flooded = await rejection(done);
    assert.equal(flooded.code, 'DEVICE_LOST');
    assert.match(flooded.message, /more than 4096 host calls unanswered at once/);
    assert.equal(called, MAX_HOST_CALLS_IN_FLIGHT);
  });

  it("gives a buffer's write grant only to a proxy that named its peer, never to one that claims 'any'", async () => {
    for (const peers of ['any', 'named'] as const) {
      const b = await hostileProxy(() => {});
      const a = await hostileProxy((frame, send) => {
        if (frame.meta.op === 'hello') {
          send({
            op: 'reply',
            id: frame.meta.id,
            devices: [FAKE_DEVICE],
            peers: peers === 'any' ? 'any' : [b.address],
          });
          return true;
        }
        if (frame.meta.op === 'send-peer') {
          send({ op: 'reply', id: frame.meta.id });
          return true;
        }
      });
      const runtime = await clientOf([a.address, b.address]);
      const [onA, onB] = runtime.devices;
      const src = await onA!.alloc(16);
      const dst = await onB!.alloc(16);
      await onA!.queue().copy(dst, src).done;
      const sentToA = a.received.filter((frame) => JSON.stringify(frame.meta).includes('grant-of-buffer'));
      if (peers === 'any') {
        assert.deepEqual(sentToA, [], 'no grant of a buffer on B reached A');
        assert.ok(
          b.received.some((frame) => frame.meta.op === 'write'),
          'the copy went through the client',
        );
      } else {
        assert.equal(sentToA.length, 1);
        assert.equal(sentToA[0]!.meta.op, 'send-peer');
      }
      await runtimes.pop()!.shutdown();
    }
  });
});
