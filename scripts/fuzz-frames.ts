/**
 * `node --import tsx scripts/fuzz-frames.ts [frames] [seed]`: the proxy frame fuzzer of
 * test/proxy-fuzz.test.ts at any length (default 200,000 frames), against an in-process proxy.
 * Prints the report; exits 1 on any invariant violation, with the seed to replay it.
 */
import { ProxyServer } from '../src/proxy/server.js';
import { fuzzProxy } from '../test/helpers/proxy-fuzz.js';

const frames = Number(process.argv[2] ?? 200_000);
const seed = Number(process.argv[3] ?? Date.now() % 2 ** 31);
const token = 'fuzz-token-0123456789';
const server = await ProxyServer.start({ listen: '127.0.0.1:0', token, runtime: { host: { threads: 1, memoryBytes: 64 * 1024 * 1024 } } });
const started = performance.now();
try {
  const report = await fuzzProxy(server, { token, frames, seed });
  const seconds = (performance.now() - started) / 1000;
  console.log(JSON.stringify({ seed, seconds: Number(seconds.toFixed(1)), ...report }, null, 2));
  if (report.violations.length > 0) {
    console.error(`violations found; replay with: node --import tsx scripts/fuzz-frames.ts ${frames} ${seed}`);
    process.exitCode = 1;
  }
} finally {
  await server.shutdown();
}
