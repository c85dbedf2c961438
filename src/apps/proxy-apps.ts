/**
 * What XSBench and RSBench share (ANL-CESAR's proxy apps, ../shared/bench/PROXY-APPS.md): the
 * materials and their nuclides, the 63-bit LCG, and how lookups are split over devices.
 */

export type ProblemSize = 'small' | 'large';

const FUEL_SMALL = [58, 59, 60, 61, 40, 42, 43, 44, 45, 46, 1, 2, 3, 7, 8, 9, 10, 29, 57, 47, 48, 0, 62, 15, 33, 34, 52, 53, 54, 55, 56, 18, 23, 41];
const WATER_ETC = [24, 41, 4, 5];
const ALLOY = [19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 27, 28, 29, 30, 31, 32, 26, 49, 50, 51, 11, 12, 13, 14, 6, 16, 17];
const STRUCT = [24, 41, 4, 5, 19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 49, 50, 51, 11, 12, 13, 14];
const BORON = [24, 41, 4, 5, 63, 64, 65, 66, 67];
const NON_FUEL = [[63, 64, 65, 66, 67], WATER_ETC, WATER_ETC, ALLOY, STRUCT, STRUCT, STRUCT, STRUCT, STRUCT, BORON, BORON];

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
    const l0 = lo & 0xffff, l1 = lo >>> 16;
    const a0 = A_LO & 0xffff, a1 = A_LO >>> 16;
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

/** Lookups [first, first + count) of `total` that device `index` of `devices` does: contiguous, near-equal. */
export function share(total: number, devices: number, index: number): [number, number] {
  const base = Math.floor(total / devices);
  const extra = total % devices;
  return [index * base + Math.min(index, extra), base + (index < extra ? 1 : 0)];
}
