/**
 * The attack table: each attack on `offload proxy` that the adversarial review measured, re-run
 * against a real proxy child process beside a legitimate client of another tenant. Per attack it
 * prints the proxy's RSS and event-loop delay before, during and after, how long the legitimate
 * client's whole round (connect, register, launch, read) took meanwhile, and the coded errors
 * the attacker got. Scaled to a small machine where noted in each attack's `scale`.
 *
 *   npm run attacks                 # every attack
 *   npm run attacks -- touch unread # some of them, by name
 *
 * The delay is the proxy's own (monitorEventLoopDelay, reset at each stats line).
 */
import net from 'node:net';
import { Offload, type Runtime } from '../src/index.js';
import { STATIC_WINDOW_END } from '../src/image/wasm-abi.js';
import type { ProxyStats } from '../src/proxy/server.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { encodeFrame, encodeHead } from '../src/transport/frame.js';
import { fixtureBundle } from '../test/helpers/fixtures.js';
import { checkServed, proxyStats, startProxy, type ProxyOptions, type ProxyProcess } from '../test/helpers/proxy.js';
import { RawClient } from '../test/helpers/raw-client.js';

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Attack {
  name: string;
  /** How it differs from the attack as measured, if it does. */
  scale: string;
  proxy: ProxyOptions;
  /** Starts the attack; resolves once it holds what it holds, with the codes it was refused with. */
  start(proxy: ProxyProcess): Promise<{ codes: string[]; stop: () => Promise<void> }>;
  /** Codes the attacker got only once it stopped (set by its `stop`). */
  refused?: string[];
}

function client(proxy: ProxyProcess, token = proxy.token): Promise<Runtime> {
  return Offload.init({ host: false, webgpu: false, proxies: [proxy.address], token });
}

const codeOf = (error: unknown): string => (error as { code?: string }).code ?? `uncoded: ${String(error)}`;

function tally(codes: string[]): string {
  const counts = new Map<string, number>();
  for (const code of codes) counts.set(code, (counts.get(code) ?? 0) + 1);
  return [...counts].map(([code, n]) => `${code} x${n}`).join(', ') || 'none';
}

