/**
 * The demo's kernels (examples/kernels.ts) as `offload demo` runs them, on one device, each
 * result checked against a plain TypeScript reference: saxpy and mandelbrot (per-item kernels,
 * launched with `{ items }`), a dot product and a tiled transpose (teams of threads). Nothing
 * here needs Node: `offload demo` runs it in Node, and the page `offload serve` serves runs it
 * in a browser (apps/demo-page.ts), so both show the same table.
 */
import type { Buffer } from '../api/buffer.js';
import type { Device } from '../api/device.js';
import type { Kernel } from '../api/kernel.js';
import type { Library } from '../api/library.js';
import type { Event, Queue } from '../api/queue.js';
import { OffloadError } from '../errors.js';
import { performance } from '../platform.js';

/** Threads per team on devices that run teams of threads (GPUs); the host device runs 1. */
export const GPU_THREADS = 64;

/** f32 results may differ from the reference (f32 emulated in f64) by a few ulps (2^-23 relative each). */
const F32_TOLERANCE = 1e-6;
/** A sum of f32 products may differ more where a device fuses a multiply and an add. */
const SUM_TOLERANCE = 1e-5;
/** The share of mandelbrot pixels whose count may differ from the reference (see mandelbrot()). */
const MANDELBROT_DIFFERING = 0.01;
const MANDELBROT = { width: 256, height: 192, maxIter: 256, x0: -2.2, y0: -1.125, dx: 3 / 256 };
/** The transpose's matrix (not a multiple of its tiles, so that the edges are checked too) and tile side. */
const TRANSPOSE = { width: 250, height: 190, tile: 16 };

export interface Mismatch {
  index: number;
  got: number;
  expected: number;
}

/** One kernel's run: what is shown in its row of the table. */
export interface Outcome {
  kernel: string;
  problem: string;
  teams: number;
  threads: number;
  launchMs: number;
  roundTripMs: number;
  mismatch: Mismatch | undefined;
}

/**
 * Times one round trip on a fresh queue: the writes, then the launch alone (from enqueue to its
 * event), then the reads. The round trip spans all three.
 */
async function roundTrip(
  device: Device,
  write: (queue: Queue) => void,
  launch: (queue: Queue) => Event,
  read: (queue: Queue) => void,
): Promise<{ launchMs: number; roundTripMs: number }> {
  const queue = device.queue();
  const started = performance.now();
  write(queue);
  await queue.finish();
  const launched = performance.now();
  await launch(queue).done;
  const launchMs = performance.now() - launched;
  read(queue);
  await queue.finish();
  return { launchMs, roundTripMs: performance.now() - started };
}

/** Deterministic inputs in [-1, 1) and [0, 1), varied enough to catch misplaced elements. */
function inputs(n: number): { x: Float32Array; y: Float32Array } {
  const x = new Float32Array(n);
  const y = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    x[i] = (i % 1000) / 500 - 1;
    y[i] = ((i * 7) % 1013) / 1013;
  }
  return { x, y };
}

/** The first element where `got` and `expected` differ by more than `relative` times max(1, |expected|). */
function firstMismatch(got: ArrayLike<number>, expected: ArrayLike<number>, relative: number): Mismatch | undefined {
  for (let index = 0; index < expected.length; index++) {
    if (!(Math.abs(got[index]! - expected[index]!) <= relative * Math.max(1, Math.abs(expected[index]!)))) {
      return { index, got: got[index]!, expected: expected[index]! };
    }
  }
  return undefined;
}

async function freeAll(buffers: Buffer[]): Promise<void> {
  await Promise.all(buffers.map((buffer) => buffer.free()));
}

export type Grid = { teams: number; threads: number };

/**
 * transpose moves tile x tile blocks through team memory, its threads meeting at a barrier
 * (2-D teams and threads: the execution model). Checked exactly: it only moves values.
 */
