// RSBench's event-based multipole cross-section lookup with Doppler broadening (ANL-CESAR), as an
// offload-ts kernel (AssemblyScript; compiled by buildBundle; not type-checked by tsc). The
// algorithm and constants follow shared/bench/PROXY-APPS.md; the host side is src/apps/rsbench.ts.
//
// Layouts (all in device memory, pointers are byte offsets; nuclide-major, fixed strides):
//   poles        f64[nNuclides * maxPoles * 8]: EA, RT, RA, RF as (re, im) pairs
//   poleL        i32[nNuclides * maxPoles]: angular momentum channel 0..3
//   windows      f64[nNuclides * maxWindows * 3]: T, A, F
//   bounds       i32[nNuclides * maxWindows * 2]: first pole, end pole (excluded in the loop)
//   k0rs         f64[nNuclides * 4], nWindows i32[nNuclides]
//   numNucs      i32[12], mats i32[12 * maxNucs], concs f64[12 * maxNucs]
//   partials     i64[numTeams]: each team's sum of verification values
//
// Complex numbers are pairs of f64 locals (classes would allocate). Each product keeps the
// textbook operand order of RSBench's c_mul/c_div; terms that multiply an exact zero are dropped,
// which changes at most the sign of a zero and never a sum or a comparison.
import { numTeams, teamId } from "offload-ts/device";

const LCG_A: u64 = 2806196910506780709;
const MASK63: u64 = 0x7fffffffffffffff;
const TWO63: f64 = 9223372036854775808.0;
const POLE: usize = 64; // 8 doubles

@inline
function step(seed: u64): u64 {
  return (LCG_A * seed + 1) & MASK63;
}

/** Jumps n steps of the LCG in O(log n); the 64-bit products wrap, their low 63 bits are the residue. */
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

const DIST: StaticArray<f64> = [0.14, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013];

/** RSBench's pick_mat: dist[0] never enters the sum, which runs from dist[i] down to dist[1] (its rounding). */
function pickMaterial(roll: f64): i32 {
  for (let i = 0; i < 12; i++) {
    let running = 0.0;
    for (let j = i; j > 0; j--) running += unchecked(DIST[j]);
    if (roll < running) return i;
  }
  return 0;
}

/** RSBench's fast_exp: (1 + x/4096)^4096, not the library exp, so that results match it. */
@inline
function fastExp(x: f64): f64 {
  x = 1.0 + x * 0.000244140625;
  x *= x; x *= x; x *= x; x *= x; x *= x; x *= x;
  x *= x; x *= x; x *= x; x *= x; x *= x; x *= x;
  return x;
}

// Abrarov series (N = 10, Tm = 12).
const AN: StaticArray<f64> = [0.2758402, 0.224574, 0.1594149, 0.09866577, 0.05324414, 0.02505215, 0.01027747, 0.003676164, 0.001146494, 0.000311757];
const NEG_1N: StaticArray<f64> = [-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0];
const DENOMINATOR_LEFT: StaticArray<f64> = [9.869604, 39.47842, 88.82644, 157.9137, 246.7401, 355.3058, 483.6106, 631.6547, 799.438, 986.9604];
const PREFACTOR: f64 = 81.2433;
// Three-term asymptotic expansion (QUICK_2).
const QA: f64 = 0.5124242247547685;
const QB: f64 = 0.27525512860841095;
const QC: f64 = 0.051765358792987826;
const QD: f64 = 2.724744871391589;

// The Faddeeva result, returned through globals: a function returns one value. Scratch of the
// running team (written before it is read), so private per team rather than in device memory.
// offload: private wRe, wIm
let wRe: f64 = 0;
let wIm: f64 = 0;

/** RSBench's fast_nuclear_W(Z), into wRe/wIm. */
@inline
function faddeeva(zr: f64, zi: f64): void {
  const z2r = zr * zr - zi * zi;
  const z2i = zr * zi + zi * zr;
  if (Math.sqrt(zr * zr + zi * zi) < 6.0) {
    // e = cexp(12i * Z): the same value each of the 11 times the original computes it.
    const t = fastExp(-12.0 * zi);
    const er = t * Math.cos(12.0 * zr);
    const ei = t * Math.sin(12.0 * zr);
    // W = (i * (1 - e)) / (12 * Z)
    const nr = ei, ni = 1.0 - er;
    const dr = 12.0 * zr, di = 12.0 * zi;
    const denom = dr * dr + di * di;
    let w_r = (nr * dr + ni * di) / denom;
    let w_i = (ni * dr - nr * di) / denom;
    let sr = 0.0, si = 0.0;
    const br0 = 144.0 * z2r, bi = -(144.0 * z2i);
    for (let n = 0; n < 10; n++) {
      const sign = unchecked(NEG_1N[n]);
      const tr = sign * er - 1.0, ti = sign * ei;
      const br = unchecked(DENOMINATOR_LEFT[n]) - br0;
      const bd = br * br + bi * bi;
      const an = unchecked(AN[n]);
      sr += an * ((tr * br + ti * bi) / bd);
      si += an * ((ti * br - tr * bi) / bd);
    }
    // W += (0, prefactor) * (Z * sum)
    const pr = zr * sr - zi * si;
    const pi = zr * si + zi * sr;
    w_r += -(PREFACTOR * pi);
    w_i += PREFACTOR * pr;
    wRe = w_r;
    wIm = w_i;
  } else {
    // W = (Z * i) * (a / (Z^2 - b) + c / (Z^2 - d))
    const xr = z2r - QB;
    const xd = xr * xr + z2i * z2i;
    const yr = z2r - QD;
    const yd = yr * yr + z2i * z2i;
    const sr = (QA * xr) / xd + (QC * yr) / yd;
    const si = -(QA * z2i) / xd + -(QC * z2i) / yd;
    wRe = -zi * sr - zr * si;
    wIm = -zi * si + zr * sr;
  }
}

