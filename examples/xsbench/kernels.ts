// XSBench's event-based macroscopic cross-section lookup (ANL-CESAR), as offload-ts kernels
// (AssemblyScript; compiled by buildBundle; not type-checked by tsc). The algorithm and every
// constant follow ../shared/bench/PROXY-APPS.md; the host side is src/apps/xsbench.ts.
//
// Layouts (all in device memory, pointers are byte offsets):
//   nuclideGrid  f64[nIsotopes * nGridpoints * 6]: energy, total, elastic, absorption, fission, nu-fission
//   unionGrid    f64[nIsotopes * nGridpoints]      (unionized variant)
//   indexGrid    i32[nUnion * nIsotopes]           (unionized) or i32[hashBins * nIsotopes] (hash)
//   numNucs      i32[12], mats i32[12 * maxNumNucs], concs f64[12 * maxNumNucs]
//   partials     i64[numTeams]: each team's sum of verification values
//   team memory  (hash grid) f64[2 * maxNumNucs]: the energies at each nuclide's search bounds
import { numTeams, teamId, teamMemory } from "offload-ts/device";

const LCG_A: u64 = 2806196910506780709;
const MASK63: u64 = 0x7fffffffffffffff;
const TWO63: f64 = 9223372036854775808.0;
const POINT: usize = 48; // 6 doubles

/** seed = (a * seed + 1) mod 2^63, then seed / 2^63. The 64-bit product wraps; its low 63 bits are the residue. */
@inline
function nextDouble(seed: u64): u64 {
  return (LCG_A * seed + 1) & MASK63;
}

@inline
function asDouble(seed: u64): f64 {
  return <f64>seed / TWO63;
}

/** Jumps n steps of the LCG in O(log n). */
function fastForward(seed: u64, n: u64): u64 {
  let a: u64 = LCG_A;
  let c: u64 = 1;
  let aNew: u64 = 1;
  let cNew: u64 = 0;
  while (n > 0) {
    if (n & 1) {
      aNew *= a;
      cNew = cNew * a + c;
    }
    c *= a + 1;
    a *= a;
    n >>= 1;
  }
  return (aNew * seed + cNew) & MASK63;
}

/** Probability of each material being picked (XSBench's pick_mat). */
const DIST: StaticArray<f64> = [0.14, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013];

/**
 * The material roll, with XSBench's quirk: dist[0] never enters the running sum. The sum is
 * recomputed from dist[i] down to dist[1] for each i, as the original does, so that rounding
 * (and thus the checksum) matches it exactly.
 */
function pickMaterial(roll: f64): i32 {
  for (let i = 0; i < 12; i++) {
    let running = 0.0;
    for (let j = i; j > 0; j--) running += unchecked(DIST[j]);
    if (roll < running) return i;
  }
  return 0;
}

/** Largest lo with a[lo] <= e (XSBench's grid_search), over `stride`-spaced doubles. */
@inline
function searchGrid(base: usize, stride: usize, lo: i32, hi: i32, e: f64): i32 {
  let length = hi - lo;
  while (length > 1) {
    const mid = lo + length / 2;
    if (load<f64>(base + <usize>mid * stride) > e) hi = mid;
    else lo = mid;
    length = hi - lo;
  }
  return lo;
}

/**
 * Index of the largest of the five channels, 1-based (strict >, from -1.0): channels 0 and 1 in
 * m01's lanes, 2 and 3 in m23's, 4 in m4 (as the kernels sum them).
 */
@inline
function verification(m01: v128, m23: v128, m4: f64): i64 {
  const m0 = f64x2.extract_lane(m01, 0), m1 = f64x2.extract_lane(m01, 1);
  const m2 = f64x2.extract_lane(m23, 0), m3 = f64x2.extract_lane(m23, 1);
  let best = -1.0;
  let index: i64 = 0;
  if (m0 > best) { best = m0; index = 1; }
  if (m1 > best) { best = m1; index = 2; }
  if (m2 > best) { best = m2; index = 3; }
  if (m3 > best) { best = m3; index = 4; }
  if (m4 > best) { best = m4; index = 5; }
  return index;
}

/**
 * Two neighbouring channels of a nuclide's contribution, (high - f * (high - low)) * conc, as
 * XSBench computes each: the grid point at `low` and the next one (POINT bytes on), the channels
 * at byte `offset` and offset + 8 of each. f64x2's sub and mul round each lane as the scalar
 * operations do, in the same order, so the sums and the checksums are the scalar kernel's.
 */
