/**
 * `offload demo`: compiles examples/kernels.ts (cached by content; wasm for the host device, and
 * translated to WGSL for a WebGPU device), runs saxpy and mandelbrot (per-item kernels, launched
 * with `{ items }`), a dot product and a tiled transpose (teams of threads) on every
 * device whose image has them (with `--proxies N`, also on N local proxies it starts), and checks
 * every result against a plain TypeScript reference. The Rust saxpy and the C mandelbrot of
 * examples/native/ run the same way on every device that runs wasm, when the system's rustc and
 * clang are there to build them.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import type { Buffer } from '../api/buffer.js';
import type { Device } from '../api/device.js';
import type { Kernel } from '../api/kernel.js';
import { OffloadError } from '../errors.js';
import type { Event, Queue } from '../api/queue.js';
import { Offload } from '../api/runtime.js';
import { formatDuration, table, usageError, wrapHelp } from './format.js';
import { cachedBundle } from './kernel-cache.js';
import { startLocalProxies } from './local-proxies.js';

export const summary = 'Compile the example kernels, run them on every device and check the results';

const DEFAULT_SIZE = 2 ** 22;
const MAX_SIZE = 2 ** 31 - 1; // n is an i32 kernel parameter

const HELP = wrapHelp(`Usage: offload demo [--size N] [--proxies N]

${summary}:
saxpy and a dot product over N floats, and a 256x192 mandelbrot, on every device the runtime
finds (OFFLOAD_PROXIES included; a WebGPU device runs the same kernels, translated to WGSL);
then examples/native/'s Rust saxpy and C mandelbrot, built with the system's rustc and clang,
on every device that runs wasm.

Options:
  --size <N>     Vector length of saxpy and the dot product (default ${DEFAULT_SIZE})
  --proxies <N>  Start N local 'offload proxy' processes and run on their devices too
  --json         Print the results as one JSON object (and nothing else) on stdout
  -h, --help     Show this help`);

// src/cli and dist/cli sit at the same depth below the package root.
const KERNELS_SOURCE = fileURLToPath(new URL('../../examples/kernels.ts', import.meta.url));
/**
 * Kernels in other languages (README "Kernels in C, C++ and Rust"): built with the system's
 * compilers when they are there, run on every device that runs wasm (they have no WGSL image).
 */
const NATIVE_EXAMPLES = [
  { language: 'Rust', source: 'examples/native/saxpy.rs', kernel: 'saxpy' },
  { language: 'C', source: 'examples/native/mandelbrot.c', kernel: 'mandelbrot' },
] as const;
/** Threads per team on devices that run teams of threads (GPUs); the host device runs 1. */
const GPU_THREADS = 64;

/** f32 results may differ from the reference (f32 emulated in f64) by a few ulps (2^-23 relative each). */
const F32_TOLERANCE = 1e-6;
/** A sum of f32 products may differ more where a device fuses a multiply and an add. */
const SUM_TOLERANCE = 1e-5;
/** The share of mandelbrot pixels whose count may differ from the reference (see mandelbrot()). */
const MANDELBROT_DIFFERING = 0.01;
const MANDELBROT = { width: 256, height: 192, maxIter: 256, x0: -2.2, y0: -1.125, dx: 3 / 256 };
/** The transpose's matrix (not a multiple of its tiles, so that the edges are checked too) and tile side. */
const TRANSPOSE = { width: 250, height: 190, tile: 16 };

interface Mismatch {
  index: number;
  got: number;
  expected: number;
}

/** One kernel's run: what is shown in its row of the table. */
interface Outcome {
  kernel: string;
  problem: string;
  teams: number;
  threads: number;
  launchMs: number;
  roundTripMs: number;
  mismatch: Mismatch | undefined;
}

