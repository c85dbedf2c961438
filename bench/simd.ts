/**
 * The host device's SIMD kernels (examples/kernels.ts: mandelbrot_simd and matmul_simd, four f32
 * lanes of wasm SIMD) against their scalar versions on the same workers, against the same loops
 * in plain TypeScript on the main thread, and against C vectorised for this CPU with OpenMP on as
 * many threads as the device has workers (bench/peers/simd-kernels.c, `gcc -O3 -march=native
 * -fopenmp`: the physical limit here); and beside that, C held to SSE's four lanes without FMA
 * (`-mno-avx`), the kernels' own width and arithmetic. Against C the kernels are timed back to
 * back, as the peer times itself. Rows of `npm run bench -- host`.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Device, Library, Queue } from '../src/index.js';
import { type Contender, measure, type Plan, type Series } from './measure.js';
import type { Row } from './suite.js';

const [WIDTH, HEIGHT, MAX_ITER, X0, Y0] = [1024, 768, 256, -2.2, -1.125];
const DX = 3 / WIDTH;
const N = 512;
const peerSource = fileURLToPath(new URL('peers/simd-kernels.c', import.meta.url));

export interface SimdSetup {
  device: Device;
  queue: Queue;
  library: Library;
  plan: Plan;
}

/** mandelbrot in plain TypeScript, f32 as the kernel computes (Math.fround after every operation). */
function mandelbrotTs(out: Uint32Array): void {
  const f = Math.fround;
  const [x0, y0, dx] = [f(X0), f(Y0), f(DX)];
  for (let row = 0; row < HEIGHT; row++) {
    const cy = f(y0 + f(row * dx));
    for (let col = 0; col < WIDTH; col++) {
      const cx = f(x0 + f(col * dx));
      let zx = 0;
      let zy = 0;
      let iter = 0;
      while (iter < MAX_ITER && f(f(zx * zx) + f(zy * zy)) <= 4) {
        const t = f(f(f(zx * zx) - f(zy * zy)) + cx);
        zy = f(f(f(2 * zx) * zy) + cy);
        zx = t;
        iter++;
      }
      out[row * WIDTH + col] = iter;
    }
  }
}

/** c = a * b in plain TypeScript over Float32Arrays, in the kernels' i-k-j order. */
function matmulTs(a: Float32Array, b: Float32Array, c: Float32Array): void {
  c.fill(0);
  for (let i = 0; i < N; i++) {
    for (let k = 0; k < N; k++) {
      const aik = a[i * N + k]!;
      const bRow = k * N;
      const cRow = i * N;
      for (let j = 0; j < N; j++) c[cRow + j] = Math.fround(c[cRow + j]! + Math.fround(aik * b[bRow + j]!));
    }
  }
}

/** The C peer's medians, or why there are none. */
interface PeerResult {
  mandelbrot_s: number;
  matmul_s: number;
  /** Pixels that never left the disc: equal to the kernels' count when the peer computes what they do. */
  inside: number;
}

/**
 * How the C peer is built: gcc's default, which fuses a multiply and an add into one FMA (one
 * rounding where the kernels round twice, so other answers), eight f32 lanes (AVX2); without
 * contraction, the kernels' arithmetic eight lanes at a time; and held to SSE (no AVX, so no FMA
 * either), the kernels' arithmetic at wasm SIMD's width of four lanes.
 */
const PEER_BUILDS = {
  default: {
    flags: ['-O3', '-march=native', '-fopenmp'],
    lanes: 'eight f32 lanes per vector (AVX2)',
    goal: { op: '>=', value: 0.6 },
  },
  'no-contract': {
    flags: ['-O3', '-march=native', '-fopenmp', '-ffp-contract=off'],
    lanes: 'eight f32 lanes per vector (AVX2)',
    goal: 'none: the same arithmetic as the kernels, beside the goal row',
  },
  'four-lanes': {
    flags: ['-O3', '-march=native', '-mno-avx', '-fopenmp'],
    lanes: 'four f32 lanes per vector (SSE)',
    goal: 'none: the same arithmetic as the kernels at the same width (four f32 lanes, SSE), beside the goal row',
  },
} as const satisfies Record<string, { flags: readonly string[]; lanes: string; goal: Row['goal'] }>;
type PeerBuild = keyof typeof PEER_BUILDS;

