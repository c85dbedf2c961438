/*
 * The C peers of the host device's SIMD kernels (examples/kernels.ts: mandelbrot_simd,
 * matmul_simd): the same computations, compiled `-O3 -march=native -fopenmp` so the compiler
 * vectorises them for this CPU (AVX2: eight f32 lanes where wasm has four) and OpenMP spreads
 * rows over OMP_NUM_THREADS threads. `npm run bench -- host` builds and runs it; it prints one
 * JSON line with the median seconds of each kernel.
 *
 *   simd-kernels <width> <height> <maxIter> <n> <repetitions>
 *
 * mandelbrot: counts of the width x height grid at x0 = -2.2, y0 = -1.125, dx = 3 / width, in
 * f32, eight neighbouring pixels per vector; a lane that left the disc keeps its count and z.
 * matmul: c = a * b for n x n f32 matrices, row-major, i-k-j order (rows of b along the vector),
 * four steps of k at a time as the kernels take them.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LANES 8

static void mandelbrot(int width, int height, int max_iter, float x0, float y0, float dx, unsigned *out) {
#pragma omp parallel for schedule(dynamic, 4)
  for (int row = 0; row < height; row++) {
    float cy = y0 + (float)row * dx;
    for (int col = 0; col < width; col += LANES) {
      float zx[LANES] = {0}, zy[LANES] = {0}, cx[LANES];
      int count[LANES] = {0};
      for (int l = 0; l < LANES; l++) cx[l] = x0 + (float)(col + l) * dx;
      for (int iter = 0; iter < max_iter; iter++) {
        int any = 0;
#pragma omp simd reduction(| : any)
        for (int l = 0; l < LANES; l++) {
          float xx = zx[l] * zx[l], yy = zy[l] * zy[l];
          int inside = xx + yy <= 4.0f;
          any |= inside;
          count[l] += inside;
          float t = xx - yy + cx[l];
          float y = 2.0f * zx[l] * zy[l] + cy;
          zx[l] = inside ? t : zx[l];
          zy[l] = inside ? y : zy[l];
        }
        if (!any) break;
      }
      for (int l = 0; l < LANES && col + l < width; l++) out[(size_t)row * width + col + l] = (unsigned)count[l];
    }
  }
}

static void matmul(int n, const float *a, const float *b, float *c) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) {
    float *c_row = c + (size_t)i * n;
    const float *a_row = a + (size_t)i * n;
    memset(c_row, 0, sizeof(float) * n);
    int k = 0;
    /* Four steps of k at a time, the sum in a register between them, as the kernels do. */
    for (; k + 4 <= n; k += 4) {
      float a0 = a_row[k], a1 = a_row[k + 1], a2 = a_row[k + 2], a3 = a_row[k + 3];
      const float *b0 = b + (size_t)k * n, *b1 = b0 + n, *b2 = b1 + n, *b3 = b2 + n;
#pragma omp simd
      for (int j = 0; j < n; j++) c_row[j] = c_row[j] + a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
    }
    for (; k < n; k++) {
      float aik = a_row[k];
      const float *b_row = b + (size_t)k * n;
#pragma omp simd
      for (int j = 0; j < n; j++) c_row[j] += aik * b_row[j];
    }
  }
}

static int compare(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double median(double *values, int count) {
  qsort(values, count, sizeof(double), compare);
  return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s <width> <height> <maxIter> <n> <repetitions>\n", argv[0]);
    return 2;
  }
  int width = atoi(argv[1]), height = atoi(argv[2]), max_iter = atoi(argv[3]), n = atoi(argv[4]);
  int reps = atoi(argv[5]);
  if (width <= 0 || height <= 0 || max_iter <= 0 || n <= 0 || reps <= 0 || reps > 1000) {
    fprintf(stderr, "every argument must be a positive integer (repetitions at most 1000)\n");
    return 2;
  }
  unsigned *counts = malloc(sizeof(unsigned) * (size_t)width * height);
  float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n);
  float *c = malloc(sizeof(float) * (size_t)n * n);
  double *times = malloc(sizeof(double) * reps);
  if (!counts || !a || !b || !c || !times) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < (size_t)n * n; i++) {
    a[i] = (float)(i % 1000) / 1000.0f;
    b[i] = (float)((i * 7) % 1000) / 1000.0f - 0.5f;
  }
  float dx = 3.0f / (float)width;
  /* One untimed run of each first (page faults, thread start), as the bench's warm-up. */
  mandelbrot(width, height, max_iter, -2.2f, -1.125f, dx, counts);
  for (int r = 0; r < reps; r++) {
    double start = omp_get_wtime();
    mandelbrot(width, height, max_iter, -2.2f, -1.125f, dx, counts);
    times[r] = omp_get_wtime() - start;
  }
  double mandelbrot_s = median(times, reps);
  matmul(n, a, b, c);
  for (int r = 0; r < reps; r++) {
    double start = omp_get_wtime();
    matmul(n, a, b, c);
    times[r] = omp_get_wtime() - start;
  }
  double matmul_s = median(times, reps);
  unsigned long long inside = 0;
  for (size_t i = 0; i < (size_t)width * height; i++) inside += counts[i] == (unsigned)max_iter;
  printf("{\"threads\":%d,\"mandelbrot_s\":%.9f,\"matmul_s\":%.9f,\"inside\":%llu,\"c0\":%.6f}\n", omp_get_max_threads(),
         mandelbrot_s, matmul_s, inside, (double)c[0]);
  free(counts);
  free(a);
  free(b);
  free(c);
  free(times);
  return 0;
}