const attacks: Attack[] = [
  {
    name: 'touch',
    scale: 'as measured: 6 connections, 128 MiB device, --proxy-memory 64M, --quota-memory 8M',
    proxy: { memory: '128M', args: ['--proxy-memory', '64M', '--quota-memory', '8M'] },
    async start(proxy) {
      const runtimes = await Promise.all(Array.from({ length: 6 }, () => client(proxy)));
      const codes = await Promise.all(
        runtimes.map(async (runtime) => {
          const device = runtime.devices[0]!;
          const scan = await device.kernel(await runtime.register(await fixtureBundle()), 'scan_memory');
          const out = await device.alloc(64);
          const pages = (128 * MiB) / 4096;
          return device
            .queue()
            .launch(scan, { teams: 1 }, [STATIC_WINDOW_END, 4096, pages, 1, out])
            .done.then(() => 'finished', codeOf);
        }),
      );
      return { codes, stop: async () => void (await Promise.all(runtimes.map((r) => r.shutdown()))) };
    },
  },
  {
    name: 'unread',
    scale: 'as measured: 5 s of pings after 100 reads of 256 KiB, on a socket that never reads',
    proxy: { memory: '64M', args: ['--quota-pending', '16M'] },
    async start(proxy) {
      const raw = await RawClient.open(proxy.address);
      await raw.login(proxy.token);
      raw.send({ op: 'alloc', id: 2, device: 0, buffer: 1, bytes: 256 * 1024, kind: 'device' });
      raw.send({ op: 'queue', id: 3, queue: 1, device: 0 });
      await raw.reply(3);
      const socket = raw.socket;
      socket.pause();
      const reads = Buffer.concat(
        Array.from({ length: 100 }, (_, i) =>
          encodeFrame({ op: 'read', id: 10 + i, queue: 1, buffer: 1, offset: 0, bytes: 256 * 1024 }),
        ),
      );
      const pings = Buffer.concat(Array.from({ length: 10_000 }, () => encodeFrame({ op: 'ping', id: 5 })));
      socket.write(reads);
      const until = Date.now() + 5000;
      while (Date.now() < until) {
        if (!socket.write(pings))
          await Promise.race([new Promise((resolve) => socket.once('drain', resolve)), sleep(until - Date.now())]);
        await new Promise((resolve) => setImmediate(resolve));
      }
      return {
        codes: [],
        stop: async () => {
          socket.resume();
          await sleep(500);
          const codes = raw.frames.map((frame) => (frame.meta.error as { code?: string } | undefined)?.code);
          this.refused = codes.filter((code): code is string => code !== undefined);
          raw.close();
        },
      };
    },
  },
  {
    name: 'trickle',
    scale: 'as measured: 8 connections holding 60 MiB of a 64 MiB frame, a byte every 2 s',
    proxy: { memory: '64M', args: ['--proxy-memory', '64M'] },
    async start(proxy) {
      const raws = await Promise.all(Array.from({ length: 8 }, () => RawClient.open(proxy.address)));
      for (const raw of raws) await raw.login(proxy.token);
      await Promise.all(
        raws.map(async (raw) => {
          if (await raw.write(encodeHead({ op: 'ping', id: 2 }, 64 * MiB))) await raw.write(new Uint8Array(60 * MiB));
        }),
      );
      const trickle = setInterval(() => raws.forEach((raw) => void raw.write(new Uint8Array(1))), 2000);
      await Promise.all(raws.map((raw) => raw.closedWithin(20_000).catch(() => {})));
      clearInterval(trickle);
      const codes = raws.map((raw) => {
        const error = raw.frames.find((frame) => frame.meta.id === 0)?.meta.error as { code?: string } | undefined;
        return error?.code ?? 'still open';
      });
      return { codes, stop: async () => raws.forEach((raw) => raw.close()) };
    },
  },
  {
    name: 'copyrect',
    scale: '16 copies of 2 Mi one-byte rows (measured: 16 copies, size not stated)',
    proxy: { memory: '96M' },
    async start(proxy) {
      const runtime = await client(proxy);
      const device = runtime.devices[0]!;
      const rows = 2 * MiB;
      const src = await device.alloc(rows);
      const dsts = await Promise.all(Array.from({ length: 16 }, () => device.alloc(rows)));
      const copies = dsts.map((dst) => {
        const queue = device.queue();
        queue.copyRect(dst, src, { width: 1, height: rows });
        return queue.finish().then(() => 'finished', codeOf);
      });
      await sleep(200);
      return {
        codes: [],
        stop: async () => {
          this.refused = await Promise.all(copies);
          await runtime.shutdown();
        },
      };
    },
  },
  {
    name: 'images',
    scale: '4 connections registering the fixture bundle until refused, --proxy-memory 64M',
    proxy: { memory: '64M', args: ['--proxy-memory', '64M', '--quota-images', '64'] },
    async start(proxy) {
      const runtimes = await Promise.all(Array.from({ length: 4 }, () => client(proxy)));
      const bundle = await fixtureBundle();
      const codes = await Promise.all(
        runtimes.map(async (runtime) => {
          for (let i = 0; i < 200; i++) {
            try {
              await runtime.devices[0]!.kernel(await runtime.register(bundle), 'iota_i32');
            } catch (error) {
              return codeOf(error);
            }
          }
          return 'never refused';
        }),
      );
      return { codes, stop: async () => void (await Promise.all(runtimes.map((r) => r.shutdown()))) };
    },
  },
  {
    name: 'connections',
    scale: 'as measured: 17 connections of one token, each asking 8 MiB, --quota-memory 8M, 128 MiB device',
    proxy: { memory: '128M', args: ['--quota-memory', '8M'] },
    async start(proxy) {
      const runtimes = await Promise.all(Array.from({ length: 17 }, () => client(proxy)));
      const codes = await Promise.all(
        runtimes.map((runtime) => runtime.devices[0]!.alloc(8 * MiB - 4096).then(() => 'allocated', codeOf)),
      );
      return { codes, stop: async () => void (await Promise.all(runtimes.map((r) => r.shutdown()))) };
    },
  },
  {
    name: 'logins',
    scale: '60 wrong hellos from 127.0.0.1 (measured: 10)',
    proxy: { memory: '64M' },
    async start(proxy) {
      const codes = await Promise.all(
        Array.from({ length: 60 }, async (_, i) => {
          const raw = await RawClient.open(proxy.address);
          try {
            raw.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token: `wrong-${i}-${'x'.repeat(32)}` });
            return (await raw.error(1, 20_000))?.code ?? 'accepted';
          } catch (error) {
            return codeOf(error);
          } finally {
            raw.close();
          }
        }),
      );
      return { codes, stop: async () => {} };
    },
  },
  {
    name: 'silent',
    scale: 'a file limit of 200 (measured: 1,024), 150 silent sockets (measured: a flood)',
    proxy: { memory: '64M', launcher: ['prlimit', '--nofile=200'] },
    async start(proxy) {
      const at = proxy.address.lastIndexOf(':');
      const sockets: net.Socket[] = [];
      for (let i = 0; i < 150; i++) {
        const socket = net.connect({ host: proxy.address.slice(0, at), port: Number(proxy.address.slice(at + 1)) });
        socket.on('error', () => {});
        sockets.push(socket);
        await sleep(5);
      }
      return { codes: [], stop: async () => sockets.forEach((socket) => socket.destroy()) };
    },
  },
];

