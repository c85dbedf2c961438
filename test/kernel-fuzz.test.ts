/**
 * The differential kernel fuzzer (test/helpers/kernel-fuzz.ts) in CI: a seeded run of 2,000
 * generated kernels, built in batches (one AssemblyScript compile per batch), each run on the
 * host device (wasm) and the WebGPU device (its WGSL translation, Dawn on lavapipe) and compared;
 * and the corpus: every mismatch the fuzzer found, shrunk, kept as a regression case. Declined
 * kernels are counted, not failed; a mismatch fails with the kernel's source and inputs, shrunk.
 * This file runs the corpus and the first half of the seeded run, kernel-fuzz-second-half.test.ts
 * the rest. `npm run fuzz:kernels -- N [seed]` runs it at any length.
 */
import { KERNELS, kernelFuzzSuite, type CorpusEntry } from './helpers/kernel-fuzz-suite.js';
import { randomInputs, type Inputs } from './helpers/kernel-fuzz.js';

/** Inputs with the scalars given and the arrays of a seed. */
const inputsWith = (a: number, b: number, c: number): Inputs => ({ ...randomInputs(7), a, b, c });

/**
 * Every difference the fuzzer found between the devices, shrunk: the kernel's statements, its
 * grid and inputs. Each was settled in src/build/wgsl-translate.ts (docs/wgsl-abi.md, "What wasm
 * computes and what the WGSL computes") and must stay settled.
 */
const CORPUS: CorpusEntry[] = [
  {
    // A conditional whose arm is an atomic became select(), which evaluates both arms.
    name: 'lazy_atomic_arm',
    body: '  vi = (a != 0) ? atomic.add<i32>(out + ((<usize>inv * 8 + 6) << 2), 1) : vj;\n',
    grid: { teams: 3, threads: 4, teamMemoryBytes: 0 },
    inputs: inputsWith(0, 0, 0),
  },
  {
    // A constant shift count of 32 or more: WGSL refused the module.
    name: 'shift_constant_count',
    body: '  vi = vi << 33;\n  vu = vu >>> (<u32>40);\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(-12345, 77, 0),
  },
  {
    // A count computed from numThreads() (an override): refused when the pipeline was made.
    name: 'shift_override_count',
    body: '  atomic.or<i32>(acc + 8, (a >> (<i32>(<u8>((<i32>40) | numThreads(1))))));\n',
    grid: { teams: 3, threads: 4, teamMemoryBytes: 0 },
    inputs: inputsWith(-704606404, 0, 0),
  },
  {
    // Two constants: WGSL evaluated the overflow when compiling and refused it.
    name: 'constant_overflow',
    body: '  vi = (<i32>2147483647) + (<i32>1);\n  vj = -i32.MIN_VALUE;\n  vu = u32.MAX_VALUE * (<u32>3);\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(1, 2, 0),
  },
  {
    // NaN to int: the host saturates to 0, lavapipe gave i32.MIN_VALUE (and folded `x != x` away).
    name: 'nan_to_int',
    body: '  vf = c - c;\n  vi = <i32>(vf / vf);\n  vu = <u32>(vf / vf);\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(0, 0, 1.5),
  },
  {
    // min/max of a NaN: NaN in wasm, the other operand on lavapipe.
    name: 'nan_min_max',
    body: '  vf = c - c;\n  vf = vf / vf;\n  vi = <i32>Mathf.min(vf, <f32>1.0);\n  vj = <i32>max(vf, <f32>-1.0);\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(0, 0, 2),
  },
  {
    // A shift of two cast constants: WGSL evaluated it when compiling and refused the sign change.
    name: 'constant_cast_shift',
    body: '  vi = (<i32>-9) << (<i32>31);\n  vj = <i32>(<i8>(<i32>65535));\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(3, 4, 0),
  },
  {
    // A negated f32 literal retyped by its neighbour (select()'s arms) lost its sign.
    name: 'negative_float_literal',
    body: '  vf = (b < (<u32>2)) ? (<f32>-5.75) : (<f32>-1.5);\n  vi = max(load<f32>(pf + 8), (<f32>-0.75)) < (<f32>0.0) ? 1 : 2;\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(3, 4, 0),
  },
  {
    // && with an atomic on its right: runs only when the left operand holds.
    name: 'lazy_and_atomic',
    body: '  if (a != 0 && atomic.add<i32>(out + ((<usize>inv * 8 + 7) << 2), 1) == 0) vi = 5;\n  if (a == 0 || atomic.add<i32>(acc, 1) == 0) vj = 6;\n',
    grid: { teams: [2, 2], threads: [2, 2], teamMemoryBytes: 0 },
    inputs: inputsWith(0, 0, 0),
  },
  {
    // `~c` and a conversion of a constant are constants to WGSL too: a signed small cast of one
    // (a shift left that changes the sign) and a shift of one were refused when compiling.
    name: 'complemented_constant',
    body: '  vi = <i32>(<i8>(<i32>(<u8>~(<i32>33))));\n  vj = ~(<i32>-2147483647) << 1;\n  vu = <u32>~(<u32>1) << 31;\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(1, 2, 0),
  },
  {
    // The host device's inline path ran a one-thread kernel as the last thread of the launch
    // before it: threadId(2) read that thread's linear id (threadId(0) and (1) hid it).
    name: 'thread_id_z',
    body: '  atomic.sub<i32>(acc + 0, (<i32>(<u32>threadId(2))));\n',
    grid: { teams: 1, threads: 1, teamMemoryBytes: 0 },
    inputs: inputsWith(1, 2, 0),
  },
];

await kernelFuzzSuite(0, Math.ceil(KERNELS / 2), CORPUS);
