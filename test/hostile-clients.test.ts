// Hostile clients against real `offload proxy` processes: each attack of the adversarial review
// (numbered as in its report), each ending with the proxy alive, the bystander client's data
// intact and a legitimate client served. TLS, tokens on disk and sniffing: test/tls.test.ts;
// hung peers: test/remote.test.ts; the network fuzzer: test/proxy-fuzz.test.ts.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildBundle } from '../src/build/compile.js';
import { decodeBundle, encodeBundle } from '../src/image/bundle.js';
import { STATIC_WINDOW_END, STATIC_WINDOW_START, WASM_TRIPLE } from '../src/image/wasm-abi.js';
import { Offload, type Buffer, type Runtime } from '../src/index.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { encodeHead } from '../src/transport/frame.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { hostileBundle } from './helpers/hostile-images.js';
import {
  checkServed,
  proxyStats,
  proxyStatsUntil,
  startPeeredProxies,
  startProxy,
  type ProxyProcess,
} from './helpers/proxy.js';
import { RawClient } from './helpers/raw-client.js';
import { metricsUrl, scrape } from './helpers/metrics.js';

const MiB = 1024 * 1024;
/** What no reply may exceed, whatever it answers: a few KiB. */
const MAX_REPLY_JSON = 8 * 1024;

function client(proxy: ProxyProcess, token = proxy.token): Promise<Runtime> {
  return Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token });
}

/** A legitimate client's whole round on `proxy`, which must still be running. */
async function served(proxy: ProxyProcess): Promise<void> {
  assert.equal(proxy.child.exitCode, null, `the proxy exited:\n${proxy.output().slice(-4000)}`);
  await checkServed({ proxies: [proxy.address], token: proxy.token });
}

/** The address of a remote buffer in its client's device memory. */
const addressOf = (buffer: Buffer): number => (buffer.allocation as unknown as { address: number }).address;

