/*
 * What the C peers of XSBench and RSBench share (as src/apps/proxy-apps.ts does for the ports):
 * the 63-bit LCG and its fast-forward, the material pick, the verification value, the materials. Each
 * peer includes it once; the device functions are declared for the target when offloading.
 */
#ifndef PROXY_APPS_H
#define PROXY_APPS_H
#include <stdint.h>
#ifndef __wasm__
#include <stdlib.h>
#endif

/* Target pragmas only where a compiler that offloads was asked to (gcc builds the host loop). */
#if defined(OFFLOAD) && defined(__clang__)
#define USE_TARGET 1
#endif

#ifdef USE_TARGET
#pragma omp declare target
#endif
static const uint64_t LCG_A = 2806196910506780709ULL;
static const uint64_t MASK63 = 0x7fffffffffffffffULL;

/* randInt: the new 63-bit seed itself; the product wraps mod 2^64, its low 63 bits are the residue. */
static inline uint64_t lcg_int(uint64_t *seed) {
  *seed = (LCG_A * *seed + 1) & MASK63;
  return *seed;
}

static inline double lcg_double(uint64_t *seed) { return (double)lcg_int(seed) / 9223372036854775808.0; }

static uint64_t fast_forward(uint64_t seed, uint64_t n) {
  uint64_t a = LCG_A, c = 1, a_new = 1, c_new = 0;
  while (n > 0) {
    if (n & 1) {
      a_new *= a;
      c_new = c_new * a + c;
    }
    c *= a + 1;
    a *= a;
    n >>= 1;
  }
  return (a_new * seed + c_new) & MASK63;
}

/* pick_mat: dist[0] never enters the sum, which runs from dist[i] down to dist[1] (its rounding). */
static int pick_mat(double roll) {
  const double dist[12] = {0.140, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013};
  for (int i = 0; i < 12; i++) {
    double running = 0;
    for (int j = i; j > 0; j--) running += dist[j];
    if (roll < running) return i;
  }
  return 0;
}
/* The verification value: 1-based index of the largest of n channels (strict >, from `floor`). */
static long verification(const double *m, int n, double floor) {
  double best = floor;
  long index = 0;
  for (int k = 0; k < n; k++)
    if (m[k] > best) {
      best = m[k];
      index = k + 1;
    }
  return index;
}
#ifdef USE_TARGET
#pragma omp end declare target
#endif

#ifndef __wasm__
/* Host only (it allocates): a wasm kernel build (offload build) leaves it out. */
/*
 * The 12 materials' nuclides: fills num_nucs, sets *max_nucs and returns mats[12 * max_nucs]
 * (row m holds material m's nuclides). The large fuel adds nuclides 68..354.
 */
static int *materials(int large, int num_nucs[12], int *max_nucs) {
  static const int fuel[] = {58, 59, 60, 61, 40, 42, 43, 44, 45, 46, 1, 2, 3, 7, 8, 9, 10, 29, 57, 47, 48, 0, 62, 15, 33, 34, 52, 53, 54, 55, 56, 18, 23, 41};
  static const int m1[] = {63, 64, 65, 66, 67};
  static const int water[] = {24, 41, 4, 5};
  static const int alloy[] = {19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 27, 28, 29, 30, 31, 32, 26, 49, 50, 51, 11, 12, 13, 14, 6, 16, 17};
  static const int structure[] = {24, 41, 4, 5, 19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 49, 50, 51, 11, 12, 13, 14};
  static const int boron[] = {24, 41, 4, 5, 63, 64, 65, 66, 67};
  const int *lists[12] = {fuel, m1, water, water, alloy, structure, structure, structure, structure, structure, boron, boron};
  const int counts[12] = {34, 5, 4, 4, 27, 21, 21, 21, 21, 21, 9, 9};
  for (int m = 0; m < 12; m++) num_nucs[m] = counts[m];
  if (large) num_nucs[0] = 321;
  *max_nucs = num_nucs[0];
  int *mats = calloc(12 * (size_t)*max_nucs, sizeof(int));
  for (int m = 0; m < 12; m++)
    for (int j = 0; j < num_nucs[m]; j++) mats[m * *max_nucs + j] = (m == 0 && j >= 34) ? 68 + (j - 34) : lists[m][j];
  return mats;
}
#endif
#endif