export async function run(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      size: { type: 'string' },
      proxies: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const size = values.size === undefined ? DEFAULT_SIZE : Number(values.size);
  if (!/^\d+$/.test(values.size ?? '1') || size < 1 || size > MAX_SIZE) {
    return usageError('demo', `--size must be an integer from 1 to ${MAX_SIZE}, got '${values.size}'`);
  }
  const proxyCount = values.proxies === undefined ? 0 : Number(values.proxies);
  if (!/^\d+$/.test(values.proxies ?? '0') || proxyCount > 16) {
    return usageError('demo', `--proxies must be a number of local proxies from 0 to 16, got '${values.proxies}'`);
  }

  const started = performance.now();
  const bundle = await cachedBundle([KERNELS_SOURCE], { label: 'offload-demo', name: 'kernels' });
  const how = bundle.compileMs === undefined ? 'cached' : `compiled in ${formatDuration(bundle.compileMs)}`;
  const shown = path.relative(process.cwd(), KERNELS_SOURCE) || KERNELS_SOURCE;
  const json = values.json === true;
  if (!json) console.log(`kernels  ${shown}: ${how} -> ${bundle.path}`);

  // The native examples' bundles; a missing compiler skips its example, saying why.
  const nativeBundles: { language: string; kernel: string; path: string }[] = [];
  const nativeMissing: string[] = [];
  for (const example of NATIVE_EXAMPLES) {
    const source = fileURLToPath(new URL(`../../${example.source}`, import.meta.url));
    try {
      const built = await cachedBundle([source], { label: `offload-demo-${example.kernel}`, name: example.kernel });
      nativeBundles.push({ language: example.language, kernel: example.kernel, path: built.path });
    } catch (error) {
      if (!OffloadError.is(error, 'UNSUPPORTED')) throw error;
      nativeMissing.push(`${example.kernel} (${example.language}): ${error.message}`);
    }
  }

  const local = await startLocalProxies(proxyCount, { announce: !json });
  try {
    const runtime = await Offload.init(
      local && { proxies: local.proxies.map((proxy) => proxy.address), token: local.token },
    );
    try {
      const library = await runtime.register(bundle.path);
      const nativeLibraries = await Promise.all(
        nativeBundles.map(async (native) => ({ ...native, library: await runtime.register(native.path) })),
      );
      const outcomes: (Outcome & { device: Device })[] = [];
      const skipped: string[] = [];
      /** The native examples on devices that run no wasm: their build noted that they do not translate. */
      const wasmOnly: string[] = [];
      for (const device of runtime.devices) {
        const gpu = device.info.kind === 'gpu';
        const grid = {
          teams: gpu ? Math.min(device.info.maxTeams, Math.ceil(size / GPU_THREADS)) : 4 * device.info.computeUnits,
          threads: gpu ? GPU_THREADS : 1,
        };
        // saxpy and mandelbrot are written for one item (saxpy_items, mandelbrot_items): the
        // device picks their grid; the dot product and the transpose use teams of threads.
        const runs: [string, string, (kernel: Kernel) => Promise<Outcome>][] = [
          ['saxpy', 'saxpy_items', (kernel) => saxpy(device, kernel, size, undefined)],
          ['dot_partial', 'dot_partial', (kernel) => dot(device, kernel, size, grid)],
          ['mandelbrot', 'mandelbrot_items', (kernel) => mandelbrot(device, kernel, size, undefined)],
          ['transpose', 'transpose', (kernel) => transpose(device, kernel)],
        ];
        for (const [name, kernelName, run] of runs) {
          const kernel = await device.kernel(library, kernelName).catch((error: unknown) => {
            if (OffloadError.is(error, 'NOT_FOUND')) return undefined;
            throw error;
          });
          if (kernel) outcomes.push({ ...(await run(kernel)), device });
          else skipped.push(`${name} on device ${device.id}`);
        }
        for (const native of nativeLibraries) {
          if (!device.info.imageFormats.includes('wasm')) {
            wasmOnly.push(`${native.kernel} (${native.language}) on device ${device.id}`);
            continue;
          }
          const kernel = await device.kernel(native.library, native.kernel);
          const run = native.kernel === 'saxpy' ? saxpy : mandelbrot;
          const outcome = await run(device, kernel, size, grid);
          outcomes.push({ ...outcome, kernel: `${outcome.kernel} (${native.language})`, device });
        }
      }

      const failed = outcomes.filter((o) => o.mismatch !== undefined).length;
      if (json) {
        const results = outcomes.map(({ device, ...o }) => ({
          ...o,
          device: device.id,
          deviceName: device.info.name,
          ok: o.mismatch === undefined,
          mismatch: o.mismatch ?? null,
        }));
        const kernels = { sources: shown, bundle: bundle.path, compileMs: bundle.compileMs ?? null };
        const proxies = local?.proxies.map((proxy) => proxy.address) ?? [];
        console.log(
          JSON.stringify(
            {
              kernels,
              proxies,
              results,
              skipped,
              wasmOnly,
              notBuilt: nativeMissing,
              ok: failed === 0,
              totalMs: performance.now() - started,
            },
            null,
            2,
          ),
        );
        return failed === 0 ? 0 : 1;
      }
      const header = ['kernel', 'device', 'grid', 'problem', 'launch', 'round trip', 'result'];
      const rows = outcomes.map((o) => [
        o.kernel,
        `${o.device.id} ${o.device.info.name}`,
        `${o.teams} x ${o.threads}`,
        o.problem,
        formatDuration(o.launchMs),
        formatDuration(o.roundTripMs),
        o.mismatch === undefined
          ? 'checked: OK'
          : `checked: MISMATCH at ${o.mismatch.index} (${o.mismatch.got}, ${o.mismatch.expected})`,
      ]);
      console.log('');
      for (const line of table([header, ...rows])) console.log(line);
      if (skipped.length > 0) console.log(`not in the device's image: ${skipped.join(', ')}`);
      if (wasmOnly.length > 0) console.log(`runs on wasm devices only: ${wasmOnly.join(', ')}`);
      for (const missing of nativeMissing) console.log(`not built: ${missing}`);
      console.log('');

      const total = formatDuration(performance.now() - started);
      const devices =
        runtime.devices.length === 1
          ? `device ${runtime.devices[0]!.id} ${runtime.devices[0]!.info.name}`
          : `${runtime.devices.length} devices`;
      const verdict =
        failed === 0
          ? `all ${outcomes.length} kernels checked OK`
          : `${failed} of ${outcomes.length} kernels MISMATCHED`;
      console.log(`${verdict} on ${devices}; ${total} in all`);
      return failed === 0 ? 0 : 1;
    } finally {
      await runtime.shutdown();
    }
  } finally {
    await local?.stop();
  }
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

type Grid = { teams: number; threads: number };

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
async function saxpy(device: Device, kernel: Kernel, n: number, grid: Grid | undefined): Promise<Outcome> {
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
async function mandelbrot(device: Device, kernel: Kernel, _n: number, grid: Grid | undefined): Promise<Outcome> {
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
