/**
 * What XSBench and RSBench share (ANL-CESAR's proxy apps): the
 * materials and their nuclides, the 63-bit LCG, and the driver that runs the lookups over devices.
 */

import type { Device } from '../api/device.js';
import type { Runtime } from '../api/runtime.js';
import { errors } from '../errors.js';
import { map } from '../omp/map.js';
import { spread, type SpreadArgument, type SpreadResult } from '../omp/spread.js';

export type ProblemSize = 'small' | 'large';

const FUEL_SMALL = [
  58, 59, 60, 61, 40, 42, 43, 44, 45, 46, 1, 2, 3, 7, 8, 9, 10, 29, 57, 47, 48, 0, 62, 15, 33, 34, 52, 53, 54, 55, 56,
  18, 23, 41,
];
const WATER_ETC = [24, 41, 4, 5];
const ALLOY = [
  19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 27, 28, 29, 30, 31, 32, 26, 49, 50, 51, 11, 12, 13, 14, 6, 16, 17,
];
const STRUCT = [24, 41, 4, 5, 19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 49, 50, 51, 11, 12, 13, 14];
const BORON = [24, 41, 4, 5, 63, 64, 65, 66, 67];
const NON_FUEL = [
  [63, 64, 65, 66, 67],
  WATER_ETC,
  WATER_ETC,
  ALLOY,
  STRUCT,
  STRUCT,
  STRUCT,
  STRUCT,
  STRUCT,
  BORON,
  BORON,
];

/** Nuclide lists of material 0 (fuel) and 1..11; the large fuel adds nuclides 68..354. */
export function materials(size: ProblemSize): number[][] {
  const fuel = size === 'small' ? FUEL_SMALL : [...FUEL_SMALL, ...Array.from({ length: 355 - 68 }, (_, i) => 68 + i)];
  return [fuel, ...NON_FUEL];
}

// The multiplier a = 2806196910506780709 as 32-bit halves.
const A_HI = 0x26f19d38;
const A_LO = 0xe48e2825;
const TWO32 = 2 ** 32;
const TWO63 = 2 ** 63;

/**
 * The apps' 63-bit LCG, seed = (a * seed + 1) mod 2^63, held as two 32-bit halves: exact, and
 * several times faster than BigInt over the millions of draws of the large size.
 */
export class Lcg {
  private hi: number;
  private lo: number;

  constructor(seed: number) {
    this.hi = Math.floor(seed / TWO32);
    this.lo = seed >>> 0;
  }

  private step(): void {
    const lo = this.lo;
    // lo * A_LO exactly, from 16-bit pieces (every partial sum stays below 2^53).
    const l0 = lo & 0xffff,
      l1 = lo >>> 16;
    const a0 = A_LO & 0xffff,
      a1 = A_LO >>> 16;
    const mid = l0 * a1 + l1 * a0;
    const low = l0 * a0 + (mid % 65536) * 65536;
    const high = l1 * a1 + Math.floor(mid / 65536) + Math.floor(low / TWO32);
    let newLo = (low >>> 0) + 1;
    let carry = 0;
    if (newLo === TWO32) {
      newLo = 0;
      carry = 1;
    }
    this.hi = (high + Math.imul(this.hi, A_LO) + Math.imul(lo, A_HI) + carry) & 0x7fffffff;
    this.lo = newLo;
  }

  /** The next seed / 2^63; the 63-bit seed rounds to a double once, as C's (double) cast does. */
  double(): number {
    this.step();
    return (this.hi * TWO32 + this.lo) / TWO63;
  }

  /** The next seed itself, modulo n (n small). */
  intMod(n: number): number {
    this.step();
    return ((this.hi % n) * (TWO32 % n) + (this.lo % n)) % n;
  }
}

/**
 * Teams of a run's range: a lookup a team up to this many, more lookups a team beyond. Enough
 * teams that chunks can follow each device's throughput finely (the spread's smallest chunk is
 * 1/64 of an equal share), few enough that a team's work dwarfs its partial's 8 bytes.
 */
