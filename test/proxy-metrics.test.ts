// Operating a proxy: `offload proxy --metrics` (Prometheus /metrics, /healthz, /readyz), whose
// figures move as a real client over 127.0.0.1 allocates, launches and leaves; readiness when a
// device is lost; what the endpoint never shows; a flood of scrapes beside a client's launches;
// and the structured logs of --log-format json. The dashboard page: test/proxy-dashboard.test.ts;
// the endpoint under the hostile-client suite: test/hostile-clients.test.ts.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Offload, OffloadError, type Runtime } from '../src/index.js';
import { ProxyLog } from '../src/proxy/log.js';
import { LoopDelay, RESOLUTION_MS } from '../src/proxy/loop-delay.js';
import { MetricsEndpoint } from '../src/proxy/metrics-http.js';
import { ProxyMetrics } from '../src/proxy/metrics.js';
import { sizesNursery } from '../src/proxy/nursery.js';
import { ProxyServer } from '../src/proxy/server.js';
import { rejectsWith } from './conformance/suite.js';
import { fixtureBundle } from './helpers/fixtures.js';
import { metricsUrl, scrape, scrapeUntil } from './helpers/metrics.js';
import { proxyStats, startProxy } from './helpers/proxy.js';
import { RawClient } from './helpers/raw-client.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Every family /metrics serves, with its type. */
const FAMILIES: Record<string, 'COUNTER' | 'GAUGE' | 'HISTOGRAM'> = {
  offload_connections: 'GAUGE',
  offload_connections_max: 'GAUGE',
  offload_connections_accepted_total: 'COUNTER',
  offload_sessions: 'GAUGE',
  offload_sessions_opened_total: 'COUNTER',
  offload_tenants: 'GAUGE',
  offload_device_up: 'GAUGE',
  offload_device_launches_total: 'COUNTER',
  offload_device_kernel_seconds_total: 'COUNTER',
  offload_device_launch_duration_seconds: 'HISTOGRAM',
  offload_device_bytes_total: 'COUNTER',
  offload_device_memory_held_bytes: 'GAUGE',
  offload_device_memory_limit_bytes: 'GAUGE',
  offload_device_queue_depth: 'GAUGE',
  offload_tenant_held: 'GAUGE',
  offload_quota: 'GAUGE',
  offload_tenant_launches_total: 'COUNTER',
  offload_tenant_refusals_total: 'COUNTER',
  offload_refusals_total: 'COUNTER',
  offload_request_errors_total: 'COUNTER',
  offload_proxy_queues: 'GAUGE',
  offload_proxy_buffers: 'GAUGE',
  offload_proxy_images: 'GAUGE',
  offload_proxy_memory_held_bytes: 'GAUGE',
  offload_process_resident_memory_bytes: 'GAUGE',
  offload_process_heap_used_bytes: 'GAUGE',
  offload_process_young_generation_bytes: 'GAUGE',
  offload_process_external_memory_bytes: 'GAUGE',
  offload_event_loop_delay_p99_seconds: 'GAUGE',
  offload_event_loop_delay_max_seconds: 'GAUGE',
  offload_uptime_seconds: 'GAUGE',
  offload_ready: 'GAUGE',
};

function client(address: string, token: string): Promise<Runtime> {
  return Offload.init({ host: false, webgpu: false, proxies: [address], token });
}

/** A login with a wrong token, answered (late: failing logins are slowed down). */
async function wrongLogin(address: string): Promise<void> {
  const raw = await RawClient.open(address);
  raw.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: 'not-the-token-at-all' });
  await raw.closed;
}

