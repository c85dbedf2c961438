// Kernels of the `webgpu` bench suite (AssemblyScript, compiled by buildBundle; not type-checked
// by tsc), one source for both devices: the host device runs their wasm image, the WebGPU device
// their WGSL translation (offload build; README "One kernel source for every device").
// Pointers are usize byte offsets into device memory.
import { numTeams, numThreads, teamId, threadId } from "offload-ts/device";

/**
 * y[i] = a * x[i] + y[i] for i < n over f32 vectors. With one thread per team (the host device)
 * each team takes one contiguous block, so no two workers write the same cache line; with
 * teams of threads (a GPU) every invocation strides over the whole grid, so that neighbouring
 * invocations touch neighbouring elements. The branch is the same for the whole launch.
 */
export function saxpy(n: i32, a: f32, x: usize, y: usize): void {
  // Read once: on the host device each device library call is a call out of wasm.
  const threads = numThreads();
  const teams = numTeams();
  let start = teamId() * threads + threadId();
  let end = n;
  let stride = teams * threads;
  if (threads == 1) {
    const block = (n + teams - 1) / teams;
    start = teamId() * block;
    end = min(n, start + block);
    stride = 1;
  }
  for (let i = start; i < end; i += stride) {
    const offset = <usize>i << 2;
    store<f32>(y + offset, a * load<f32>(x + offset) + load<f32>(y + offset));
  }
}

const LCG_A: u32 = 1664525;
const LCG_C: u32 = 1013904223;
const HASH_MUL: u32 = 2654435761;
/** 2^-24: a 24-bit integer times this is an f32 in [0, 1), exactly. */
const INV_2_24: f32 = 5.9604644775390625e-8;
const MATERIALS: u32 = 12;
/** Cross-section channels per grid point: total, elastic, absorption, fission, nu-fission. */
const CHANNELS: usize = 5;

@inline
function lcg(state: u32): u32 {
  return state * LCG_A + LCG_C;
}

/**
 * A simplified XSBench macroscopic cross-section lookup, f32 throughout (WGSL has no f64).
 * Lookup i draws its energy e in [0, 1) and its material (one of 12, uniformly) from a u32 LCG
 * seeded by i and `seed`; for each nuclide of the material it binary-searches the nuclide's
 * sorted energy grid (gridPoints f32 from 0 to 1), interpolates the 5 channels linearly between
 * the two points around e and adds them times the nuclide's concentration. out + 20 * i gets
 * the 5 sums of lookup i.
 *
 * Layouts: energy f32[nuclides * gridPoints]; xs f32[nuclides * gridPoints * 5];
 * numNucs i32[12]; mats i32[12 * maxNucs] (nuclide indices); concs f32[12 * maxNucs];
 * out f32[count * 5]. Lookups are split into contiguous blocks over all teams' threads.
 */
export function xs_lookup(
  count: i32, gridPoints: i32, maxNucs: i32, seed: i32,
  energy: usize, xs: usize, numNucs: usize, mats: usize, concs: usize, out: usize,
): void {
  const workers = numTeams() * numThreads();
  const worker = teamId() * numThreads() + threadId();
  const block = (count + workers - 1) / workers;
  const start = worker * block;
  const end = min(count, start + block);
  const points = <usize>gridPoints;
  for (let i = start; i < end; i++) {
    let state = (<u32>i * HASH_MUL) ^ <u32>seed;
    state = lcg(lcg(state));
    const e = <f32>(state >> 8) * INV_2_24;
    state = lcg(state);
    const mat = (state >> 8) % MATERIALS;
    let m0: f32 = 0, m1: f32 = 0, m2: f32 = 0, m3: f32 = 0, m4: f32 = 0;
    const nucs = load<i32>(numNucs + (<usize>mat << 2));
    for (let j = 0; j < nucs; j++) {
      const at = <usize>mat * <usize>maxNucs + <usize>j;
      const nuc = <usize>load<i32>(mats + (at << 2));
      const conc = load<f32>(concs + (at << 2));
      const grid = energy + ((nuc * points) << 2);
      // The largest lo with grid[lo] <= e; grid[0] = 0 <= e < 1 = grid[gridPoints - 1].
      let lo = 0;
      let hi = gridPoints - 1;
      while (hi - lo > 1) {
        const mid = (lo + hi) >> 1;
        if (load<f32>(grid + (<usize>mid << 2)) > e) hi = mid;
        else lo = mid;
      }
      const e0 = load<f32>(grid + (<usize>lo << 2));
      const e1 = load<f32>(grid + (<usize>lo << 2), 4);
      const f = (e - e0) / (e1 - e0);
      const low = xs + ((nuc * points + <usize>lo) * CHANNELS << 2);
      const high = low + (CHANNELS << 2);
      m0 += conc * (load<f32>(low) + f * (load<f32>(high) - load<f32>(low)));
      m1 += conc * (load<f32>(low, 4) + f * (load<f32>(high, 4) - load<f32>(low, 4)));
      m2 += conc * (load<f32>(low, 8) + f * (load<f32>(high, 8) - load<f32>(low, 8)));
      m3 += conc * (load<f32>(low, 12) + f * (load<f32>(high, 12) - load<f32>(low, 12)));
      m4 += conc * (load<f32>(low, 16) + f * (load<f32>(high, 16) - load<f32>(low, 16)));
    }
    const result = out + ((<usize>i * CHANNELS) << 2);
    store<f32>(result, m0);
    store<f32>(result, m1, 4);
    store<f32>(result, m2, 8);
    store<f32>(result, m3, 12);
    store<f32>(result, m4, 16);
  }
}
