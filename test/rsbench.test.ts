/**
 * RSBench (small, Doppler on) against its published short-run checksums: a plain TypeScript
 * reference of the lookup checks the initialisation on its own, then the kernel runs on the host
 * device. The bundle is built once per content into test/fixtures/build/.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Offload, type Runtime } from '../src/index.js';
import { generateRsbench, RSBENCH, runRsbench, type RsbenchData } from '../src/apps/rsbench.js';
import { fixtureBundle } from './helpers/fixtures.js';

const A = 2806196910506780709n;
const MASK63 = (1n << 63n) - 1n;

function fastForward(seed: bigint, n: bigint): bigint {
  let a = A,
    c = 1n,
    aNew = 1n,
    cNew = 0n;
  for (; n > 0n; n >>= 1n) {
    if (n & 1n) {
      aNew = (aNew * a) & MASK63;
      cNew = (cNew * a + c) & MASK63;
    }
    c = (c * (a + 1n)) & MASK63;
    a = (a * a) & MASK63;
  }
  return (aNew * seed + cNew) & MASK63;
}

const DIST = [0.14, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013];
const AN = [
  0.2758402, 0.224574, 0.1594149, 0.09866577, 0.05324414, 0.02505215, 0.01027747, 0.003676164, 0.001146494, 0.000311757,
];
const DENOMINATOR_LEFT = [
  9.869604, 39.47842, 88.82644, 157.9137, 246.7401, 355.3058, 483.6106, 631.6547, 799.438, 986.9604,
];

type C = [number, number];
const mul = ([a, b]: C, [c, d]: C): C => [a * c - b * d, a * d + b * c];
const sub = ([a, b]: C, [c, d]: C): C => [a - c, b - d];
const add = ([a, b]: C, [c, d]: C): C => [a + c, b + d];
const div = ([a, b]: C, [c, d]: C): C => {
  const denom = c * c + d * d;
  return [(a * c + b * d) / denom, (b * c - a * d) / denom];
};
function fastExp(x: number): number {
  x = 1 + x / 4096;
  for (let i = 0; i < 12; i++) x *= x;
  return x;
}
const cexp = ([x, y]: C): C => mul([fastExp(x), 0], [Math.cos(y), Math.sin(y)]);

function faddeeva(z: C): C {
  if (Math.sqrt(z[0] * z[0] + z[1] * z[1]) < 6) {
    const e = cexp(mul([0, 12], z));
    const w = div(mul([0, 1], sub([1, 0], e)), mul([12, 0], z));
    let sum: C = [0, 0];
    for (let n = 0; n < 10; n++) {
      const top = sub(mul([n % 2 === 0 ? -1 : 1, 0], e), [1, 0]);
      const bot = sub([DENOMINATOR_LEFT[n]!, 0], mul([144, 0], mul(z, z)));
      sum = add(sum, mul([AN[n]!, 0], div(top, bot)));
    }
    return add(w, mul([0, 81.2433], mul(z, sum)));
  }
  const z2 = mul(z, z);
  return mul(
    mul(z, [0, 1]),
    add(
      div([0.5124242247547685, 0], sub(z2, [0.27525512860841095, 0])),
      div([0.051765358792987826, 0], sub(z2, [2.724744871391589, 0])),
    ),
  );
}

/** The verification value of lookup i (1-based argmax of the four macroscopic channels), textbook complex ops throughout. */
function referenceLookup(data: RsbenchData, i: number): number {
  let seed = fastForward(1070n, 2n * BigInt(i));
  seed = (A * seed + 1n) & MASK63;
  const e = Number(seed) / 2 ** 63;
  seed = (A * seed + 1n) & MASK63;
  const roll = Number(seed) / 2 ** 63;
  let mat = 0;
  for (let m = 0; m < 12; m++) {
    let running = 0;
    for (let j = m; j > 0; j--) running += DIST[j]!;
    if (roll < running) {
      mat = m;
      break;
    }
  }
  const macro = [0, 0, 0, 0];
  for (let j = 0; j < data.numNucs[mat]!; j++) {
    const nuc = data.mats[mat * data.maxNucs + j]!;
    const nw = data.nWindows[nuc]!;
    let window = Math.trunc(e / (1 / nw));
    if (window === nw) window--;
    const factors: C[] = [];
    for (let l = 0; l < 4; l++) {
      let phi = data.k0rs[nuc * 4 + l]! * Math.sqrt(e);
      if (l === 1) phi -= -Math.atan(phi);
      else if (l === 2) phi -= Math.atan((3 * phi) / (3 - phi * phi));
      else if (l === 3) phi -= Math.atan((phi * (15 - phi * phi)) / (15 - 6 * phi * phi));
      phi *= 2;
      factors.push([Math.cos(phi), -Math.sin(phi)]);
    }
    const w = nuc * data.maxWindows + window;
    let sigT = e * data.windows[w * 3]!,
      sigA = e * data.windows[w * 3 + 1]!,
      sigF = e * data.windows[w * 3 + 2]!;
    for (let p = data.bounds[w * 2]!; p < data.bounds[w * 2 + 1]!; p++) {
      const at = nuc * data.maxPoles + p;
      const pole = (k: number): C => [data.poles[at * 8 + 2 * k]!, data.poles[at * 8 + 2 * k + 1]!];
      const W = faddeeva(mul(sub([e, 0], pole(0)), [0.5, 0]));
      sigT += mul(pole(1), mul(W, factors[data.poleL[at]!]!))[0];
      sigA += mul(pole(2), W)[0];
      sigF += mul(pole(3), W)[0];
    }
    const micro = [sigT, sigA, sigF, sigT - sigA];
    const conc = data.concs[mat * data.maxNucs + j]!;
    for (let k = 0; k < 4; k++) macro[k]! += micro[k]! * conc;
  }
  let best = -Number.MAX_VALUE;
  let index = 0;
  for (let k = 0; k < 4; k++) {
    if (macro[k]! > best) {
      best = macro[k]!;
      index = k + 1;
    }
  }
  return index;
}

let runtime: Runtime;
let bundle: string;
let data: RsbenchData;

before(async () => {
  bundle = await fixtureBundle('examples/rsbench/kernels.ts');
  data = generateRsbench('small');
  runtime = await Offload.init({ host: { threads: 2, memoryBytes: 256 * 1024 * 1024 } });
});

after(async () => {
  await runtime?.shutdown();
});

test('the TypeScript reference reproduces the 1,000-lookup checksum', { timeout: 300_000 }, () => {
  let sum = 0;
  for (let i = 0; i < 1000; i++) sum += referenceLookup(data, i);
  assert.equal(sum % RSBENCH.checksumMod, RSBENCH.smoke[1000]);
});

for (const lookups of [1000, 20_000]) {
  test(`the kernel reproduces the ${lookups}-lookup checksum on the host device`, { timeout: 300_000 }, async () => {
    const result = await runRsbench(runtime, [runtime.devices[0]!], {
      size: 'small',
      lookups,
      kernelsBundle: bundle,
      data,
    });
    assert.equal(result.checksum, RSBENCH.smoke[lookups]);
    assert.equal(result.valid, true);
  });
}