describe('hostile clients of one proxy, beside a bystander', { timeout: 300_000 }, () => {
  let proxy: ProxyProcess;
  /** A client minding its own business: its buffer must hold 0x5a throughout. */
  let bystander: Runtime;
  let kept: Buffer;

  const bystanderIntact = async (): Promise<void> => {
    const out = new Uint8Array(4096);
    await bystander.devices[0]!.queue().read(kept, out).done;
    assert.deepEqual([...new Set(out)], [0x5a], "the bystander's buffer changed");
  };

  before(async () => {
    proxy = await startProxy({
      threads: 2,
      memory: '64M',
      args: [
        '--login-timeout',
        '2000',
        '--max-connections',
        '48',
        '--quota-buffers',
        '3000',
        '--metrics',
        '127.0.0.1:0',
      ],
      // A tenant of its own: quotas bound each token's connections together, and its are not the attackers'.
      tenants: ['bystander'],
    });
    bystander = await client(proxy, proxy.tenants!.bystander);
    kept = await bystander.devices[0]!.alloc(4096);
    await bystander.devices[0]!.queue().write(kept, new Uint8Array(4096).fill(0x5a)).done;
  });
  after(async () => {
    await bystander.shutdown();
    await proxy.stop();
  });

  it('1: a field of 32,000 backslashes, before or after login, gets a short coded answer and the proxy lives', async () => {
    const huge = '\\'.repeat(32_000); // 64,044 bytes as JSON: under the frame limit, double it escaped
    const answers: Record<string, unknown>[] = [];

    // Before login: a frame that large is refused outright.
    const early = await RawClient.open(proxy.address);
    early.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: huge });
    await early.closedWithin(5000);
    answers.push(...early.frames.map((frame) => frame.meta));
    assert.equal(
      (answers[0]?.error as { code: string } | undefined)?.code,
      'PROTOCOL',
      JSON.stringify(answers).slice(0, 500),
    );

    // Before login, under the pre-login limit: the field is described, not echoed.
    const small = await RawClient.open(proxy.address);
    small.send({ op: 'hello', id: 1, version: '\\'.repeat(2000), token: proxy.token });
    const malformed = await small.error(1);
    assert.equal(malformed?.code, 'PROTOCOL');
    assert.match(
      malformed.message,
      /field 'version' must be a non-negative integer, got "\\+\.\.\. \(4002 characters\)/,
    );
    answers.push(await small.reply(1));

    // After login: in the op, in a string field, in a kernel name, in an image name.
    for (const meta of [
      { op: huge, id: 2 },
      { op: 'queue', id: 2, queue: huge, device: 0 },
      { op: 'launch', id: 2, queue: 1, image: 1, kernel: '\\'.repeat(4000), teams: 1, threads: 1, args: [] },
      { op: 'load', id: 2, image: 1, device: 0, note: huge },
    ]) {
      const raw = await RawClient.open(proxy.address);
      assert.equal((await raw.login(proxy.token)).error, undefined);
      raw.send({ op: 'queue', id: 3, queue: 1, device: 0 });
      raw.send(meta);
      answers.push(await raw.reply(2));
      raw.close();
    }
    for (const answer of answers) {
      assert.ok(
        JSON.stringify(answer).length < MAX_REPLY_JSON,
        `a reply of ${JSON.stringify(answer).length} characters`,
      );
      assert.ok((answer.error as { code: string }).code, 'every answer is a coded error');
    }
    await served(proxy);
    await bystanderIntact();
  });

  it("2: an image cannot write outside its static window, nor make the proxy zero or block another client's memory", async () => {
    const attacker = await client(proxy);
    try {
      const device = attacker.devices[0]!;
      const victim = addressOf(kept);
      // Data over the address where the bystander's buffer lives (in the bystander's memory).
      const over = await attacker.register(hostileBundle('over', { data: [{ offset: victim, size: 64 }] }));
      await rejectsWith(device.kernel(over, 'k'), 'INCOMPATIBLE_IMAGE', /static data at .* outside the static window/);
      // A manifest that claims the whole static window (and the bystander's address) but holds nothing.
      const window = { staticBase: STATIC_WINDOW_START, staticSize: STATIC_WINDOW_END - STATIC_WINDOW_START };
      const liar = await attacker.register(
        hostileBundle('liar', { data: [{ offset: STATIC_WINDOW_START, size: 16 }] }, window),
      );
      await device.kernel(liar, 'k');
      // The bystander's own image with static data loads and runs while the liar is loaded.
      await served(proxy);
      await liar.unregister();
      await bystanderIntact();
    } finally {
      await attacker.shutdown();
    }
    await bystanderIntact();
  });

  it('3: a new buffer never holds what another client (or the same one) freed', async () => {
    const [a, b] = await Promise.all([client(proxy), client(proxy)]);
    try {
      const secret = await a.devices[0]!.alloc(MiB);
      await a.devices[0]!.queue().write(secret, new Uint8Array(MiB).fill(0xab)).done;
      await secret.free();
      for (const runtime of [a, b]) {
        const fresh = await runtime.devices[0]!.alloc(MiB);
        const out = new Uint8Array(MiB);
        await runtime.devices[0]!.queue().read(fresh, out).done;
        assert.equal(out.indexOf(0xab), -1, 'a fresh buffer holds freed bytes');
        await fresh.free();
      }
    } finally {
      await Promise.all([a.shutdown(), b.shutdown()]);
    }
  });

  it('4: before login a connection may send a few KiB and stay --login-timeout; floods of either lock no client out', async () => {
    const before = await proxyStats(proxy);
    // 24 connections that announce a 64 MiB hello and stream 60 MiB of it.
    const chunk = new Uint8Array(MiB);
    const streamed = await Promise.all(
      Array.from({ length: 24 }, async () => {
        const raw = await RawClient.open(proxy.address);
        let sent = 0;
        if (
          await raw.write(encodeHead({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: proxy.token }, 64 * MiB))
        ) {
          while (sent < 60 * MiB && (await raw.write(chunk))) sent += chunk.length;
        }
        await raw.closedWithin(5000);
        return { sent, answer: raw.frames[0]?.meta };
      }),
    );
    for (const { sent, answer } of streamed) {
      assert.ok(sent < 60 * MiB, 'the proxy read a whole pre-login payload');
      assert.equal((answer?.error as { code: string } | undefined)?.code, 'PROTOCOL');
      // Refused at its first 16 bytes, or pushed out by the next connections logging in.
      assert.match(
        (answer!.error as { message: string }).message,
        /over the 0 bytes taken before login|too many connections are logging in/,
      );
    }
    const afterFlood = await proxyStats(proxy);
    assert.ok(
      afterFlood.rssBytes - before.rssBytes < 64 * MiB,
      `the proxy grew by ${((afterFlood.rssBytes - before.rssBytes) / MiB).toFixed(1)} MiB`,
    );

    // 40 silent connections (more than a quarter of --max-connections 48): the oldest give way
    // to a client that logs in, and every one is closed at the 2 s login deadline.
    const silent = await Promise.all(Array.from({ length: 40 }, () => RawClient.open(proxy.address)));
    const opened = Date.now();
    await served(proxy);
    await Promise.all(silent.map((raw) => raw.closedWithin(6000)));
    assert.ok(Date.now() - opened < 6000);
    const settled = await proxyStatsUntil(proxy, (stats) => stats.connections === 1);
    assert.equal(settled.connections, 1, 'only the bystander is connected');
    await bystanderIntact();
  });

  it("7: many small allocations end in OUT_OF_MEMORY naming the quota; one client's use of device memory cannot starve others forever", async () => {
    // 3001 allocations pipelined on one connection (--quota-buffers 3000).
    const raw = await RawClient.open(proxy.address);
    await raw.login(proxy.token);
    for (let buffer = 1; buffer <= 3001; buffer++)
      raw.send({ op: 'alloc', id: 1 + buffer, device: 0, buffer, bytes: 8, kind: 'device' });
    const refused = await raw.error(3002, 30_000);
    assert.equal(refused?.code, 'OUT_OF_MEMORY');
    assert.match(
      refused.message,
      /3001 buffers .* the proxy allows 3000 per token, however many connections use it \(offload proxy --quota-buffers\)/,
    );
    assert.equal(await raw.error(3001), undefined);
    raw.close();
    await proxyStatsUntil(proxy, (stats) => stats.sessions === 1);

    // Device memory: each client's context holds what it touched until it ends, and all of them
    // together at most the device's memory (64 MiB here), never a device's worth each.
    const [a, b] = await Promise.all([client(proxy), client(proxy)]);
    try {
      const big = await a.devices[0]!.alloc(40 * MiB);
      await a.devices[0]!.queue().write(big, new Uint8Array(40 * MiB).fill(1)).done;
      await big.free();
      await rejectsWith(b.devices[0]!.alloc(40 * MiB), 'OUT_OF_MEMORY', /held by its \d+ contexts/);
      await a.shutdown();
      await proxyStatsUntil(proxy, (stats) => stats.sessions === 2); // b and the bystander
      const now = await b.devices[0]!.alloc(40 * MiB);
      await now.free();
    } finally {
      await Promise.all([a.shutdown(), b.shutdown()]);
    }
    await served(proxy);
    await bystanderIntact();
  });

  it('11: an image over 64 MiB or a manifest over 64 KiB fail alone in the client; pipelined requests are served in order; signal takes only our codes', async () => {
    const runtime = await client(proxy);
    try {
      const device = runtime.devices[0]!;
      const image = {
        format: 'wasm',
        triple: WASM_TRIPLE,
        offset: 0,
        size: 0,
        staticBase: STATIC_WINDOW_START,
        staticSize: 0,
        minPages: 1,
      } as const;
      const huge = await runtime.register(
        encodeBundle({ name: 'huge', images: [image], entries: [{ name: 'k', kind: 'kernel', params: [] }] }, [
          new Uint8Array(65 * MiB),
        ]),
      );
      await rejectsWith(device.kernel(huge, 'k'), 'INVALID_ARGUMENT', /'register' request to proxy .* cannot be sent/);
      const entries = Array.from({ length: 1000 }, (_, i) => ({
        name: `kernel_with_a_rather_long_name_that_fills_the_manifest_${i}`,
        kind: 'kernel' as const,
        params: [],
      }));
      const wide = await runtime.register(
        encodeBundle({ name: 'wide', images: [image], entries }, [new Uint8Array(8)]),
      );
      await rejectsWith(device.kernel(wide, entries[0]!.name), 'INVALID_ARGUMENT', /cannot be sent/);
      // The client goes on.
      const buffer = await device.alloc(16);
      await device.queue().write(buffer, new Uint8Array(16).fill(3)).done;
    } finally {
      await runtime.shutdown();
    }

    // hello, register, load, alloc, queue, write, launch, read: one burst, no waiting.
    const fixture = decodeBundle(await readFile(await fixtureBundle()));
    const wasm = fixture.images.find((img) => img.info.format === 'wasm')!;
    const { offset: _offset, size: _size, ...info } = wasm.info;
    const raw = await RawClient.open(proxy.address);
    raw.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: proxy.token });
    raw.send({ op: 'register', id: 2, image: 1, name: 'fixture', info, entries: fixture.manifest.entries }, wasm.bytes);
    raw.send({ op: 'load', id: 3, image: 1, device: 0 });
    raw.send({ op: 'alloc', id: 4, device: 0, buffer: 1, bytes: 64, kind: 'device' });
    raw.send({ op: 'queue', id: 5, queue: 1, device: 0 });
    raw.send({
      op: 'launch',
      id: 6,
      queue: 1,
      image: 1,
      kernel: 'iota_i32',
      teams: 2,
      threads: 1,
      args: [16, { buffer: 1 }],
    });
    raw.send({ op: 'read', id: 7, queue: 1, buffer: 1, offset: 0, bytes: 64 });
    for (let id = 1; id <= 7; id++) assert.equal(await raw.error(id), undefined, `request ${id}`);
    const read = raw.frames.find((frame) => frame.meta.id === 7)!;
    assert.deepEqual(
      [...new Int32Array(read.payload.slice().buffer)],
      Array.from({ length: 16 }, (_, i) => i),
    );
    // A host gate failed with an error code the runtime does not have.
    raw.send({ op: 'wait-host', id: 8, queue: 1, gate: 1 });
    raw.send({ op: 'signal', id: 9, gate: 1, error: { code: 'PWNED', message: 'x' } });
    const signal = await raw.error(9);
    assert.equal(signal?.code, 'PROTOCOL');
    assert.match(signal.message, /field 'error.code' must be one of/);
    raw.close();
    await served(proxy);
    await bystanderIntact();
  });

  it('12: a streamed read past its buffer is OUT_OF_BOUNDS and sends nothing; one inside it streams', async () => {
    const raw = await RawClient.open(proxy.address);
    try {
      assert.equal((await raw.login(proxy.token)).error, undefined);
      // Buffer 2 lies after buffer 1 in this client's memory: what a read past buffer 1 would send.
      raw.send({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 256, kind: 'device' });
      raw.send({ op: 'alloc', id: 3, device: 0, buffer: 2, bytes: MiB, kind: 'device' });
      // A queue for each read: a queue's first failure fails what follows on it until a sync.
      for (let queue = 1; queue <= 5; queue++) raw.send({ op: 'queue', id: 3 + queue, queue, device: 0 });
      raw.send({ op: 'write', id: 9, queue: 5, buffer: 2, offset: 0, bytes: 64 }, new Uint8Array(64).fill(0x77));
      for (let id = 2; id <= 9; id++) assert.equal(await raw.error(id), undefined, `request ${id}`);

      // Over 256 KiB, a read streams as data frames. Unchecked, 2^40 bytes sent a million empty
      // frames and held the proxy's thread for 10 s and more (no reply within raw.error's 10 s).
      const past: [queue: number, buffer: number, offset: number, bytes: number][] = [
        [1, 1, 0, MiB],
        [2, 1, 0, 2 ** 40],
        [3, 2, 1, MiB],
        [4, 2, MiB, 2 ** 40],
      ];
      for (const [queue, buffer, offset, bytes] of past)
        raw.send({ op: 'read', id: 10 + queue, queue, buffer, offset, bytes });
      raw.send({ op: 'ping', id: 20 });
      for (const [queue, buffer, offset, bytes] of past) {
        const error = await raw.error(10 + queue);
        assert.equal(error?.code, 'OUT_OF_BOUNDS', `read ${10 + queue}: ${JSON.stringify(error)}`);
        const size = buffer === 1 ? 256 : MiB;
        assert.equal(
          error.message,
          `read from buffer of ${size} bytes on device 0: ${bytes} bytes at offset ${offset} reach byte ${offset + bytes}, beyond its ${size} bytes`,
        );
        const sent = raw.frames.filter((frame) => frame.meta.op === 'data' && frame.meta.id === 10 + queue);
        assert.equal(sent.length, 0, `data frames for read ${10 + queue}`);
      }
      assert.equal(await raw.error(20), undefined);

      // A streamed read of all of buffer 2 sends exactly its bytes.
      raw.send({ op: 'read', id: 21, queue: 5, buffer: 2, offset: 0, bytes: MiB });
      assert.equal(await raw.error(21), undefined);
      const chunks = raw.frames.filter((frame) => frame.meta.op === 'data' && frame.meta.id === 21);
      assert.deepEqual(
        chunks.map((frame) => [frame.meta.offset, frame.payload.byteLength]),
        [[0, MiB]],
      );
      assert.deepEqual([...new Set(chunks[0]!.payload.subarray(0, 64))], [0x77]);
      assert.deepEqual([...new Set(chunks[0]!.payload.subarray(64))], [0]);
    } finally {
      raw.close();
    }
    await served(proxy);
    await bystanderIntact();
  });

  it('the metrics endpoint, read after every attack above and during one, shows no token, no buffer bytes, no client', async () => {
    const url = metricsUrl(proxy.output());
    const marker = 'BUFFER-CONTENT-MARKER-7c1e';
    const raw = await RawClient.open(proxy.address);
    try {
      assert.equal((await raw.login(proxy.token)).error, undefined);
      raw.send({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 256, kind: 'device' });
      raw.send({ op: 'queue', id: 3, queue: 1, device: 0 });
      raw.send(
        { op: 'write', id: 4, queue: 1, buffer: 1, offset: 0, bytes: 64 },
        new TextEncoder().encode(marker.padEnd(64)),
      );
      for (let id = 2; id <= 4; id++) assert.equal(await raw.error(id), undefined, `request ${id}`);
      // A wrong token carrying the marker, and an op named with it.
      const guess = await RawClient.open(proxy.address);
      guess.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: `${marker}-token` });
      raw.send({ op: marker, id: 5 });
      await Promise.all([guess.closed, raw.closed]);
      const pages = await Promise.all(
        ['/metrics', '/state', '/', '/dashboard.js', '/readyz', '/healthz'].map(async (page) => {
          const response = await fetch(`${url}${page}`);
          return response.text();
        }),
      );
      const everything = pages.join('\n');
      assert.ok(!everything.includes(proxy.token), 'the token shows');
      assert.ok(!everything.includes(marker), "a buffer's bytes, a guessed token or a client's op show");
      assert.ok(!everything.includes('\\\\\\\\'), "an attack's backslashes show");
      assert.doesNotMatch(everything.replace(url, ''), /127\.0\.0\.1/, "a client's address shows");
      // The attacks are counted, by reason.
      const scraped = await scrape(url);
      assert.ok(scraped.value('offload_refusals_total', { reason: 'bad_frame' })! >= 1, scraped.text);
      assert.ok(scraped.value('offload_refusals_total', { reason: 'login' })! >= 1, scraped.text);
    } finally {
      raw.close();
    }
    await served(proxy);
    await bystanderIntact();
  });
});

