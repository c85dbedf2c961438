/**
 * The differential kernel fuzzer's CI suite (test/helpers/kernel-fuzz.ts), shared by the test
 * files that each run a part of the seeded run: the kernels `from` to `to` of the seed's
 * sequence (the generator makes the ones before and drops them, so the parts together are
 * exactly one run of all the kernels), and the corpus with the first part. Kept in parts so that
 * no test file takes more than a few minutes on a busy machine.
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { Offload, type Runtime } from '../../src/index.js';
import {
  KernelGenerator,
  formatMismatch,
  fuzzDirectory,
  kernelFromText,
  randomInputs,
  runBatch,
  shrink,
  type FuzzKernel,
  type Inputs,
} from './kernel-fuzz.js';
import { webgpuSkipReason } from './webgpu.js';

export const SEED = 20261128;
/** How many kernels the seeded run generates, in all parts (OFFLOAD_FUZZ_KERNELS overrides, for a longer or shorter run). */
export const KERNELS = Number(process.env.OFFLOAD_FUZZ_KERNELS ?? 2000);
/**
 * Kernels per build. Each pipeline Dawn makes on lavapipe works through the whole WGSL module, so
 * a batch's GPU time grows with its square: 200 kernels took 122 s in batches of 200, 37 s in
 * batches of 50, 35 s of 25 and 46 s of 12 (where the AssemblyScript compiles take over).
 */
const BATCH = 40;

/** A kernel kept as a regression case: its statements, grid and inputs. */
export interface CorpusEntry {
  name: string;
  body: string;
  grid: FuzzKernel['grid'];
  inputs: Inputs;
}

/** The fuzzer's suite over kernels [from, to) of the seeded run, and `corpus` (if any) first. */
export async function kernelFuzzSuite(from: number, to: number, corpus: readonly CorpusEntry[] = []): Promise<void> {
  const skip = await webgpuSkipReason();
  describe(
    'the differential kernel fuzzer: generated kernels agree on the host and the WebGPU device',
    { skip, timeout: 1_500_000 },
    () => {
      let runtime: Runtime;
      let dir: string;

      before(async () => {
        runtime = await Offload.init({
          host: { threads: 2, memoryBytes: 16 * 1024 * 1024 },
          webgpu: { fallback: true },
          proxies: [],
        });
        dir = await fuzzDirectory();
      });

      after(async () => {
        await runtime?.shutdown();
        if (dir) await rm(dir, { recursive: true, force: true });
      });

      if (corpus.length > 0) {
        it('keeps every mismatch found agreeing (the corpus)', async () => {
          const kernels = corpus.map((entry) => kernelFromText(entry.name, entry.body, entry.grid));
          const report = await runBatch(
            runtime,
            dir,
            'corpus',
            kernels,
            (kernel) => corpus.find((entry) => entry.name === kernel.name)!.inputs,
          );
          assert.equal(report.translated, corpus.length, `declined: ${[...report.declined.keys()].join('; ')}`);
          assert.deepEqual(report.mismatches.map(formatMismatch), []);
        });
      }

      it(`runs seeded kernels ${from}..${to - 1} with 0 mismatches, counting the declined ones`, async () => {
        const generator = new KernelGenerator(SEED);
        for (let i = 0; i < from; i++) generator.kernel(`k${i}`);
        let generated = 0;
        let translated = 0;
        let trapped = 0;
        const declined = new Map<string, number>();
        for (let first = from; first < to; first += BATCH) {
          const kernels = Array.from({ length: Math.min(BATCH, to - first) }, (_, i) =>
            generator.kernel(`k${first + i}`),
          );
          const report = await runBatch(runtime, dir, `batch${first}`, kernels, (kernel) =>
            randomInputs(SEED + Number(kernel.name.slice(1))),
          );
          generated += report.generated;
          translated += report.translated;
          trapped += report.trapped;
          for (const [reason, n] of report.declined) declined.set(reason, (declined.get(reason) ?? 0) + n);
          if (report.mismatches.length > 0) {
            const mismatch = report.mismatches[0]!;
            const kernel = kernels.find((candidate) => candidate.name === mismatch.kernel)!;
            const small = (await shrink(runtime, dir, kernel, mismatch.inputs, 6)) ?? mismatch;
            assert.fail(
              `${report.mismatches.length} mismatch(es) in kernels ${first}..; the first, shrunk:\n${formatMismatch(small)}`,
            );
          }
        }
        const summary = `${generated} generated, ${translated} translated, ${trapped} trapped on the host device; declined: ${
          [...declined].map(([reason, n]) => `${n} x ${reason}`).join('; ') || 'none'
        }`;
        console.log(summary);
        assert.equal(generated, to - from);
        // The generator keeps to the subset: most kernels translate (a note is a finding to read, not a failure).
        assert.ok(translated >= (to - from) * 0.9, summary);
      });
    },
  );
}