/** The C peer, built as `build`, on `threads` threads. */
function cPeer(threads: number, repetitions: number, build: PeerBuild): PeerResult | string {
  const flags = PEER_BUILDS[build].flags;
  const dir = mkdtempSync(path.join(tmpdir(), 'offload-bench-simd-'));
  try {
    const binary = path.join(dir, 'simd-kernels');
    try {
      execFileSync('gcc', [...flags, peerSource, '-o', binary], { stdio: 'pipe' });
    } catch (error) {
      return `gcc ${flags.join(' ')} failed: ${(error as Error).message.split('\n')[0]}`;
    }
    const result = spawnSync(binary, [WIDTH, HEIGHT, MAX_ITER, N, repetitions].map(String), {
      encoding: 'utf8',
      env: { ...process.env, OMP_NUM_THREADS: String(threads), OMP_PROC_BIND: 'false' },
      timeout: 300_000,
    });
    if (result.status !== 0) return `the C peer failed (${result.status}): ${result.stderr}`;
    return JSON.parse(result.stdout.trim()) as PeerResult;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function simdRows(
  { device, queue, library, plan }: SimdSetup,
  progress: (line: string) => void,
): Promise<Row[]> {
  const workers = device.info.computeUnits;
  const pixels = WIDTH * HEIGHT;
  const [mandelbrot, mandelbrotSimd] = [
    await device.kernel(library, 'mandelbrot'),
    await device.kernel(library, 'mandelbrot_simd'),
  ];
  const [matmul, matmulSimd] = [await device.kernel(library, 'matmul'), await device.kernel(library, 'matmul_simd')];
  const teams = 16 * workers;
  const [counts, countsSimd] = [await device.alloc(pixels * 4), await device.alloc(pixels * 4)];
  const a = Float32Array.from({ length: N * N }, (_, i) => (i % 1000) / 1000);
  const b = Float32Array.from({ length: N * N }, (_, i) => ((i * 7) % 1000) / 1000 - 0.5);
  const matrixBytes = N * N * 4;
  const [aBuf, bBuf, cBuf, cSimdBuf] = [
    await device.alloc(matrixBytes),
    await device.alloc(matrixBytes),
    await device.alloc(matrixBytes),
    await device.alloc(matrixBytes),
  ];
  queue.write(aBuf, a);
  queue.write(bBuf, b);
  await queue.finish();
  const tsCounts = new Uint32Array(pixels);
  const tsC = new Float32Array(N * N);
  const mandelbrotArgs = [WIDTH, HEIGHT, MAX_ITER, X0, Y0, DX];
  const madds = N * N * N;
  // Timed twice: alternating with the scalar kernels and TypeScript, and back to back against C.
  const simdMandelbrot: Contender = {
    label: `await queue.launch(mandelbrot_simd, { teams: ${teams} }, [...]).done: four pixels per f32x4`,
    count: pixels,
    run: async () => void (await queue.launch(mandelbrotSimd, { teams }, [...mandelbrotArgs, countsSimd]).done),
  };
  const simdMatmul: Contender = {
    label: `await queue.launch(matmul_simd, { teams: ${teams} }, [${N}, a, b, c]).done: four columns per f32x4`,
    count: madds,
    run: async () => void (await queue.launch(matmulSimd, { teams }, [N, aBuf, bBuf, cSimdBuf]).done),
  };
  progress('host: SIMD mandelbrot against the scalar kernel and plain TypeScript');
  const [scalarM, simdM, tsM] = await measure(plan, [
    {
      label: `await queue.launch(mandelbrot, { teams: ${teams} }, [...]).done: the scalar kernel, ${WIDTH} x ${HEIGHT} pixels, ${MAX_ITER} iterations at most`,
      count: pixels,
      run: async () => void (await queue.launch(mandelbrot, { teams }, [...mandelbrotArgs, counts]).done),
    },
    simdMandelbrot,
    {
      label: 'the same loop in plain TypeScript (Math.fround) on the main thread',
      count: pixels,
      run: () => mandelbrotTs(tsCounts),
    },
  ]);
  progress('host: SIMD matmul against the scalar kernel and plain TypeScript');
  const [scalarMm, simdMm, tsMm] = await measure(plan, [
    {
      label: `await queue.launch(matmul, { teams: ${teams} }, [${N}, a, b, c]).done: the scalar kernel, ${N} x ${N} f32 (count: multiply-adds)`,
      count: madds,
      run: async () => void (await queue.launch(matmul, { teams }, [N, aBuf, bBuf, cBuf]).done),
    },
    simdMatmul,
    {
      label: 'the same i-k-j loop in plain TypeScript over Float32Arrays on the main thread',
      count: madds,
      run: () => matmulTs(a, b, tsC),
    },
  ]);
  // The SIMD kernels must have computed what the scalar ones did, bit for bit.
  const [m1, m2, c1, c2] = [
    new Uint32Array(pixels),
    new Uint32Array(pixels),
    new Float32Array(N * N),
    new Float32Array(N * N),
  ];
  queue.read(counts, m1);
  queue.read(countsSimd, m2);
  queue.read(cBuf, c1);
  queue.read(cSimdBuf, c2);
  await queue.finish();
  const badPixel = m1.findIndex((count, i) => count !== m2[i]);
  if (badPixel >= 0) throw new Error(`mandelbrot_simd and mandelbrot disagree at pixel ${badPixel}`);
  const badElement = c1.findIndex((value, i) => value !== c2[i]);
  if (badElement >= 0) throw new Error(`matmul_simd and matmul disagree at element ${badElement}`);

  const goal = { op: '>=', value: 2.5 } as const;
  const rows: Row[] = [
    {
      name: `mandelbrot ${WIDTH} x ${HEIGHT}: SIMD kernel vs the scalar kernel, ${teams} teams on ${workers} workers`,
      unit: 'Mpixels/s',
      offload: simdM!,
      baseline: scalarM!,
      goal,
    },
    {
      name: `mandelbrot ${WIDTH} x ${HEIGHT}: SIMD kernel on ${workers} workers vs plain TypeScript on the main thread`,
      unit: 'Mpixels/s',
      offload: simdM!,
      baseline: tsM!,
      goal: 'none: what offloading with SIMD gains over the loop in TypeScript',
    },
    {
      name: `matmul ${N} x ${N} f32: SIMD kernel vs the scalar kernel, ${teams} teams on ${workers} workers`,
      unit: 'Melements/s',
      offload: simdMm!,
      baseline: scalarMm!,
      goal,
    },
    {
      name: `matmul ${N} x ${N} f32: SIMD kernel on ${workers} workers vs plain TypeScript on the main thread`,
      unit: 'Melements/s',
      offload: simdMm!,
      baseline: tsMm!,
      goal: 'none: what offloading with SIMD gains over the loop in TypeScript',
    },
  ];
  const inside = m2.reduce((sum, count) => sum + (count === MAX_ITER ? 1 : 0), 0);
  const cSeries = (label: string, count: number, seconds: number): Series => ({ label, count, seconds: [seconds] });
  // The C peer times its repetitions back to back after one untimed run, with its threads and
  // caches warm from the last; in the alternating series above, each launch of a SIMD kernel comes
  // after the main thread's TypeScript loop (a quarter of a second for matmul). So against C the
  // kernels are timed as C times itself, just before each peer runs.
  const backToBack = async (contender: Contender): Promise<Series> =>
    (
      await measure(plan, [
        { ...contender, label: `${contender.label}, ${plan.repetitions} back to back as the C peer times itself` },
      ])
    )[0]!;
  try {
    for (const build of Object.keys(PEER_BUILDS) as PeerBuild[]) {
      const { lanes, goal } = PEER_BUILDS[build];
      const flags = PEER_BUILDS[build].flags.join(' ');
      progress(`host: the SIMD kernels back to back, then the C peer (gcc ${flags}, ${workers} threads)`);
      const simdMAlone = await backToBack(simdMandelbrot);
      const simdMmAlone = await backToBack(simdMatmul);
      const peer = cPeer(workers, plan.repetitions, build);
      if (typeof peer === 'string') {
        progress(`host: no C peer rows: ${peer}`);
        break;
      }
      // Without FMA the peer must count what the kernels count, or it is not the same loop.
      if (build !== 'default' && peer.inside !== inside)
        throw new Error(`the C peer (${flags}) counts ${peer.inside} pixels inside, the kernels ${inside}`);
      const arithmetic =
        build === 'default'
          ? `FMA where gcc fuses (${peer.inside} pixels inside, the kernels ${inside})`
          : 'a multiply and an add, each rounded, as the kernels';
      rows.push(
        {
          name: `mandelbrot ${WIDTH} x ${HEIGHT}: SIMD kernel vs C (${flags}), ${workers} workers vs ${workers} threads`,
          unit: 'Mpixels/s',
          offload: simdMAlone,
          baseline: cSeries(
            `bench/peers/simd-kernels.c, ${lanes}, ${arithmetic}, OMP_NUM_THREADS=${workers} (median of ${plan.repetitions})`,
            pixels,
            peer.mandelbrot_s,
          ),
          goal,
        },
        {
          name: `matmul ${N} x ${N} f32: SIMD kernel vs C (${flags}), ${workers} workers vs ${workers} threads`,
          unit: 'Melements/s',
          offload: simdMmAlone,
          baseline: cSeries(
            `bench/peers/simd-kernels.c, the i-k-j loop vectorised by gcc, ${lanes}, ${arithmetic}, OMP_NUM_THREADS=${workers} (median of ${plan.repetitions})`,
            madds,
            peer.matmul_s,
          ),
          goal,
        },
      );
    }
  } finally {
    await Promise.all([counts, countsSimd, aBuf, bBuf, cBuf, cSimdBuf].map((buffer) => buffer.free()));
  }
  return rows;
}