const RANGE_TEAMS = 8192;

/** One proxy-app run: what `runLookups` needs to know of the app. */
export interface LookupRun {
  /** The app's name, for messages. */
  app: string;
  /** Path of the app's kernel bundle, and the kernel in it. */
  bundle: string;
  kernel: string;
  lookups: number;
  /**
   * The kernel's arguments: lookups [first, first + count) of a chunk (the same for every kernel:
   * the first two), the data (read-only map.to clauses: broadcast to every device once, before
   * the lookups, timed as the transfer), and `partials`, which receives each team's sum.
   */
  args(first: SpreadArgument, count: SpreadArgument, partials: SpreadArgument): SpreadArgument[];
  /** Team memory each team of the kernel uses (teamMemory() in the kernel); default none. */
  teamMemoryBytes?: number;
  checksumMod: number;
  /** The published checksum of this run, if there is one. */
  expected: number | undefined;
  /** Called with the fraction of lookups done, after each chunk. */
  progress?: (done: number) => void;
}

export interface LookupResult {
  checksum: number;
  /** Whether the checksum is the published one; undefined for a lookup count without one. */
  valid: boolean | undefined;
  expected: number | undefined;
  /** Copying the data to every device (all devices at once). */
  transferSeconds: number;
  /** The lookups, chunk by chunk, copies of the chunks included (all devices at once): the figure of merit's time. */
  lookupSeconds: number;
  lookupsPerSecond: number;
  /** Lookups each device did. */
  perDevice: number[];
  /** The spread's own report: each device's share and time, devices lost. */
  spread: SpreadResult;
}

/**
 * Runs an app's lookups over `devices` with `runtime.spread`: the data goes to every device once,
 * the lookups go in chunks to whichever device is ready (sized by its measured throughput), the
 * teams' partial checksums come back and are summed, and the result is compared with the
 * published value. A device lost on the way has its chunk re-run on the others.
 */
export async function runLookups(runtime: Runtime, devices: readonly Device[], run: LookupRun): Promise<LookupResult> {
  if (!Number.isSafeInteger(run.lookups) || run.lookups < 1)
    throw errors.invalidArgument(`${run.app}: lookups must be a positive integer, got ${run.lookups}`);
  if (devices.length === 0) throw errors.invalidArgument(`${run.app}: no devices to run on`);
  const perTeam = Math.ceil(run.lookups / RANGE_TEAMS);
  const teams = Math.ceil(run.lookups / perTeam);
  const partials = new BigInt64Array(teams);
  const perDevice = new Map<Device, number>(devices.map((device) => [device, 0]));
  let done = 0;
  const library = await runtime.register(run.bundle);
  try {
    const result = await runtime.spread(
      devices,
      { library, name: run.kernel },
      { teams, teamMemoryBytes: run.teamMemoryBytes ?? 0 },
      run.args(
        (chunk) => BigInt(chunk.first * perTeam),
        spread.span(perTeam, run.lookups),
        spread.part(map.from(partials, 'partials'), 1),
      ),
      {
        onChunk: (chunk, device) => {
          const lookups = Math.min(run.lookups, (chunk.first + chunk.count) * perTeam) - chunk.first * perTeam;
          perDevice.set(device, perDevice.get(device)! + lookups);
          done += lookups;
          run.progress?.(done / run.lookups);
        },
      },
    );
    let sum = 0n;
    for (const partial of partials) sum += partial;
    const checksum = Number(sum % BigInt(run.checksumMod));
    const lookupSeconds = result.seconds - result.setupSeconds;
    return {
      checksum,
      valid: run.expected === undefined ? undefined : checksum === run.expected,
      expected: run.expected,
      transferSeconds: result.setupSeconds,
      lookupSeconds,
      lookupsPerSecond: run.lookups / lookupSeconds,
      perDevice: devices.map((device) => perDevice.get(device)!),
      spread: result,
    };
  } finally {
    await library.unregister();
  }
}
