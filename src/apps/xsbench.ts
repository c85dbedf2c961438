/**
 * XSBench (ANL-CESAR) on offload-ts: the host-side initialisation (nuclide grids, unionized or
 * hash acceleration grid, materials and concentrations) in TypeScript; runLookups (proxy-apps.ts)
 * spreads the lookups over any set of devices (runtime.spread: the data broadcast to each, the
 * lookups in chunks sized by each device's throughput) and checks the published checksum. Kernels: examples/xsbench/kernels.ts.
 */
import { fileURLToPath } from 'node:url';
import type { Device } from '../api/device.js';
import type { Runtime } from '../api/runtime.js';
import { map } from '../omp/map.js';
import { Lcg, materials, runLookups, type LookupResult, type ProblemSize } from './proxy-apps.js';

export type XsSize = ProblemSize;
export type XsGrid = 'unionized' | 'hash';

export const XSBENCH = {
  isotopes: { small: 68, large: 355 },
  gridpoints: 11303,
  hashBins: 10000,
  lookups: 17_000_000,
  checksumMod: 999_983,
  expected: { small: 945_990, large: 952_131 },
  /** Checksums of shorter runs (small size), for smoke tests. */
  smoke: { 1000: 3044 } as Record<number, number>,
} as const;

export interface XsData {
  size: XsSize;
  grid: XsGrid;
  nIsotopes: number;
  nGridpoints: number;
  /** Points of 6 doubles, isotope-major, each isotope's points sorted by energy. */
  nuclideGrid: Float64Array;
  /** Unionized: all energies sorted; hash: empty. */
  unionGrid: Float64Array;
  /** Unionized: i32[nUnion * nIsotopes]; hash: i32[hashBins * nIsotopes]. */
  indexGrid: Int32Array;
  numNucs: Int32Array;
  mats: Int32Array;
  concs: Float64Array;
  maxNumNucs: number;
}

/** Largest lo in [lo, hi) with energy(lo) <= e, XSBench's grid_search. */
function search(energy: (i: number) => number, lo: number, hi: number, e: number): number {
  let length = hi - lo;
  while (length > 1) {
    const mid = lo + Math.floor(length / 2);
    if (energy(mid) > e) hi = mid;
    else lo = mid;
    length = hi - lo;
  }
  return lo;
}

/**
 * The bytes of device memory one device needs for XSBench's data (every device holds all of it):
 * what generateXsbench makes, counted before making it, so a run that cannot fit fails at once.
 */
export function xsbenchBytes(size: XsSize, grid: XsGrid): number {
  const points = XSBENCH.isotopes[size] * XSBENCH.gridpoints;
  const nuclides = points * 6 * 8;
  const index = (grid === 'unionized' ? points : XSBENCH.hashBins) * XSBENCH.isotopes[size] * 4;
  return nuclides + index + (grid === 'unionized' ? points * 8 : 0);
}