const row = (stats: ProxyStats): string =>
  `RSS ${(stats.rssBytes / MiB).toFixed(0)} MiB, loop ${stats.eventLoopDelayMaxMs.toFixed(0)} ms`;

async function run(attack: Attack): Promise<string> {
  const proxy = await startProxy({ threads: 1, ...attack.proxy, tenants: ['bystander'] });
  try {
    await checkServed({ proxies: [proxy.address], token: proxy.tenants!.bystander }); // warm: the bundle is built
    // The same round with no attack: what "served within a second" compares with on this machine.
    const quiet0 = Date.now();
    await checkServed({ proxies: [proxy.address], token: proxy.tenants!.bystander });
    const quietMs = Date.now() - quiet0;
    await sleep(500);
    const before = await proxyStats(proxy);
    const started = attack.start(proxy);
    // The legitimate client, a tenant of its own, comes while the attack runs.
    await sleep(300);
    const t0 = Date.now();
    const servedMs = await checkServed({ proxies: [proxy.address], token: proxy.tenants!.bystander }).then(
      () => `${Date.now() - t0} ms`,
      (error) => `failed: ${codeOf(error)} (${String((error as Error).message).slice(0, 300)})`,
    );
    const { codes, stop } = await started;
    const during = await proxyStats(proxy);
    await stop();
    await sleep(2000);
    const after = await proxyStats(proxy);
    const refused = tally([...codes, ...(attack.refused ?? [])]);
    return `| ${attack.name} | ${row(before)} | ${row(during)} | ${row(after)} | ${servedMs} (${quietMs} ms with no attack) | ${refused} |`;
  } finally {
    await proxy.stop();
  }
}

const wanted = process.argv.slice(2);
const chosen = wanted.length === 0 ? attacks : attacks.filter((attack) => wanted.includes(attack.name));
if (chosen.length === 0) {
  console.error(`no attack named ${wanted.join(', ')}; the attacks are ${attacks.map((a) => a.name).join(', ')}`);
  process.exit(2);
}
console.log('| attack | before | during | after | legitimate round | attacker got |');
console.log('| --- | --- | --- | --- | --- | --- |');
for (const attack of chosen) {
  try {
    console.log(await run(attack));
  } catch (error) {
    console.log(`| ${attack.name} | the run failed: ${String(error).split('\n')[0]} | | | | |`);
  }
}
console.log('\nscales:');
for (const attack of chosen) console.log(`- ${attack.name}: ${attack.scale}`);
