// Kernels of `npm run bench` (AssemblyScript, compiled by buildBundle; not type-checked by tsc).
// Pointers are usize byte offsets into device memory; loops are grid-stride over teams.
import { numTeams, teamId } from "offload-ts/device";

/** Does nothing: a launch of it costs only the runtime's overhead. */
export function empty(): void {}

/**
 * y[i] = a * x[i] + y[i] for i < n, over f32 vectors. Each team takes one contiguous block, so
 * no two workers write the same cache line, and the team numbers are read once, not per element.
 */
export function saxpy(n: i32, a: f32, x: usize, y: usize): void {
  const teams = numTeams();
  const block = (n + teams - 1) / teams;
  const start = teamId() * block;
  const end = min(n, start + block);
  for (let i = start; i < end; i++) {
    const offset = <usize>i << 2;
    store<f32>(y + offset, a * load<f32>(x + offset) + load<f32>(y + offset));
  }
}

/**
 * Iteration counts of the Mandelbrot set over a width x height grid (u32 per pixel, row-major),
 * rows spread over the teams: compute-bound, unlike saxpy, so it shows how launches scale with
 * workers when memory bandwidth is not the limit.
 */
export function mandelbrot(width: i32, height: i32, maxIter: i32, x0: f64, y0: f64, dx: f64, out: usize): void {
  for (let row = teamId(); row < height; row += numTeams()) {
    const cy = y0 + <f64>row * dx;
    const rowStart = out + ((<usize>row * <usize>width) << 2);
    for (let col = 0; col < width; col++) {
      const cx = x0 + <f64>col * dx;
      let zx = 0.0;
      let zy = 0.0;
      let iter = 0;
      while (iter < maxIter && zx * zx + zy * zy <= 4.0) {
        const t = zx * zx - zy * zy + cx;
        zy = 2.0 * zx * zy + cy;
        zx = t;
        iter++;
      }
      store<u32>(rowStart + (<usize>col << 2), <u32>iter);
    }
  }
}
