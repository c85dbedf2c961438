// Kernels of the `offload demo` command (AssemblyScript, compiled by buildBundle; not
// type-checked by tsc). Pointers are usize byte offsets into device memory.
import { numTeams, teamId } from "offload-ts/device";

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
 * Iteration counts of the Mandelbrot set over a width x height grid whose pixel (col, row) is the
 * point (x0 + col * dx, y0 + row * dx); out receives u32 counts, row-major. Rows are spread over
 * the teams.
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

/**
 * Partial dot products of two f32 vectors of length n: each team sums x[i] * y[i] over its
 * contiguous block, in f64, and stores the sum at partials + teamId * 8. The host adds the
 * numTeams partials.
 */
export function dot_partial(n: i32, x: usize, y: usize, partials: usize): void {
  const teams = numTeams();
  const team = teamId();
  const block = (n + teams - 1) / teams;
  const start = team * block;
  const end = min(n, start + block);
  let sum = 0.0;
  for (let i = start; i < end; i++) {
    const offset = <usize>i << 2;
    sum += <f64>load<f32>(x + offset) * <f64>load<f32>(y + offset);
  }
  store<f64>(partials + (<usize>team << 3), sum);
}
