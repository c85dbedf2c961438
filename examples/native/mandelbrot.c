/*
 * The Mandelbrot set in C, an offload-ts kernel: `offload build examples/native/mandelbrot.c -o
 * build/mandelbrot` (clang-16 --target=wasm32 -O3 -msimd128; `offload demo` builds and checks it
 * on every wasm device). The same computation as examples/kernels.ts's, in f32.
 */
#include "offload.h"

/* Iteration counts of a width x height grid from (x0, y0) in steps of dx, one row per team in turn. */
OFFLOAD_KERNEL void mandelbrot(int width, int height, int max_iter, float x0, float y0, float dx,
                               offload_ptr(unsigned) out) {
  int teams = num_teams(0), threads = num_threads(0);
  for (int row = team_id(0); row < height; row += teams) {
    float cy = y0 + (float)row * dx;
    for (int col = thread_id(0); col < width; col += threads) {
      float cx = x0 + (float)col * dx;
      float zx = 0, zy = 0;
      int iter = 0;
      while (iter < max_iter && zx * zx + zy * zy <= 4.0f) {
        float t = zx * zx - zy * zy + cx;
        zy = 2.0f * zx * zy + cy;
        zx = t;
        iter++;
      }
      out[row * width + col] = (unsigned)iter;
    }
  }
}