describe('offload proxy --metrics', { timeout: 120_000 }, () => {
  it('serves every family with HELP and TYPE, and its values move as a client allocates, launches, is refused and leaves', async () => {
    const proxy = await startProxy({ args: ['--metrics', '127.0.0.1:0', '--quota-memory', '1M'] });
    try {
      const url = metricsUrl(proxy.output());
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const first = await scrape(url);
      for (const [name, type] of Object.entries(FAMILIES)) {
        const family = first.families.get(name);
        assert.ok(family, `no family ${name} in:\n${first.text}`);
        assert.equal(family.type, type, name);
        assert.ok(family.help.length > 10, `${name} has no HELP`);
        assert.ok(name.endsWith('_total') === (type === 'COUNTER'), `${name}: counters, and only they, end in _total`);
      }
      assert.equal(first.families.size, Object.keys(FAMILIES).length, 'a family the test does not know');
      assert.equal(first.value('offload_sessions'), 0);
      assert.equal(first.value('offload_device_up', { device: '0' }), 1);
      assert.equal(first.value('offload_device_launches_total', { device: '0', outcome: 'ok' }), 0);
      assert.ok(first.value('offload_process_resident_memory_bytes')! > 0);

      const runtime = await client(proxy.address, proxy.token);
      const device = runtime.devices[0]!;
      const iota = await device.kernel(await runtime.register(await fixtureBundle()), 'iota_i32');
      const buffer = await device.alloc(4096);
      const queue = device.queue();
      queue.write(buffer, new Uint8Array(4096));
      for (let i = 0; i < 5; i++) queue.launch(iota, { teams: 2 }, [16, buffer]);
      queue.read(buffer, new Int32Array(16));
      await queue.finish();
      // Over --quota-memory: refused, and counted as such for the tenant.
      await rejectsWith(device.alloc(2 * 1024 * 1024), 'OUT_OF_MEMORY', /quota-memory/);
      await wrongLogin(proxy.address);

      const busy = await scrapeUntil(
        url,
        (s) =>
          s.value('offload_device_launches_total', { device: '0', outcome: 'ok' }) === 5 &&
          s.value('offload_refusals_total', { reason: 'login' }) === 1,
      );
      const tenantLines = busy.text
        .split('\n')
        .filter((line) => line.startsWith('offload_tenant_held'))
        .join('\n');
      assert.equal(busy.value('offload_sessions'), 1);
      assert.equal(busy.value('offload_connections', { state: 'client' }), 1, busy.text);
      assert.equal(busy.value('offload_tenants'), 1);
      assert.equal(busy.value('offload_tenant_held', { tenant: '1', resource: 'memory_bytes' }), 4096);
      assert.equal(busy.value('offload_tenant_held', { tenant: '1', resource: 'buffers' }), 1, tenantLines);
      assert.equal(busy.value('offload_tenant_held', { tenant: '1', resource: 'queues' }), 1, tenantLines);
      assert.equal(busy.value('offload_tenant_held', { tenant: '1', resource: 'images' }), 1);
      assert.equal(busy.value('offload_quota', { resource: 'memory_bytes' }), 1024 * 1024);
      assert.equal(busy.value('offload_tenant_launches_total', { tenant: '1' }), 5);
      assert.equal(busy.value('offload_tenant_refusals_total', { tenant: '1', reason: 'quota' }), 1);
      assert.equal(busy.value('offload_refusals_total', { reason: 'quota' }), 1);
      assert.equal(busy.value('offload_device_memory_held_bytes', { device: '0' }), 4096);
      assert.ok(busy.value('offload_device_memory_limit_bytes', { device: '0' })! >= 4096);
      assert.equal(busy.value('offload_device_bytes_total', { device: '0', direction: 'in' }), 4096);
      assert.equal(busy.value('offload_device_bytes_total', { device: '0', direction: 'out' }), 64);
      assert.equal(busy.value('offload_device_queue_depth', { device: '0' }), 0);
      assert.ok(busy.value('offload_device_kernel_seconds_total', { device: '0' })! > 0);
      // The parser folds a labelled histogram's samples together (prom2json's shape): read them as written.
      assert.match(busy.text, /^offload_device_launch_duration_seconds_count\{device="0"\} 5$/m);
      assert.match(busy.text, /^offload_device_launch_duration_seconds_bucket\{device="0",le="\+Inf"\} 5$/m);
      assert.ok(busy.value('offload_proxy_buffers')! >= 1);
      assert.ok(busy.value('offload_connections_accepted_total')! >= 2);
      // Clients are numbers: no address without --metrics-names.
      assert.doesNotMatch(busy.text, /client=|127\.0\.0\.1/);

      await runtime.shutdown();
      const left = await scrapeUntil(url, (s) => s.value('offload_sessions') === 0);
      assert.equal(left.value('offload_device_memory_held_bytes', { device: '0' }), 0);
      assert.equal(left.value('offload_tenant_held', { tenant: '1', resource: 'buffers' }), undefined);
      assert.equal(left.value('offload_device_launches_total', { device: '0', outcome: 'ok' }), 5, 'counters stay');
      assert.equal(left.value('offload_sessions_opened_total'), 1);
      // The default log format prints nothing it did not print before.
      assert.doesNotMatch(proxy.output(), /offload proxy:/);
    } finally {
      await proxy.stop();
    }
  });

  it("a spawned proxy's young generation stays at 1 MiB a semi-space while a client launches, unless NODE_OPTIONS sizes it", async () => {
    const MiB = 1024 * 1024;
    // Node takes V8's flags with - or _; only a flag that sizes the nursery counts.
    assert.equal(sizesNursery(['--import', 'tsx'], '--max-old-space-size=4096 --max_semi_space_size=4'), true);
    assert.equal(sizesNursery(['--semi-space-growth-factor=2'], undefined), true);
    assert.equal(sizesNursery(['--max-old-space-size=4096'], '--enable-source-maps'), false);
    const youngAfterLaunches = async (nodeOptions: string | undefined): Promise<number> => {
      const proxy = await startProxy({ args: ['--metrics', '127.0.0.1:0'], nodeOptions });
      try {
        const runtime = await client(proxy.address, proxy.token);
        try {
          const device = runtime.devices[0]!;
          const empty = await device.kernel(await runtime.register(await fixtureBundle()), 'empty');
          const queue = device.queue();
          // Steady allocation, as a busy proxy sees it: V8 grows a nursery it may grow within these.
          for (let batch = 0; batch < 40; batch++) {
            for (let i = 0; i < 500; i++) queue.launch(empty, { teams: 1 }, []);
            await queue.finish();
          }
        } finally {
          await runtime.shutdown();
        }
        return (await scrape(metricsUrl(proxy.output()))).value('offload_process_young_generation_bytes')!;
      } finally {
        await proxy.stop();
      }
    };
    // Two semi-spaces of 1 MiB at most.
    assert.ok((await youngAfterLaunches('')) <= 2 * MiB);
    // The user's own size wins, and the gauge shows it: V8 grew this one past 1 MiB a semi-space.
    assert.ok((await youngAfterLaunches('--max-semi-space-size=8')) > 2 * MiB);
  });

  it('answers /healthz, and /readyz 200 while its devices serve, 503 naming the device once it is lost', async () => {
    const lines: string[] = [];
    const log = new ProxyLog({ format: 'json', sink: (line) => lines.push(line) });
    const server = await ProxyServer.start({
      listen: '127.0.0.1:0',
      token: randomBytes(16).toString('hex'),
      runtime: { host: { threads: 1, memoryBytes: 16 * 1024 * 1024 }, webgpu: false },
      metrics: new ProxyMetrics({ log }),
    });
    const endpoint = await MetricsEndpoint.start(server.metrics, { listen: '127.0.0.1:0' });
    try {
      const get = async (path: string) => {
        const response = await fetch(`${endpoint.url}${path}`);
        return { status: response.status, body: await response.text() };
      };
      assert.deepEqual(await get('/healthz'), { status: 200, body: 'ok\n' });
      assert.deepEqual(await get('/readyz'), { status: 200, body: 'ready\n' });
      assert.equal((await get('/nowhere')).status, 404);
      assert.equal((await fetch(`${endpoint.url}/metrics`, { method: 'POST', body: 'x' })).status, 405);
      // Lose the device as a crashing machine would: its worker dies again and again.
      const pool = (
        server.runtime.devices[0]!.plugin as unknown as { pool: { workers: { terminate(): Promise<number> }[] } }
      ).pool;
      for (let death = 0; death < 8 && !server.runtime.devices[0]!.plugin.lost; death++) {
        const worker = pool.workers[0]!;
        await worker.terminate();
        const deadline = Date.now() + 5000;
        while (pool.workers[0] === worker && !server.runtime.devices[0]!.plugin.lost && Date.now() < deadline)
          await new Promise((resolve) => setTimeout(resolve, 5));
      }
      assert.ok(server.runtime.devices[0]!.plugin.lost, 'the device was not lost');
      const ready = await get('/readyz');
      assert.equal(ready.status, 503);
      assert.match(ready.body, /^not ready: device 0 \(host .*\) is lost\n$/);
      assert.deepEqual(await get('/healthz'), { status: 200, body: 'ok\n' }, 'alive still: it serves its figures');
      const after = await scrapeUntil(endpoint.url, (s) => s.value('offload_device_up', { device: '0' }) === 0);
      assert.equal(after.value('offload_ready'), 0);
      // The loss is logged once, as an error event.
      const deadline = Date.now() + 15_000;
      while (!lines.some((line) => line.includes('"device-lost"')) && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 50));
      const lost = lines
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .filter((e) => e.event === 'device-lost');
      assert.equal(lost.length, 1, lines.join(''));
      assert.equal(lost[0]!.level, 'error');
      assert.equal(lost[0]!.device, 0);
    } finally {
      await endpoint.close();
      await server.shutdown();
    }
  });

  it('listens on loopback only, unless TLS or --metrics-insecure says otherwise', async () => {
    const metrics = new ProxyMetrics();
    await assert.rejects(
      MetricsEndpoint.start(metrics, { listen: '0.0.0.0:0' }),
      (error: unknown) =>
        error instanceof OffloadError && error.code === 'INVALID_ARGUMENT' && /--metrics-insecure/.test(error.message),
    );
    const open = await MetricsEndpoint.start(metrics, { listen: '0.0.0.0:0', insecure: true });
    await open.close();
    const result = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(
        process.execPath,
        [
          '--import',
          'tsx',
          path.join(root, 'src/cli/main.ts'),
          'proxy',
          '--listen',
          '127.0.0.1:0',
          '--metrics',
          '0.0.0.0:0',
        ],
        { cwd: root, env: { ...process.env, OFFLOAD_TOKEN: randomBytes(16).toString('hex') }, timeout: 60_000 },
        (error, _stdout, stderr) => resolve({ code: typeof error?.code === 'number' ? error.code : 0, stderr }),
      ),
    );
    assert.equal(result.code, 2);
    assert.match(result.stderr, /serving metrics on 0\.0\.0\.0:0 .*--metrics-insecure/);
  });

  it('shows client addresses and refusal messages only with --metrics-names, and never a token or a buffer', async () => {
    const token = randomBytes(16).toString('hex');
    const secret = 'SECRET-BYTES-0123456789';
    for (const names of [false, true]) {
      const server = await ProxyServer.start({
        listen: '127.0.0.1:0',
        token,
        runtime: { host: { threads: 1, memoryBytes: 16 * 1024 * 1024 }, webgpu: false },
        quotas: { buffers: 1 },
        metrics: new ProxyMetrics({ names }),
      });
      const endpoint = await MetricsEndpoint.start(server.metrics, { listen: '127.0.0.1:0' });
      const runtime = await client(server.address, token);
      try {
        const buffer = await runtime.devices[0]!.alloc(64);
        await runtime.devices[0]!.queue().write(buffer, new TextEncoder().encode(secret.padEnd(64))).done;
        await rejectsWith(runtime.devices[0]!.alloc(64), 'OUT_OF_MEMORY', /quota-buffers/);
        await wrongLogin(server.address);
        await new Promise((resolve) => setTimeout(resolve, 300));
        const everything = (
          await Promise.all(
            ['/metrics', '/state', '/', '/dashboard.js'].map(async (p) => (await fetch(`${endpoint.url}${p}`)).text()),
          )
        ).join('\n');
        assert.ok(!everything.includes(token), 'the token shows');
        assert.ok(!everything.includes(secret), "a buffer's bytes show");
        assert.ok(!everything.includes('not-the-token'), 'a wrong token shows');
        const state = JSON.parse(await (await fetch(`${endpoint.url}/state`)).text()) as {
          tenantsHeld: { client?: string }[];
          recentRefusals: { reason: string; message?: string; client?: string }[];
        };
        assert.deepEqual(state.recentRefusals.map((r) => r.reason).sort(), ['login', 'quota']);
        if (names) {
          assert.match(state.tenantsHeld[0]!.client!, /^127\.0\.0\.1:\d+$/);
          assert.ok(state.recentRefusals.every((r) => r.message && r.client));
          assert.match((await scrape(endpoint.url)).text, /offload_tenant_held\{tenant="1",client="127\.0\.0\.1:\d+"/);
        } else {
          assert.doesNotMatch(everything.replace(endpoint.url, ''), /127\.0\.0\.1/);
          assert.ok(state.recentRefusals.every((r) => r.message === undefined && r.client === undefined));
        }
      } finally {
        await runtime.shutdown();
        await endpoint.close();
        await server.shutdown();
      }
    }
  });
});

