/** Real `offload proxy` child processes on 127.0.0.1, for remote-device tests. */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ProxyStats } from '../../src/proxy/server.js';
import assert from 'node:assert/strict';
import { Offload, type RuntimeOptions } from '../../src/index.js';
import { freeLocalPorts, spawnProxy, type SpawnedProxy } from '../../src/proxy/spawn.js';
import { fixtureBundle } from './fixtures.js';

const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

export interface ProxyProcess extends SpawnedProxy {
  token: string;
  /** The token of each tenant named in ProxyOptions.tenants. */
  tenants?: Record<string, string>;
}

export interface ProxyOptions {
  token?: string;
  threads?: number;
  memory?: string;
  /** OFFLOAD_WEBGPU for the proxy (`fallback` serves a software WebGPU device too). Default: off. */
  webgpu?: string;
  /** More `offload proxy` options. */
  args?: string[];
  /** Where to listen (default 127.0.0.1, any free port). */
  listen?: string;
  /** A command the proxy's node runs under (e.g. `['prlimit', '--nofile=200']`). */
  launcher?: string[];
  /**
   * Named tenants besides the token's (`--tenants`), each with a token of its own: a tenant's
   * quotas are its own, so a bystander that must not share an attacker's quotas is one of these.
   */
  tenants?: string[];
  /** NODE_OPTIONS for the proxy's node (default: this process's). */
  nodeOptions?: string;
}

export async function startProxy(options: ProxyOptions = {}): Promise<ProxyProcess> {
  const token = options.token ?? randomBytes(16).toString('hex');
  const tenants = Object.fromEntries((options.tenants ?? []).map((name) => [name, randomBytes(16).toString('hex')]));
  const dir = options.tenants ? await mkdtemp(path.join(tmpdir(), 'offload-tenants-')) : undefined;
  const tenantsFile = dir && path.join(dir, 'tenants');
  if (tenantsFile) {
    const lines = Object.entries(tenants).map(([name, secret]) => `${name}:${secret}\n`);
    await writeFile(tenantsFile, lines.join(''), { mode: 0o600 });
  }
  const proxy = await spawnProxy({
    cli: ['--import', 'tsx', main],
    token,
    args: [...(tenantsFile ? ['--tenants', tenantsFile] : []), ...(options.args ?? [])],
    listen: options.listen,
    launcher: options.launcher,
    env: {
      ...process.env,
      OFFLOAD_HOST_THREADS: String(options.threads ?? 2),
      OFFLOAD_HOST_MEMORY: options.memory ?? '256M',
      OFFLOAD_PROXIES: '',
      OFFLOAD_WEBGPU: options.webgpu ?? 'off',
      ...(options.nodeOptions === undefined ? {} : { NODE_OPTIONS: options.nodeOptions }),
    },
  }).finally(() => dir && rm(dir, { recursive: true, force: true }));
  return { ...proxy, token, tenants };
}

/** `count` proxies with one token, each started with the others as its --peers (so they copy proxy to proxy). */
export async function startPeeredProxies(count: number, options: ProxyOptions = {}): Promise<ProxyProcess[]> {
  const token = options.token ?? randomBytes(16).toString('hex');
  const addresses = (await freeLocalPorts(count)).map((port) => `127.0.0.1:${port}`);
  return Promise.all(
    addresses.map((listen) =>
      startProxy({
        ...options,
        token,
        listen,
        args: [...(options.args ?? []), '--peers', addresses.filter((address) => address !== listen).join(',')],
      }),
    ),
  );
}

/** What the proxy holds now: sends it SIGUSR2 and reads the `stats {json}` line it prints. */
export async function proxyStats(proxy: ProxyProcess, timeoutMs = 10_000): Promise<ProxyStats> {
  const count = (): number =>
    proxy
      .output()
      .split('\n')
      .filter((line) => line.startsWith('stats ')).length;
  const before = count();
  proxy.child.kill('SIGUSR2');
  const deadline = Date.now() + timeoutMs;
  while (count() === before) {
    if (Date.now() > deadline) throw new Error(`the proxy printed no stats within ${timeoutMs} ms:\n${proxy.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const lines = proxy
    .output()
    .split('\n')
    .filter((line) => line.startsWith('stats '));
  return JSON.parse(lines[lines.length - 1]!.slice('stats '.length)) as ProxyStats;
}

/** Polls the proxy's stats until `done` holds for them (or the time runs out); returns the last. */
export async function proxyStatsUntil(
  proxy: ProxyProcess,
  done: (stats: ProxyStats) => boolean,
  timeoutMs = 15_000,
): Promise<ProxyStats> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const stats = await proxyStats(proxy);
    if (done(stats) || Date.now() > deadline) return stats;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * A client's whole round on the first device of a runtime made with `options` (a remote one):
 * register the fixture bundle, launch iota, read it back, check it.
 */
export async function checkServed(options: RuntimeOptions): Promise<void> {
  const runtime = await Offload.init({ host: false, webgpu: false, ...options });
  try {
    const device = runtime.devices[0]!;
    const iota = await device.kernel(await runtime.register(await fixtureBundle()), 'iota_i32');
    const out = await device.alloc(64);
    const result = new Int32Array(16);
    const queue = device.queue();
    queue.launch(iota, { teams: 2 }, [16, out]);
    queue.read(out, result);
    await queue.finish();
    assert.deepEqual(
      [...result],
      Array.from({ length: 16 }, (_, i) => i),
    );
  } finally {
    await runtime.shutdown();
  }
}