@inline
function interpolate2(low: usize, offset: usize, f: f64, conc: f64): v128 {
  const lo = v128.load(low + offset);
  const hi = v128.load(low + POINT + offset);
  return f64x2.mul(f64x2.sub(hi, f64x2.mul(f64x2.splat(f), f64x2.sub(hi, lo))), f64x2.splat(conc));
}

/** The nuclide's grid point below e by the unionized grid: one load from the union point's row. */
@inline
function unionizedPoint(indexRow: usize, nuc: i32): i32 {
  return load<i32>(indexRow + (<usize>nuc << 2));
}

/**
 * Lookups first .. first+count-1 by the unionized grid, in contiguous blocks per team; each team
 * stores the sum of its verification values at partials + 8 * teamId. Two passes over a lookup's
 * nuclides, as the hash grid's kernel below (which says why): the first reads each nuclide's grid
 * point from the index row and the energies there and next to it, and keeps the point and the
 * interpolation factor in team memory; the second interpolates the five cross sections.
 */
@inline
function lookups(
  first: i64, count: i32, nIsotopes: i32, nGridpoints: i32,
  unionGrid: usize, indexGrid: usize, nuclideGrid: usize,
  numNucs: usize, mats: usize, concs: usize, maxNumNucs: i32, partials: usize,
): void {
  const teams = numTeams();
  const team = teamId();
  const points = teamMemory();
  const block = (count + teams - 1) / teams;
  const start = team * block;
  const end = min(count, start + block);
  const gridBytes = <usize>nGridpoints * POINT;
  let sum: i64 = 0;
  for (let i = start; i < end; i++) {
    let seed = fastForward(1070, <u64>(first + <i64>i) * 2);
    seed = nextDouble(seed);
    const e = asDouble(seed);
    seed = nextDouble(seed);
    const mat = pickMaterial(asDouble(seed));
    const indexRow = indexGrid + ((<usize>searchGrid(unionGrid, 8, 0, nIsotopes * nGridpoints - 1, e) * <usize>nIsotopes) << 2);
    const nucs = load<i32>(numNucs + (<usize>mat << 2));
    const matRow = <usize>(mat * maxNumNucs);
    for (let j = 0; j < nucs; j++) {
      const nuc = load<i32>(mats + ((matRow + <usize>j) << 2));
      let k = unionizedPoint(indexRow, nuc);
      if (k == nGridpoints - 1) k--;
      const low = nuclideGrid + <usize>nuc * gridBytes + <usize>k * POINT;
      const high = low + POINT;
      const at = points + (<usize>j << 4);
      store<f64>(at, (load<f64>(high) - e) / (load<f64>(high) - load<f64>(low)));
      store<i32>(at, k, 8);
    }
    // The five macroscopic cross sections: total and elastic, absorption and fission as f64x2 pairs, nu-fission alone.
    let m01 = f64x2.splat(0.0), m23 = f64x2.splat(0.0), m4 = 0.0;
    for (let j = 0; j < nucs; j++) {
      const at = matRow + <usize>j;
      const nuc = load<i32>(mats + (at << 2));
      const conc = load<f64>(concs + (at << 3));
      const point = points + (<usize>j << 4);
      const f = load<f64>(point);
      const low = nuclideGrid + <usize>nuc * gridBytes + <usize>load<i32>(point, 8) * POINT;
      const high = low + POINT;
      m01 = f64x2.add(m01, interpolate2(low, 8, f, conc));
      m23 = f64x2.add(m23, interpolate2(low, 24, f, conc));
      m4 += (load<f64>(high, 40) - f * (load<f64>(high, 40) - load<f64>(low, 40))) * conc;
    }
    sum += verification(m01, m23, m4);
  }
  store<i64>(partials + (<usize>team << 3), sum);
}

/** The lookups with the unionized grid. */
export function xs_lookups_unionized(
  first: i64, count: i32, nIsotopes: i32, nGridpoints: i32,
  unionGrid: usize, indexGrid: usize, nuclideGrid: usize,
  numNucs: usize, mats: usize, concs: usize, maxNumNucs: i32, partials: usize,
): void {
  lookups(first, count, nIsotopes, nGridpoints, unionGrid, indexGrid, nuclideGrid, numNucs, mats, concs, maxNumNucs, partials);
}