/** Median of launch round trips of an empty kernel (enqueue to completion, seen by the client) for `ms` ms, in ms. */
async function launchMedianMs(runtime: Runtime, ms: number): Promise<number> {
  const device = runtime.devices[0]!;
  const empty = await device.kernel(await runtime.register(await fixtureBundle()), 'empty');
  const queue = device.queue();
  const times: number[] = [];
  const end = performance.now() + ms;
  while (performance.now() < end) {
    const start = performance.now();
    await queue.launch(empty, { teams: 1 }, []).done;
    times.push(performance.now() - start);
  }
  await queue.destroy();
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

/**
 * A flood of GET /metrics from `clients` loops of another process (so that the client's own event
 * loop is not the one flooded). Resolves once the requests are coming; stop() says how many it made.
 */
async function flood(url: string, clients: number): Promise<{ stop(): Promise<number> }> {
  const script = `
    let count = 0, going = true;
    process.stdin.on('data', () => { going = false; });
    const loop = async () => { while (going) { await (await fetch(process.argv[1] + '/metrics')).text(); if (count++ === 0) process.stdout.write('going\\n'); } };
    Promise.all(Array.from({ length: Number(process.argv[2]) }, loop)).then(() => { process.stdout.write(String(count)); process.exit(0); });
  `;
  const child = spawn(process.execPath, ['-e', script, url, String(clients)], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  await new Promise<void>((resolve) =>
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.startsWith('going\n')) resolve();
    }),
  );
  return {
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve(Number(out.slice('going\n'.length))));
        child.stdin.write('stop\n');
      }),
  };
}