async function transpose(device: Device, kernel: Kernel): Promise<Outcome> {
  const { width, height } = TRANSPOSE;
  const tile = Math.min(TRANSPOSE.tile, Math.floor(Math.sqrt(device.info.maxThreadsPerTeam)));
  const input = Float32Array.from({ length: width * height }, (_, i) => (i % 997) / 997);
  const result = new Float32Array(width * height);
  const inBuf = await device.alloc(input.byteLength);
  const outBuf = await device.alloc(input.byteLength);
  const teams: [number, number] = [Math.ceil(width / tile), Math.ceil(height / tile)];
  const times = await roundTrip(
    device,
    (q) => q.write(inBuf, input),
    (q) =>
      q.launch(kernel, { teams, threads: [tile, tile], teamMemoryBytes: tile * (tile + 1) * 4 }, [
        width,
        height,
        inBuf,
        outBuf,
      ]),
    (q) => q.read(outBuf, result),
  );
  await freeAll([inBuf, outBuf]);
  const expected = new Float32Array(width * height);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) expected[x * height + y] = input[y * width + x]!;
  const problem = `${width} x ${height} f32, ${teams.join(' x ')} teams of ${tile} x ${tile}`;
  return {
    kernel: 'transpose',
    problem,
    teams: teams[0] * teams[1],
    threads: tile * tile,
    ...times,
    mismatch: firstMismatch(result, expected, 0),
  };
}

/**
 * The grid a launch of `kernel` over `items` runs with: the device's choice (suggestGrid) for a
 * per-item kernel (`grid` undefined), shown as teams x threads; else `grid` as given.
 */
function shownGrid(device: Device, kernel: Kernel, items: number | [number, number], grid: Grid | undefined): Grid {
  if (grid !== undefined) return grid;
  const { teams, threads } = device.suggestGrid(kernel, { items });
  const count = (size: number | readonly number[]): number =>
    typeof size === 'number' ? size : size.reduce((product, side) => product * side, 1);
  return { teams: count(teams), threads: count(threads) };
}

/** saxpy: the per-item saxpy_items with `{ items: n }` when `grid` is undefined, else a block kernel (a native one) on `grid`. */
export async function saxpy(device: Device, kernel: Kernel, n: number, grid: Grid | undefined): Promise<Outcome> {
  const a = 2.5;
  const { x, y } = inputs(n);
  const result = new Float32Array(n);
  const xBuf = await device.alloc(n * 4);
  const yBuf = await device.alloc(n * 4);
  const times = await roundTrip(
    device,
    (q) => {
      q.write(xBuf, x);
      q.write(yBuf, y);
    },
    (q) =>
      grid === undefined ? q.launch(kernel, { items: n }, [a, xBuf, yBuf]) : q.launch(kernel, grid, [n, a, xBuf, yBuf]),
    (q) => q.read(yBuf, result),
  );
  await freeAll([xBuf, yBuf]);

  const expected = new Float32Array(n);
  for (let i = 0; i < n; i++) expected[i] = a * x[i]! + y[i]!;
  return {
    kernel: 'saxpy',
    problem: `n = ${n}, f32${grid === undefined ? ', per item' : ''}`,
    ...shownGrid(device, kernel, n, grid),
    ...times,
    mismatch: firstMismatch(result, expected, F32_TOLERANCE),
  };
}

/** dot_partial leaves one f32 partial per thread of each team; the host adds them. Checked: each partial, then the sum. */
async function dot(device: Device, kernel: Kernel, n: number, grid: Grid): Promise<Outcome> {
  const { teams, threads } = grid;
  const { x, y } = inputs(n);
  const partials = new Float32Array(teams * threads);
  const xBuf = await device.alloc(n * 4);
  const yBuf = await device.alloc(n * 4);
  const partialsBuf = await device.alloc(partials.byteLength);
  const times = await roundTrip(
    device,
    (q) => {
      q.write(xBuf, x);
      q.write(yBuf, y);
    },
    (q) => q.launch(kernel, grid, [n, xBuf, yBuf, partialsBuf]),
    (q) => q.read(partialsBuf, partials),
  );
  await freeAll([xBuf, yBuf, partialsBuf]);
  const got = [...partials, partials.reduce((sum, p) => sum + p, 0)];

  // Each team's share is one contiguous block of ceil(n / teams) elements, its thread k takes
  // elements k, k + threads, ... of it, summing in f32 in that order, as in the kernel.
  const block = Math.ceil(n / teams);
  const expected = new Array<number>(teams * threads + 1).fill(0);
  for (let i = 0; i < n; i++) {
    const team = Math.floor(i / block);
    const at = team * threads + ((i - team * block) % threads);
    expected[at] = Math.fround(expected[at]! + Math.fround(x[i]! * y[i]!));
  }
  expected[teams * threads] = expected.reduce((sum, p) => sum + p, 0);
  return {
    kernel: 'dot_partial',
    problem: `n = ${n}, f32`,
    ...grid,
    ...times,
    mismatch: firstMismatch(got, expected, SUM_TOLERANCE),
  };
}