describe('images that attack the device', { timeout: 300_000 }, () => {
  let dir: string;
  let bundle: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-hostile-'));
    await writeFile(
      path.join(dir, 'attacks.ts'),
      `/** Aborts with the string at p, whose length word (at p - 4) says 2 GiB. */
export function forged(p: usize): void { store<u32>(p - 4, 0x7ffffffe); abort(changetype<string>(p), changetype<string>(p), 7, 9); }
export function noisy(n: i32): void { for (let i = 0; i < n; i++) trace("noisy", 1, <f64>i); }
`,
    );
    bundle = (await buildBundle({ sources: [path.join(dir, 'attacks.ts')], output: path.join(dir, 'attacks') })).path;
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('5: an image whose start function loops is refused, and SIGTERM still stops the proxy at once', async () => {
    const proxy = await startProxy({ threads: 1 });
    const runtime = await client(proxy);
    try {
      const looping = await runtime.register(hostileBundle('looping', { start: 'loops' }));
      await rejectsWith(runtime.devices[0]!.kernel(looping, 'k'), 'INCOMPATIBLE_IMAGE', /has a start function/);
      await served(proxy);
    } finally {
      await runtime.shutdown();
    }
    const stopping = Date.now();
    await proxy.stop(10_000);
    assert.equal(proxy.child.exitCode, 0, 'the proxy exited on SIGTERM by itself');
    assert.ok(Date.now() - stopping < 5000);
  });

  it('6: abort with a forged 2 GiB length and trace in a loop fail or finish that launch only; the device goes on', async () => {
    const proxy = await startProxy({ threads: 2 });
    const runtime = await client(proxy);
    try {
      const device = runtime.devices[0]!;
      const library = await runtime.register(bundle);
      const [forged, noisy] = await Promise.all([device.kernel(library, 'forged'), device.kernel(library, 'noisy')]);
      const scratch = await device.alloc(64);
      const before = await proxyStats(proxy);
      const queue = device.queue();
      const trapped = await queue.launch(forged, { teams: 2 }, [scratch.at(16)]).done.then(
        () => undefined,
        (error: unknown) => error as Error & { code: string },
      );
      await queue.finish().catch(() => {});
      assert.equal(trapped?.code, 'KERNEL_TRAP');
      assert.ok(trapped.message.length < 8192, `an abort message of ${trapped.message.length} characters`);
      await device.queue().launch(noisy, { teams: 2 }, [1_000_000]).done;
      const afterwards = await proxyStats(proxy);
      assert.ok(
        afterwards.rssBytes - before.rssBytes < 128 * MiB,
        `the proxy grew by ${((afterwards.rssBytes - before.rssBytes) / MiB).toFixed(1)} MiB`,
      );
      assert.ok(
        proxy
          .output()
          .split('\n')
          .filter((line) => line.includes('noisy')).length <=
          2 * 64 + 2,
        'the trace is bounded',
      );
      await served(proxy);
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });
});

describe('the proxy as a whole', { timeout: 120_000 }, () => {
  it('7: all clients together cannot make the proxy hold more of its own memory than --proxy-memory', async () => {
    // Two tenants (a token each): each within its own --quota-buffers, together past --proxy-memory.
    const proxy = await startProxy({
      threads: 1,
      args: ['--proxy-memory', '2M', '--quota-buffers', '1500'],
      tenants: ['other'],
    });
    const [a, b] = await Promise.all([client(proxy), client(proxy, proxy.tenants!.other)]);
    try {
      for (let i = 0; i < 1500; i++) await a.devices[0]!.alloc(8);
      let made = 0;
      const refused = await (async () => {
        for (;;) {
          try {
            await b.devices[0]!.alloc(8);
            made++;
          } catch (error) {
            return error as Error & { code: string };
          }
        }
      })();
      assert.equal(refused.code, 'OUT_OF_MEMORY');
      // b is refused once it holds an eighth of the limit and only the kept last eighth is left.
      assert.match(refused.message, /limit of 2097152.*\(offload proxy --proxy-memory\)/);
      assert.ok(made > 0 && made < 1500, `b made ${made} buffers`);
      await a.shutdown();
      await proxyStatsUntil(proxy, (stats) => stats.sessions === 1);
      await b.devices[0]!.alloc(8);
      const stats = await proxyStats(proxy);
      assert.ok(stats.proxyMemoryBytes < 2 * MiB);
    } finally {
      await Promise.all([a.shutdown(), b.shutdown()]);
      await proxy.stop();
    }
  });

  it('a kernel that writes across its whole context memory touches only what its context allocated', async () => {
    // Six connections each allocate 64 bytes and launch a kernel writing every page of a 128 MiB
    // device: each context's memory reaches only as far as it allocated, so each write past that
    // traps, and the proxy commits a few MiB, not six devices' worth.
    const proxy = await startProxy({
      threads: 1,
      memory: '128M',
      args: ['--proxy-memory', '64M', '--quota-memory', '8M'],
      tenants: ['bystander'],
    });
    const attackers = await Promise.all(Array.from({ length: 6 }, () => client(proxy)));
    try {
      const before = await proxyStats(proxy);
      const outcomes = await Promise.all(
        attackers.map(async (runtime) => {
          const device = runtime.devices[0]!;
          const scan = await device.kernel(await runtime.register(await fixtureBundle()), 'scan_memory');
          const out = await device.alloc(64);
          const queue = device.queue();
          // Every 4 KiB page of the device's 128 MiB above the static window, read and written.
          const pages = (128 * MiB) / 4096;
          return queue.launch(scan, { teams: 1 }, [STATIC_WINDOW_END, 4096, pages, 1, out]).done.then(
            () => 'finished',
            (error: Error & { code?: string }) => `${error.code}: ${error.message}`,
          );
        }),
      );
      for (const outcome of outcomes) assert.match(outcome, /^KERNEL_TRAP: .*out of bounds/);
      await checkServed({ proxies: [proxy.address], token: proxy.tenants!.bystander });
      const during = await proxyStats(proxy);
      const grown = during.rssBytes - before.rssBytes;
      // Each context touched its static window and one page of buffer: far below 6 x 128 MiB.
      assert.ok(grown < 64 * MiB, `the proxy's RSS grew by ${(grown / MiB).toFixed(1)} MiB`);
    } finally {
      await Promise.all(attackers.map((runtime) => runtime.shutdown()));
      await proxy.stop();
    }
  });

  it('10: wrong logins are slowed down, never a lockout: a flood from one address refuses no right token, nor a peer link', async () => {
    const proxies = await startPeeredProxies(2, { threads: 1 });
    const [proxy, peer] = [proxies[0]!, proxies[1]!];
    const runtime = await client(proxy);
    try {
      const before = await proxyStats(proxy);
      // 40 wrong tokens and 20 forged grants at once, from the address the clients share.
      const started = Date.now();
      const flood = Promise.all(
        Array.from({ length: 60 }, async (_, attempt) => {
          const raw = await RawClient.open(proxy.address);
          raw.send({
            op: 'hello',
            id: 1,
            version: PROTOCOL_VERSION,
            ...(attempt < 40 ? { token: `not-the-token-${attempt}` } : { grant: `forged-grant-${attempt}` }),
          });
          const answer = await raw.reply(1, 20_000).catch(() => undefined);
          raw.close();
          return { answer, after: Date.now() - started };
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      // Meanwhile the right token logs in at once, every time.
      const waits: number[] = [];
      for (let attempt = 0; attempt < 3; attempt++) {
        const raw = await RawClient.open(proxy.address);
        const asked = Date.now();
        const answer = await raw.login(proxy.token);
        assert.equal(answer.error, undefined, JSON.stringify(answer));
        // Under a second on an idle machine; the bound leaves room for a loaded one (a lockout refused it for 60 s).
        assert.ok(Date.now() - asked < 3000, `a right token waited ${Date.now() - asked} ms`);
        waits.push(Date.now() - asked);
        raw.close();
      }
      // A copy from the peer into this proxy logs the peer's link in with a grant: not refused either.
      const remote = await Offload.init({
        host: false,
        webgpu: false,
        proxies: [proxy.address, peer.address],
        token: proxy.token,
      });
      try {
        const [here, there] = remote.devices;
        const [a, b] = await Promise.all([here!.alloc(4096), there!.alloc(4096)]);
        await there!.queue().write(b, new Uint8Array(4096).fill(7)).done;
        await there!.queue().copy(a, b).done;
        const out = new Uint8Array(4096);
        await here!.queue().read(a, out).done;
        assert.deepEqual([...new Set(out)], [7]);
      } finally {
        await remote.shutdown();
      }
      await served(proxy);
      const answers = await flood;
      const during = await proxyStats(proxy);
      const slowest = Math.max(...answers.map(({ after }) => after));
      console.log(
        `login flood: 60 wrong logins answered within ${slowest} ms; proxy RSS ${(before.rssBytes / MiB).toFixed(1)} -> ${(during.rssBytes / MiB).toFixed(1)} MiB, ` +
          `event-loop delay max ${during.eventLoopDelayMaxMs.toFixed(0)} ms; right tokens logged in within ${waits.join(', ')} ms`,
      );
      for (const { answer } of answers) {
        // Answered late with UNAUTHORIZED, or pushed out by the next connections logging in.
        if (answer === undefined) continue;
        const error = answer.error as { code: string; message: string };
        assert.ok(
          error.code === 'UNAUTHORIZED' || /too many connections are logging in/.test(error.message),
          JSON.stringify(error),
        );
      }
      // Each failure from an address delays the next answer there: the flood is paced, not refused.
      assert.ok(slowest >= 1000, `the wrong logins were all answered within ${slowest} ms`);
    } finally {
      await runtime.shutdown();
      await Promise.all([proxy.stop(), peer.stop()]);
    }
  });
});
