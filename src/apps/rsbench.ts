/**
 * RSBench (ANL-CESAR) on offload-ts: the host-side initialisation of the multipole data (poles,
 * windows, pseudo K0RS, materials and concentrations) in TypeScript; runLookups (proxy-apps.ts)
 * spreads the event-based lookups over the devices (runtime.spread) and checks the published
 * checksum. Doppler broadening is on. Kernel: examples/rsbench/kernels.ts.
 */
import { fileURLToPath } from 'node:url';
import type { Device } from '../api/device.js';
import type { Runtime } from '../api/runtime.js';
import { errors } from '../errors.js';
import { map } from '../omp/map.js';
import { Lcg, materials, runLookups, type LookupResult, type ProblemSize } from './proxy-apps.js';

export type RsSize = ProblemSize;

export const RSBENCH = {
  nuclides: { small: 68, large: 355 },
  avgPoles: 1000,
  avgWindows: 100,
  numL: 4,
  lookups: 10_200_000,
  checksumMod: 999_983,
  expected: { small: 880_018, large: 358_389 },
  /** Checksums of shorter runs (small size), for smoke tests. */
  smoke: { 1000: 3533, 20000: 70_370 } as Record<number, number>,
} as const;

/** Pole parameters scale by this factor (RSBench's generate_poles). */
const POLE_F = 152.5;

export interface RsbenchData {
  size: RsSize;
  nNuclides: number;
  /** Stride of the pole arrays per nuclide (the largest pole count). */
  maxPoles: number;
  /** Stride of the window arrays per nuclide (the largest window count). */
  maxWindows: number;
  /** Stride of mats and concs per material. */
  maxNucs: number;
  nPoles: Int32Array;
  nWindows: Int32Array;
  /** f64[nNuclides * maxPoles * 8]: EA, RT, RA, RF as (re, im). */
  poles: Float64Array;
  /** i32[nNuclides * maxPoles]: the pole's angular momentum channel. */
  poleL: Int32Array;
  /** f64[nNuclides * maxWindows * 3]: T, A, F. */
  windows: Float64Array;
  /** i32[nNuclides * maxWindows * 2]: first pole and end pole (excluded by the lookup). */
  bounds: Int32Array;
  /** f64[nNuclides * 4]. */
  k0rs: Float64Array;
  numNucs: Int32Array;
  mats: Int32Array;
  concs: Float64Array;
}

/** `avg * n` items over n nuclides: each has one, and each further draw adds one to nuclide randInt % n. */
function counts(random: Lcg, n: number, avg: number): Int32Array {
  const result = new Int32Array(n).fill(1);
  for (let i = 0; i < avg * n - n; i++) result[random.intMod(n)]!++;
  return result;
}

/** RSBench's initialisation: one stream from seed 42, drawn in the original's order. */
export function generateRsbench(size: RsSize): RsbenchData {
  const nNuclides = RSBENCH.nuclides[size];
  const random = new Lcg(42);

  const lists = materials(size);
  const maxNucs = Math.max(...lists.map((list) => list.length));
  const numNucs = Int32Array.from(lists.map((list) => list.length));
  const mats = new Int32Array(12 * maxNucs);
  const concs = new Float64Array(12 * maxNucs);
  lists.forEach((list, m) => {
    mats.set(list, m * maxNucs);
    for (let j = 0; j < list.length; j++) concs[m * maxNucs + j] = random.double();
  });

  const nPoles = counts(random, nNuclides, RSBENCH.avgPoles);
  const nWindows = counts(random, nNuclides, RSBENCH.avgWindows);
  const maxPoles = Math.max(...nPoles);
  const maxWindows = Math.max(...nWindows);

  const poles = new Float64Array(nNuclides * maxPoles * 8);
  const poleL = new Int32Array(nNuclides * maxPoles);
  for (let nuc = 0; nuc < nNuclides; nuc++) {
    for (let p = 0; p < nPoles[nuc]!; p++) {
      const at = nuc * maxPoles + p;
      const o = at * 8;
      // EA = (f, 0) * (r, im); RT, RA, RF = (f * r, im), each from two fresh draws.
      poles[o] = POLE_F * random.double();
      poles[o + 1] = POLE_F * random.double();
      for (let k = 2; k < 8; k += 2) {
        poles[o + k] = random.double() * POLE_F;
        poles[o + k + 1] = random.double();
      }
      poleL[at] = random.intMod(RSBENCH.numL);
    }
  }

  const windows = new Float64Array(nNuclides * maxWindows * 3);
  const bounds = new Int32Array(nNuclides * maxWindows * 2);
  for (let nuc = 0; nuc < nNuclides; nuc++) {
    const space = Math.floor(nPoles[nuc]! / nWindows[nuc]!);
    const remainder = nPoles[nuc]! - space * nWindows[nuc]!;
    let ctr = 0;
    for (let w = 0; w < nWindows[nuc]!; w++) {
      const at = nuc * maxWindows + w;
      windows[at * 3] = random.double();
      windows[at * 3 + 1] = random.double();
      windows[at * 3 + 2] = random.double();
      bounds[at * 2] = ctr;
      bounds[at * 2 + 1] = ctr + space - 1;
      ctr += space;
      if (w < remainder) {
        ctr++;
        bounds[at * 2 + 1]!++;
      }
    }
  }

  const k0rs = new Float64Array(nNuclides * RSBENCH.numL);
  for (let i = 0; i < k0rs.length; i++) k0rs[i] = random.double();

  return {
    size,
    nNuclides,
    maxPoles,
    maxWindows,
    maxNucs,
    nPoles,
    nWindows,
    poles,
    poleL,
    windows,
    bounds,
    k0rs,
    numNucs,
    mats,
    concs,
  };
}

/** The AssemblyScript source of the lookup kernel, shipped with the package. */
export function rsbenchKernelsSource(): string {
  // src/apps and dist/apps sit at the same depth below the package root.
  return fileURLToPath(new URL('../../examples/rsbench/kernels.ts', import.meta.url));
}

export interface RsRunOptions {
  size: RsSize;
  lookups: number;
  /** Path of the bundle built from rsbenchKernelsSource(). */
  kernelsBundle: string;
  /** Data from generateRsbench(size), to reuse it across runs; generated when absent. */
  data?: RsbenchData;
}

export type RsResult = LookupResult;

function expectedChecksum(size: RsSize, lookups: number): number | undefined {
  if (lookups === RSBENCH.lookups) return RSBENCH.expected[size];
  return size === 'small' ? RSBENCH.smoke[lookups] : undefined;
}

export async function runRsbench(
  runtime: Runtime,
  devices: readonly Device[],
  options: RsRunOptions,
): Promise<RsResult> {
  const data = options.data ?? generateRsbench(options.size);
  if (data.size !== options.size)
    throw errors.invalidArgument(`rsbench: data is for size '${data.size}', options say '${options.size}'`);
  const arrays = [
    data.poles,
    data.poleL,
    data.windows,
    data.bounds,
    data.k0rs,
    data.nWindows,
    data.numNucs,
    data.mats,
    data.concs,
  ].map((array) => map.to(array));
  return runLookups(runtime, devices, {
    app: 'rsbench',
    bundle: options.kernelsBundle,
    kernel: 'rsbench_lookups',
    lookups: options.lookups,
    args: (first, count, partials) => [first, count, data.maxPoles, data.maxWindows, data.maxNucs, ...arrays, partials],
    checksumMod: RSBENCH.checksumMod,
    expected: expectedChecksum(options.size, options.lookups),
  });
}
