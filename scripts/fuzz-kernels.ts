/**
 * `npm run fuzz:kernels -- [kernels] [seed] [--batch=N] [--no-shrink]`: the differential kernel fuzzer of
 * test/kernel-fuzz.test.ts at any length (default 2,000 kernels): generated AssemblyScript kernels
 * run on the host device (wasm) and the WebGPU device (their WGSL translation, Dawn), outputs
 * compared. Prints how many were generated, translated, declined (by reason) and trapped on the
 * host; each mismatch shrunk, with its source and inputs. Exits 1 on a mismatch, with the seed
 * that replays it.
 */
import { rm } from 'node:fs/promises';
import { Offload } from '../src/index.js';
import {
  KernelGenerator,
  formatMismatch,
  fuzzDirectory,
  randomInputs,
  runBatch,
  shrink,
  type FuzzKernel,
} from '../test/helpers/kernel-fuzz.js';

const args = process.argv.slice(2);
const batchArg = args.find((arg) => arg.startsWith('--batch='));
const noShrink = args.includes('--no-shrink');
// 40: the fastest batch on lavapipe (test/kernel-fuzz.test.ts says why).
const batch = Number(batchArg?.slice('--batch='.length) ?? 40);
const [countArg, seedArg] = args.filter((arg) => !arg.startsWith('--'));
const count = Number(countArg ?? 2000);
const seed = Number(seedArg ?? Date.now() % 2 ** 31);
if (!Number.isInteger(count) || count < 1 || !Number.isInteger(batch) || batch < 1 || !Number.isInteger(seed)) {
  console.error('usage: npm run fuzz:kernels -- [kernels >= 1] [seed] [--batch=N] [--no-shrink]');
  process.exit(2);
}

const runtime = await Offload.init({
  host: { threads: 2, memoryBytes: 16 * 1024 * 1024 },
  webgpu: { fallback: true },
  proxies: [],
});
if (!runtime.devices.some((device) => device.info.plugin === 'webgpu')) {
  console.error('no WebGPU adapter: the fuzzer compares the host device with a WebGPU device');
  await runtime.shutdown();
  process.exit(2);
}
const dir = await fuzzDirectory();
const generator = new KernelGenerator(seed);
const totals = { generated: 0, translated: 0, trapped: 0, mismatches: 0 };
const declined = new Map<string, number>();
const started = performance.now();
try {
  for (let first = 0; first < count; first += batch) {
    const kernels: FuzzKernel[] = [];
    for (let i = first; i < Math.min(count, first + batch); i++) kernels.push(generator.kernel(`k${i}`));
    // As test/kernel-fuzz.test.ts makes them, so that its seed here repeats the CI run exactly.
    const inputsOf = (kernel: FuzzKernel): ReturnType<typeof randomInputs> =>
      randomInputs(seed + Number(kernel.name.slice(1)));
    const report = await runBatch(runtime, dir, `batch${first}`, kernels, inputsOf);
    totals.generated += report.generated;
    totals.translated += report.translated;
    totals.trapped += report.trapped;
    for (const [reason, n] of report.declined) declined.set(reason, (declined.get(reason) ?? 0) + n);
    for (const mismatch of report.mismatches) {
      totals.mismatches++;
      console.log(`MISMATCH (seed ${seed}):\n${formatMismatch(mismatch)}`);
    }
    for (const mismatch of noShrink ? [] : report.mismatches) {
      const kernel = kernels.find((candidate) => candidate.name === mismatch.kernel)!;
      const small = await shrink(runtime, dir, kernel, mismatch.inputs);
      if (small) console.log(`SHRUNK:\n${formatMismatch(small)}`);
    }
    console.log(
      `${totals.generated} generated, ${totals.translated} translated, ${totals.trapped} trapped on the host, ${totals.mismatches} mismatches (${((performance.now() - started) / 1000).toFixed(0)} s)`,
    );
  }
  for (const [reason, n] of declined) console.log(`declined ${n}: ${reason}`);
} finally {
  await runtime.shutdown();
  await rm(dir, { recursive: true, force: true });
}
process.exit(totals.mismatches > 0 ? 1 : 0);