/** How often the main thread of process `pid` went to sleep so far (/proc: its voluntary context switches). */
function mainThreadSleeps(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'latin1');
  return Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)![1]);
}

describe("the proxy's event-loop delay", { timeout: 60_000 }, () => {
  it('is seen by the metrics window and by the stats line, each hold once, and looked for only while the proxy has work', async () => {
    const delay = new LoopDelay();
    try {
      assert.equal(delay.running, false, 'no work yet: no timer');
      delay.work();
      assert.equal(delay.running, true);
      await sleep(30);
      const held = Date.now();
      while (Date.now() - held < 250); // the loop held 250 ms
      await sleep(30);
      assert.ok(delay.windowNow().max >= 0.2, `the window's max is ${delay.windowNow().max} s`);
      const first = delay.takeMaxMs();
      assert.ok(first >= 200, `the stats line's max is ${first} ms`);
      await sleep(50);
      const second = delay.takeMaxMs();
      assert.ok(second < 125, `the hold was taken once, yet the next take reads ${second} ms`);
      const closed = delay.closeWindow();
      assert.ok(closed.max >= 0.2 && closed.p99 > 0, JSON.stringify(closed));
      assert.deepEqual(delay.windowNow(), { p99: 0, max: 0 }, 'a new window starts empty');
      // Work now and then keeps it looking; a second (RESOLUTION_MS x 100) with none stops it.
      for (let i = 0; i < 15; i++) {
        delay.work();
        await sleep(RESOLUTION_MS * 10);
        assert.equal(delay.running, true, `stopped while the proxy had work, after ${i} looks`);
      }
      const idleSince = Date.now();
      while (delay.running && Date.now() - idleSince < 10_000) await sleep(20);
      assert.equal(delay.running, false, 'still looking after 10 s with no work');
      assert.ok(Date.now() - idleSince >= RESOLUTION_MS * 90, 'stopped before a second without work');
      delay.work();
      assert.equal(delay.running, true, 'work starts it again');
    } finally {
      delay.stop();
    }
    assert.equal(delay.running, false);
    delay.work();
    assert.equal(delay.running, false, 'stopped for good');
  });

  it(
    'an idle proxy with a client connected sleeps but a few times a second',
    { skip: process.platform !== 'linux' && 'reads /proc' },
    async () => {
      const proxy = await startProxy({ args: ['--metrics', '127.0.0.1:0'] });
      const runtime = await client(proxy.address, proxy.token);
      try {
        await runtime.devices[0]!.alloc(4096);
        // The delay's looks go on for a second after the last request.
        await sleep(1500);
        const pid = proxy.child.pid!;
        const before = mainThreadSleeps(pid);
        await sleep(3000);
        const perSecond = (mainThreadSleeps(pid) - before) / 3;
        // Heartbeats both ways and the device watch, a second each; two event-loop delay monitors
        // of 10 ms woke it about 100 times a second.
        assert.ok(perSecond < 30, `the idle proxy's main thread woke ${perSecond} times a second`);
        const stats = await proxyStats(proxy);
        assert.ok(stats.eventLoopDelayMaxMs >= 0, JSON.stringify(stats));
      } finally {
        await runtime.shutdown();
        await proxy.stop();
      }
    },
  );
});

