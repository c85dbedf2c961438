/**
 * The second half of the kernel fuzzer's seeded run in CI (test/kernel-fuzz.test.ts runs the
 * corpus and the first half; together they are one run of 2,000 kernels).
 */
import { KERNELS, kernelFuzzSuite } from './helpers/kernel-fuzz-suite.js';

await kernelFuzzSuite(Math.ceil(KERNELS / 2), KERNELS);
