/**
 * `npm run fuzz -- [frames] [seed] [--in-process | --ws]`: the proxy frame fuzzer of
 * test/proxy-fuzz.test.ts at any length (default 1,000,000 frames), against a real
 * `offload proxy` process over TCP (8 connections at once), over WebSocket (`--ws`: the proxy
 * listens on ws://), or an in-process proxy over in-memory transports. Prints the report and the proxy's memory before and after; exits 1 on
 * any violation, with the seed to replay it (over TCP, the interleaving of the connections
 * differs from run to run; each connection's frames do not).
 */
import { fileURLToPath } from 'node:url';
import { ProxyServer } from '../src/proxy/server.js';
import { spawnProxy } from '../src/proxy/spawn.js';
import { fuzzProxy, loopbackTarget, tcpTarget, type FuzzReport } from '../test/helpers/proxy-fuzz.js';
import { proxyStats } from '../test/helpers/proxy.js';

const args = process.argv.slice(2);
const inProcess = args.includes('--in-process');
const overWebSocket = args.includes('--ws');
const [framesArg, seedArg] = args.filter((arg) => !arg.startsWith('--'));
const frames = Number(framesArg ?? 1_000_000);
const seed = Number(seedArg ?? Date.now() % 2 ** 31);
const token = 'fuzz-token-0123456789';
const MiB = 1024 * 1024;

const started = performance.now();
let report: FuzzReport;
let memory: Record<string, number> = {};
if (inProcess) {
  const server = await ProxyServer.start({
    listen: '127.0.0.1:0',
    token,
    runtime: { host: { threads: 1, memoryBytes: 64 * MiB }, webgpu: false },
  });
  try {
    report = await fuzzProxy(loopbackTarget(server), { token, frames, seed });
  } finally {
    await server.shutdown();
  }
} else {
  const proxy = await spawnProxy({
    cli: ['--import', 'tsx', fileURLToPath(new URL('../src/cli/main.ts', import.meta.url))],
    token,
    ...(overWebSocket ? { listen: 'ws://127.0.0.1:0' } : {}),
    env: {
      ...process.env,
      OFFLOAD_HOST_THREADS: '1',
      OFFLOAD_HOST_MEMORY: '64M',
      OFFLOAD_WEBGPU: 'off',
      OFFLOAD_PROXIES: '',
    },
  });
  try {
    const before = await proxyStats({ ...proxy, token });
    report = await fuzzProxy(tcpTarget(proxy.address, 8), { token, frames, seed });
    if (proxy.child.exitCode !== null || proxy.child.signalCode !== null)
      report.violations.push(`the proxy exited:\n${proxy.output().slice(-4000)}`);
    else {
      const after = await proxyStats({ ...proxy, token });
      const mib = (bytes: number) => Number((bytes / MiB).toFixed(1));
      memory = {
        rssBeforeMiB: mib(before.rssBytes),
        rssAfterMiB: mib(after.rssBytes),
        heapBeforeMiB: mib(before.heapUsedBytes),
        heapAfterMiB: mib(after.heapUsedBytes),
        externalBeforeMiB: mib(before.externalBytes),
        externalAfterMiB: mib(after.externalBytes),
      };
    }
  } finally {
    await proxy.stop();
  }
}
const seconds = (performance.now() - started) / 1000;
console.log(
  JSON.stringify(
    {
      target: inProcess ? 'in-process' : overWebSocket ? 'websocket' : 'tcp',
      seed,
      seconds: Number(seconds.toFixed(1)),
      ...memory,
      ...report,
    },
    null,
    2,
  ),
);
if (report.violations.length > 0) {
  console.error(
    `violations found; replay with: npm run fuzz -- ${frames} ${seed}${inProcess ? ' --in-process' : overWebSocket ? ' --ws' : ''}`,
  );
  process.exitCode = 1;
}