describe('the metrics endpoint under load, and the event log', { timeout: 120_000 }, () => {
  it("a flood of /metrics requests does not slow a client's launches", async (t: TestContext) => {
    const proxy = await startProxy({ args: ['--metrics', '127.0.0.1:0'] });
    const runtime = await client(proxy.address, proxy.token);
    try {
      const url = metricsUrl(proxy.output());
      await launchMedianMs(runtime, 300); // warm up: the image loads, the paths get compiled
      const quiet = await launchMedianMs(runtime, 2000);
      const quietDelay = (await scrape(url)).value('offload_event_loop_delay_max_seconds')!;
      const load = await flood(url, 16);
      const started = Date.now();
      const flooded = await launchMedianMs(runtime, 2000);
      const seconds = (Date.now() - started) / 1000;
      const floodDelay = (await scrape(url)).value('offload_event_loop_delay_max_seconds')!;
      const scrapes = await load.stop();
      const line =
        `launch round trip median: ${quiet.toFixed(3)} ms quiet, ${flooded.toFixed(3)} ms under ` +
        `${Math.round(scrapes / seconds)} scrapes/s (${scrapes} in ${seconds.toFixed(1)} s); ` +
        `proxy event-loop delay max ${(quietDelay * 1000).toFixed(0)} ms quiet, ${(floodDelay * 1000).toFixed(0)} ms flooded`;
      t.diagnostic(line);
      assert.ok(scrapes > 100, `the flood made only ${scrapes} requests`);
      // Not a timing test: a bound only a proxy that stalls for its scrapers breaks.
      assert.ok(flooded < quiet * 10 + 20, line);
    } finally {
      await runtime.shutdown();
      await proxy.stop();
    }
  });

  it('--log-format json writes one JSON object per event: connections, logins, refusals with reason, sessions with what they held, shutdown', async () => {
    const proxy = await startProxy({ args: ['--log-format', 'json', '--log-level', 'debug'] });
    let stopped = false;
    try {
      const runtime = await client(proxy.address, proxy.token);
      await runtime.devices[0]!.alloc(4096);
      await runtime.shutdown();
      await wrongLogin(proxy.address);
      await proxy.stop();
      stopped = true;
      const events = proxy
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      for (const event of events) {
        assert.ok(['debug', 'info', 'warn', 'error'].includes(event.level as string), JSON.stringify(event));
        assert.ok(!Number.isNaN(Date.parse(event.time as string)), JSON.stringify(event));
        assert.equal(typeof event.msg, 'string');
      }
      const named = (name: string) => events.filter((event) => event.event === name);
      assert.equal(named('listening').length, 1);
      assert.equal(named('connection').length, 2);
      assert.deepEqual(
        named('login').map((event) => event.as),
        ['client'],
      );
      const [end] = named('session-end');
      assert.equal(end?.tenant, 1);
      assert.deepEqual((end?.held as Record<string, number>).buffers, 1);
      assert.deepEqual((end?.held as Record<string, number>).memoryBytes, 4096);
      const [refusal] = named('refusal');
      assert.equal(refusal?.level, 'warn');
      assert.equal(refusal?.reason, 'login');
      assert.equal(refusal?.code, 'UNAUTHORIZED');
      assert.ok(!JSON.stringify(events).includes(proxy.token), 'the token is logged');
      assert.ok(!JSON.stringify(events).includes('not-the-token'), 'a wrong token is logged');
      assert.deepEqual(
        events.slice(-2).map((event) => event.event),
        ['shutdown', 'stopped'],
      );
    } finally {
      if (!stopped) await proxy.stop();
    }
  });

  it('refuses an unknown --log-format or --log-level, naming the choices', async () => {
    for (const [option, value, choices] of [
      ['--log-format', 'xml', 'human, json'],
      ['--log-level', 'loud', 'debug, info, warn, error'],
    ] as const) {
      const result = await new Promise<{ code: number; stderr: string }>((resolve) =>
        execFile(
          process.execPath,
          ['--import', 'tsx', path.join(root, 'src/cli/main.ts'), 'proxy', '--listen', '127.0.0.1:0', option, value],
          { cwd: root, env: { ...process.env, OFFLOAD_TOKEN: randomBytes(16).toString('hex') }, timeout: 60_000 },
          (error, _stdout, stderr) => resolve({ code: typeof error?.code === 'number' ? error.code : 0, stderr }),
        ),
      );
      assert.equal(result.code, 2);
      assert.ok(result.stderr.includes(`${option} must be one of ${choices}, got '${value}'`), result.stderr);
    }
  });
});