/**
 * The lookups with the hash grid: hashBins bins over [0, 1), each holding per-isotope search
 * bounds. Each lookup runs in two passes over its nuclides, with the same loads and arithmetic as
 * XSBench's one loop: the first reads every nuclide's bounds and the energies at them (into team
 * memory, 16 bytes a nuclide), the second searches and interpolates. The energies are the loads
 * that miss the cache (each nuclide's grid is a random place in 37 MB); in the first pass nothing
 * waits on them, so the CPU has a lookup's misses in flight together, where XSBench's loop as V8
 * compiles it waits on about one at a time (clang's code for it overlaps them better): on one
 * thread, 0.57 of the C loop's rate in one loop, about 0.8 in two (bench/README.md).
 */
export function xs_lookups_hash(
  first: i64, count: i32, nIsotopes: i32, nGridpoints: i32, hashBins: i32,
  indexGrid: usize, nuclideGrid: usize,
  numNucs: usize, mats: usize, concs: usize, maxNumNucs: i32, partials: usize,
): void {
  const teams = numTeams();
  const team = teamId();
  const bounds = teamMemory();
  const block = (count + teams - 1) / teams;
  const start = team * block;
  const end = min(count, start + block);
  const bins = max(hashBins, 1);
  const du = 1.0 / <f64>bins;
  const rowBytes = <usize>nIsotopes << 2;
  const gridBytes = <usize>nGridpoints * POINT;
  const lastPoint = nGridpoints - 1;
  let sum: i64 = 0;
  for (let i = start; i < end; i++) {
    let seed = fastForward(1070, <u64>(first + <i64>i) * 2);
    seed = nextDouble(seed);
    const e = asDouble(seed);
    seed = nextDouble(seed);
    const mat = pickMaterial(asDouble(seed));
    const bin = <i32>(e / du);
    const lowRow = indexGrid + <usize>bin * rowBytes;
    const highRow = lowRow + rowBytes;
    const lastBin = bin == bins - 1;
    const nucs = load<i32>(numNucs + (<usize>mat << 2));
    const matRow = <usize>(mat * maxNumNucs);
    // Pass 1: each nuclide's bounds in the bin (uLow, uHigh: XSBench's lower and upper index) and the energies there.
    for (let j = 0; j < nucs; j++) {
      const nuc = load<i32>(mats + ((matRow + <usize>j) << 2));
      const grid = nuclideGrid + <usize>nuc * gridBytes;
      const uLow = load<i32>(lowRow + (<usize>nuc << 2));
      const uHigh = lastBin ? lastPoint : load<i32>(highRow + (<usize>nuc << 2)) + 1;
      const at = bounds + (<usize>j << 4);
      store<f64>(at, load<f64>(grid + <usize>uLow * POINT));
      store<f64>(at, load<f64>(grid + <usize>uHigh * POINT), 8);
    }
    // Pass 2: XSBench's tests on those energies (below the bin's first point: 0; above its last: the grid's
    // last), else the search between the bounds; then the interpolation.
    // The five macroscopic cross sections: total and elastic, absorption and fission as f64x2 pairs, nu-fission alone.
    let m01 = f64x2.splat(0.0), m23 = f64x2.splat(0.0), m4 = 0.0;
    for (let j = 0; j < nucs; j++) {
      const at = matRow + <usize>j;
      const nuc = load<i32>(mats + (at << 2));
      const conc = load<f64>(concs + (at << 3));
      const grid = nuclideGrid + <usize>nuc * gridBytes;
      const energies = bounds + (<usize>j << 4);
      let k: i32;
      if (e <= load<f64>(energies)) k = 0;
      else if (e >= load<f64>(energies, 8)) k = lastPoint;
      else {
        const uLow = load<i32>(lowRow + (<usize>nuc << 2));
        const uHigh = lastBin ? lastPoint : load<i32>(highRow + (<usize>nuc << 2)) + 1;
        k = searchGrid(grid, POINT, uLow, uHigh, e);
      }
      if (k == lastPoint) k--;
      const low = grid + <usize>k * POINT;
      const high = low + POINT;
      const f = (load<f64>(high) - e) / (load<f64>(high) - load<f64>(low));
      m01 = f64x2.add(m01, interpolate2(low, 8, f, conc));
      m23 = f64x2.add(m23, interpolate2(low, 24, f, conc));
      m4 += (load<f64>(high, 40) - f * (load<f64>(high, 40) - load<f64>(low, 40))) * conc;
    }
    sum += verification(m01, m23, m4);
  }
  store<i64>(partials + (<usize>team << 3), sum);
}