/** mandelbrot: the per-item mandelbrot_items with `{ items: [width, height] }` when `grid` is undefined, else a kernel over rows on `grid`. */
export async function mandelbrot(device: Device, kernel: Kernel, _n: number, grid: Grid | undefined): Promise<Outcome> {
  const { width, height, maxIter, x0, y0, dx } = MANDELBROT;
  const counts = new Uint32Array(width * height);
  const out = await device.alloc(counts.byteLength);
  const times = await roundTrip(
    device,
    () => {},
    (q) =>
      grid === undefined
        ? q.launch(kernel, { items: [width, height] }, [maxIter, x0, y0, dx, out])
        : q.launch(kernel, grid, [width, height, maxIter, x0, y0, dx, out]),
    (q) => q.read(out, counts),
  );
  await freeAll([out]);

  // The kernel computes in f32: so does the reference (every operation rounded by Math.fround).
  const f = Math.fround;
  const expected = new Uint32Array(width * height);
  for (let row = 0; row < height; row++) {
    const cy = f(f(y0) + f(row * f(dx)));
    for (let col = 0; col < width; col++) {
      const cx = f(f(x0) + f(col * f(dx)));
      let zx = 0;
      let zy = 0;
      let iter = 0;
      while (iter < maxIter && f(f(zx * zx) + f(zy * zy)) <= 4) {
        const t = f(f(f(zx * zx) - f(zy * zy)) + cx);
        zy = f(f(f(2 * zx) * zy) + cy);
        zx = t;
        iter++;
      }
      expected[row * width + col] = iter;
    }
  }
  // Near the set's edge an ulp changes the count, and GPU compilers may fuse a multiply and an
  // add (WGSL allows it): up to 1% of the pixels may differ there.
  const differing = counts.filter((count, i) => count !== expected[i]).length;
  const mismatch = differing <= counts.length * MANDELBROT_DIFFERING ? undefined : firstMismatch(counts, expected, 0);
  return {
    kernel: 'mandelbrot',
    problem: `${width} x ${height}, ${maxIter} iterations, f32${grid === undefined ? ', per item' : ''}`,
    ...shownGrid(device, kernel, [width, height], grid),
    ...times,
    mismatch,
  };
}

/** The grid of the kernels that use teams of threads: 64-thread teams on a GPU, one-thread teams, four per core, elsewhere. */
export function demoGrid(device: Device, size: number): Grid {
  const gpu = device.info.kind === 'gpu';
  return {
    teams: gpu ? Math.min(device.info.maxTeams, Math.ceil(size / GPU_THREADS)) : 4 * device.info.computeUnits,
    threads: gpu ? GPU_THREADS : 1,
  };
}

/**
 * Runs the demo's four kernels on `device` from `library` (the bundle of examples/kernels.ts),
 * saxpy and the dot product over `size` floats; `skipped` names those the device's image lacks.
 * `onOutcome` sees each row as it comes (a page shows them as they come).
 */
export async function runDemoKernels(
  device: Device,
  library: Library,
  size: number,
  onOutcome: (outcome: Outcome) => void = () => {},
): Promise<{ outcomes: Outcome[]; skipped: string[] }> {
  const grid = demoGrid(device, size);
  // saxpy and mandelbrot are written for one item (saxpy_items, mandelbrot_items): the
  // device picks their grid; the dot product and the transpose use teams of threads.
  const runs: [string, string, (kernel: Kernel) => Promise<Outcome>][] = [
    ['saxpy', 'saxpy_items', (kernel) => saxpy(device, kernel, size, undefined)],
    ['dot_partial', 'dot_partial', (kernel) => dot(device, kernel, size, grid)],
    ['mandelbrot', 'mandelbrot_items', (kernel) => mandelbrot(device, kernel, size, undefined)],
    ['transpose', 'transpose', (kernel) => transpose(device, kernel)],
  ];
  const outcomes: Outcome[] = [];
  const skipped: string[] = [];
  for (const [name, kernelName, run] of runs) {
    const kernel = await device.kernel(library, kernelName).catch((error: unknown) => {
      if (OffloadError.is(error, 'NOT_FOUND')) return undefined;
      throw error;
    });
    if (!kernel) {
      skipped.push(`${name} on device ${device.id}`);
      continue;
    }
    const outcome = await run(kernel);
    outcomes.push(outcome);
    onOutcome(outcome);
  }
  return { outcomes, skipped };
}
