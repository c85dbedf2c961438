// Kernels only `npm run bench` needs (AssemblyScript, compiled by buildBundle; not type-checked
// by tsc). The bench bundle also holds examples/kernels.ts: saxpy and mandelbrot come from there.
import { hostCall, item, itemCount, itemId, ptr, teamId, threadId } from "offload-ts/device";

/** Does nothing: a launch of it costs only the runtime's overhead. */
export function empty(): void {}

/** Calls the program's host function "tick" n times from one thread: the cost of hostCall. */
export function host_calls(n: i32): void {
  if (teamId() != 0 || threadId() != 0) return;
  for (let i = 0; i < n; i++) hostCall("tick", 1, <f64>i);
}

/**
 * The same work in every team: `iterations` steps of a dependent f32 recurrence on thread 0,
 * stored at out + 4 * teamId. A range of teams whose cost is its length, for `npm run bench --
 * spread` (total work over summed throughput is then the ideal time).
 */
export function team_work(iterations: i32, out: usize): void {
  if (threadId() != 0) return;
  let x: f32 = <f32>teamId();
  for (let k = 0; k < iterations; k++) x = x * 0.999999 + 0.000001;
  store<f32>(out + (<usize>teamId() << 2), x);
}

/** examples/kernels.ts's saxpy as a per-item kernel: the body for one element; the build makes the block loop. */
export function saxpy_items(i: item, a: f32, x: ptr<f32>, y: ptr<f32>): void {
  y[i] = a * x[i] + y[i];
}

/** examples/kernels.ts's mandelbrot as a per-item kernel over [width, height] items: one pixel. */
export function mandelbrot_items(col: item, maxIter: i32, x0: f32, y0: f32, dx: f32, out: ptr<u32>): void {
  const row = itemId(1);
  const cx = x0 + <f32>col * dx;
  const cy = y0 + <f32>row * dx;
  let zx: f32 = 0.0;
  let zy: f32 = 0.0;
  let iter = 0;
  while (iter < maxIter && zx * zx + zy * zy <= 4.0) {
    const t = zx * zx - zy * zy + cx;
    zy = 2.0 * zx * zy + cy;
    zx = t;
    iter++;
  }
  out[row * itemCount(0) + col] = <u32>iter;
}