/** Makes XSBench's data; `progress` hears the fraction done now and then (a large run takes tens of seconds). */
export function generateXsbench(size: XsSize, grid: XsGrid, progress?: (fraction: number) => void): XsData {
  const nIsotopes = XSBENCH.isotopes[size];
  const nGridpoints = XSBENCH.gridpoints;
  const points = nIsotopes * nGridpoints;

  // Nuclide grids: drawn isotope by isotope, point by point, six values each, then sorted.
  const raw = new Float64Array(points * 6);
  const random = new Lcg(42);
  for (let i = 0; i < raw.length; i++) raw[i] = random.double();
  const nuclideGrid = new Float64Array(points * 6);
  const order = new Int32Array(nGridpoints);
  // The sort takes about a third of the time, the index grid the rest.
  for (let iso = 0; iso < nIsotopes; iso++) {
    progress?.(iso / nIsotopes / 3);
    const base = iso * nGridpoints;
    for (let p = 0; p < nGridpoints; p++) order[p] = p;
    order.sort((a, b) => raw[(base + a) * 6]! - raw[(base + b) * 6]!);
    for (let p = 0; p < nGridpoints; p++)
      nuclideGrid.set(raw.subarray((base + order[p]!) * 6, (base + order[p]! + 1) * 6), (base + p) * 6);
  }
  const energyOf = (iso: number) => (p: number) => nuclideGrid[(iso * nGridpoints + p) * 6]!;

  let unionGrid = new Float64Array(0);
  let indexGrid: Int32Array;
  if (grid === 'unionized') {
    unionGrid = new Float64Array(points);
    for (let p = 0; p < points; p++) unionGrid[p] = nuclideGrid[p * 6]!;
    unionGrid.sort();
    indexGrid = new Int32Array(points * nIsotopes);
    const idxLow = new Int32Array(nIsotopes);
    const energyHigh = new Float64Array(nIsotopes);
    for (let iso = 0; iso < nIsotopes; iso++) energyHigh[iso] = energyOf(iso)(1);
    for (let u = 0; u < points; u++) {
      if (u % 4096 === 0) progress?.(1 / 3 + ((2 / 3) * u) / points);
      const energy = unionGrid[u]!;
      for (let iso = 0; iso < nIsotopes; iso++) {
        if (energy >= energyHigh[iso]! && idxLow[iso] !== nGridpoints - 2) {
          idxLow[iso]!++;
          energyHigh[iso] = energyOf(iso)(idxLow[iso]! + 1);
        }
        indexGrid[u * nIsotopes + iso] = idxLow[iso]!;
      }
    }
  } else {
    const bins = XSBENCH.hashBins;
    indexGrid = new Int32Array(bins * nIsotopes);
    const du = 1 / bins;
    for (let e = 0; e < bins; e++) {
      if (e % 256 === 0) progress?.(1 / 3 + ((2 / 3) * e) / bins);
      for (let iso = 0; iso < nIsotopes; iso++)
        indexGrid[e * nIsotopes + iso] = search(energyOf(iso), 0, nGridpoints - 1, e * du);
    }
  }

  const lists = materials(size);
  const maxNumNucs = Math.max(...lists.map((list) => list.length));
  const numNucs = Int32Array.from(lists.map((list) => list.length));
  const mats = new Int32Array(12 * maxNumNucs);
  lists.forEach((list, m) => mats.set(list, m * maxNumNucs));
  const concs = new Float64Array(12 * maxNumNucs);
  const concRandom = new Lcg(1070 * 1070);
  lists.forEach((list, m) => {
    for (let j = 0; j < list.length; j++) concs[m * maxNumNucs + j] = concRandom.double();
  });
  progress?.(1);
  return { size, grid, nIsotopes, nGridpoints, nuclideGrid, unionGrid, indexGrid, numNucs, mats, concs, maxNumNucs };
}

/** The AssemblyScript source of the lookup kernels, shipped with the package. */
export function xsbenchKernelsSource(): string {
  // src/apps and dist/apps sit at the same depth below the package root.
  return fileURLToPath(new URL('../../examples/xsbench/kernels.ts', import.meta.url));
}

export interface XsRunOptions {
  /** Path of the bundle built from xsbenchKernelsSource(). */
  bundle: string;
  lookups: number;
  /** Called with the fraction of lookups done, after each batch. */
  progress?: (done: number) => void;
}

export type XsResult = LookupResult;

export async function runXsbench(
  runtime: Runtime,
  devices: readonly Device[],
  data: XsData,
  options: XsRunOptions,
): Promise<XsResult> {
  const unionized = data.grid === 'unionized';
  // The kernels' parameters after the lookup range and sizes: the grid's own, then the data.
  const gridArgs = unionized ? [map.to(data.unionGrid)] : [XSBENCH.hashBins];
  const dataArgs = [
    map.to(data.indexGrid),
    map.to(data.nuclideGrid),
    map.to(data.numNucs),
    map.to(data.mats),
    map.to(data.concs),
    data.maxNumNucs,
  ];
  return runLookups(runtime, devices, {
    app: 'xsbench',
    bundle: options.bundle,
    kernel: unionized ? 'xs_lookups_unionized' : 'xs_lookups_hash',
    lookups: options.lookups,
    args: (first, count, partials) => [
      first,
      count,
      data.nIsotopes,
      data.nGridpoints,
      ...gridArgs,
      ...dataArgs,
      partials,
    ],
    // Both kernels keep 16 bytes a nuclide of the lookup in team memory (kernels.ts).
    teamMemoryBytes: data.maxNumNucs * 16,
    checksumMod: XSBENCH.checksumMod,
    expected:
      options.lookups === XSBENCH.lookups
        ? XSBENCH.expected[data.size]
        : data.size === 'small'
          ? XSBENCH.smoke[options.lookups]
          : undefined,
    progress: options.progress,
  });
}