// The four sigT factors of calculate_sig_T, per nuclide, as (re, im): scratch, as wRe/wIm.
// offload: private fr0, fi0, fr1, fi1, fr2, fi2, fr3, fi3
let fr0: f64 = 0, fi0: f64 = 0, fr1: f64 = 0, fi1: f64 = 0, fr2: f64 = 0, fi2: f64 = 0, fr3: f64 = 0, fi3: f64 = 0;

/** calculate_sig_T: (cos 2phi, -sin 2phi) per channel, phi from K0RS * sqrt(E) and the phase shifts. */
@inline
function sigTFactors(k0rs: usize, sqrtE: f64): void {
  let phi = load<f64>(k0rs) * sqrtE;
  phi *= 2.0;
  fr0 = Math.cos(phi); fi0 = -Math.sin(phi);
  phi = load<f64>(k0rs, 8) * sqrtE;
  phi -= -Math.atan(phi);
  phi *= 2.0;
  fr1 = Math.cos(phi); fi1 = -Math.sin(phi);
  phi = load<f64>(k0rs, 16) * sqrtE;
  phi -= Math.atan((3.0 * phi) / (3.0 - phi * phi));
  phi *= 2.0;
  fr2 = Math.cos(phi); fi2 = -Math.sin(phi);
  phi = load<f64>(k0rs, 24) * sqrtE;
  phi -= Math.atan((phi * (15.0 - phi * phi)) / (15.0 - 6.0 * phi * phi));
  phi *= 2.0;
  fr3 = Math.cos(phi); fi3 = -Math.sin(phi);
}

/**
 * Lookups first .. first+count-1 in contiguous blocks per team; each team stores the sum of its
 * verification values (1-based argmax of sigT, sigA, sigF, sigE) at partials + 8 * teamId.
 */
export function rsbench_lookups(
  first: i64, count: i32, maxPoles: i32, maxWindows: i32, maxNucs: i32,
  poles: usize, poleL: usize, windows: usize, bounds: usize, k0rs: usize, nWindows: usize,
  numNucs: usize, mats: usize, concs: usize, partials: usize,
): void {
  const teams = numTeams();
  const team = teamId();
  const block = (count + teams - 1) / teams;
  const start = team * block;
  const end = min(count, start + block);
  let sum: i64 = 0;
  for (let i = start; i < end; i++) {
    let seed = fastForward(1070, <u64>(first + <i64>i) * 2);
    seed = step(seed);
    const e = <f64>seed / TWO63;
    seed = step(seed);
    const mat = pickMaterial(<f64>seed / TWO63);
    const sqrtE = Math.sqrt(e);
    let m0 = 0.0, m1 = 0.0, m2 = 0.0, m3 = 0.0;
    const nucs = load<i32>(numNucs + (<usize>mat << 2));
    for (let j = 0; j < nucs; j++) {
      const at = <usize>(mat * maxNucs + j);
      const nuc = load<i32>(mats + (at << 2));
      const nw = load<i32>(nWindows + (<usize>nuc << 2));
      const spacing = 1.0 / <f64>nw;
      let window = <i32>(e / spacing);
      if (window == nw) window--;
      sigTFactors(k0rs + (<usize>nuc << 5), sqrtE);
      const w = <usize>nuc * <usize>maxWindows + <usize>window;
      const wp = windows + w * 24;
      let st = e * load<f64>(wp);
      let sa = e * load<f64>(wp, 8);
      let sf = e * load<f64>(wp, 16);
      const poleFirst = load<i32>(bounds + (w << 3));
      const poleEnd = load<i32>(bounds + (w << 3), 4);
      const nucPoles = <usize>nuc * <usize>maxPoles;
      for (let p = poleFirst; p < poleEnd; p++) {
        const at = nucPoles + <usize>p;
        const pp = poles + at * POLE;
        // Z = ((E, 0) - EA) * (0.5, 0)
        faddeeva((e - load<f64>(pp)) * 0.5, -load<f64>(pp, 8) * 0.5);
        const l = load<i32>(poleL + (at << 2));
        let fr: f64, fi: f64;
        if (l == 0) { fr = fr0; fi = fi0; }
        else if (l == 1) { fr = fr1; fi = fi1; }
        else if (l == 2) { fr = fr2; fi = fi2; }
        else { fr = fr3; fi = fi3; }
        const wfr = wRe * fr - wIm * fi;
        const wfi = wRe * fi + wIm * fr;
        st += load<f64>(pp, 16) * wfr - load<f64>(pp, 24) * wfi;
        sa += load<f64>(pp, 32) * wRe - load<f64>(pp, 40) * wIm;
        sf += load<f64>(pp, 48) * wRe - load<f64>(pp, 56) * wIm;
      }
      const conc = load<f64>(concs + (at << 3));
      m0 += st * conc;
      m1 += sa * conc;
      m2 += sf * conc;
      m3 += (st - sa) * conc;
    }
    // argmax from the most negative double, strict >, 1-based.
    let best = -1.7976931348623157e308;
    let index: i64 = 0;
    if (m0 > best) { best = m0; index = 1; }
    if (m1 > best) { best = m1; index = 2; }
    if (m2 > best) { best = m2; index = 3; }
    if (m3 > best) { index = 4; }
    sum += index;
  }
  store<i64>(partials + (<usize>team << 3), sum);
}
