/*
 * RSBench (event-based multipole lookups, Doppler broadening on) in C: the native peer of
 * offload-ts's port (src/apps/rsbench.ts, examples/rsbench/kernels.ts), with the same data,
 * layout and checksums (shared/bench/PROXY-APPS.md).
 *
 * Two builds (bench/peers/build.sh does both):
 *   clang-16 -O3 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -DOFFLOAD rsbench.c -o rsbench_offload -lm
 *     lookups in a `target teams distribute parallel for` through libomptarget's x86_64 plugin;
 *     run with LD_LIBRARY_PATH=/usr/lib/llvm-16/lib OMP_TARGET_OFFLOAD=MANDATORY
 *   gcc -O3 -fopenmp rsbench.c -o rsbench_host -lm
 *     the same loop as a plain host `parallel for`.
 * Usage: <binary> <lookups> [small|large]. Prints one JSON line; the time is the lookup loop
 * alone (the data is mapped before it). `threads` is omp_get_num_threads() seen inside the loop
 * (LLVM 16's host plugin runs the target region with one team of one thread).
 * `offload build rsbench.c` (clang --target=wasm32 -O3 -msimd128), where __wasm__ is defined, it
 * is only the lookup (rs_lookup) and the kernel below that runs it over a team's block of
 * lookups, with the parameters of examples/rsbench/kernels.ts; sin, cos and atan are the device
 * library's (offload_math.h: musl's algorithms, as AssemblyScript's Math).
 */
#ifdef __wasm__
#include "offload.h"
#include "offload_math.h"
#define sqrt offload_sqrt
#define sin offload_sin
#define cos offload_cos
#define atan offload_atan
#else
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#endif
#include <stdint.h>

#include "proxy_apps.h"

#define NUM_L 4
#define AVG_POLES 1000
#define AVG_WINDOWS 100
#define POLE_F 152.5
#define CHECKSUM_MOD 999983
#define FULL_LOOKUPS 10200000L

#ifdef USE_TARGET
#pragma omp declare target
#endif
/* RSBench's fast_exp: (1 + x/4096)^4096 by 12 squarings, not the library exp, so results match it. */
static inline double fast_exp(double x) {
  x = 1.0 + x * 0.000244140625;
  for (int k = 0; k < 12; k++) x *= x;
  return x;
}

/* Abrarov series (N = 10, Tm = 12). */
static const double an[10] = {0.2758402, 0.224574, 0.1594149, 0.09866577, 0.05324414, 0.02505215, 0.01027747, 0.003676164, 0.001146494, 0.000311757};
static const double neg_1n[10] = {-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0};
static const double denominator_left[10] = {9.869604, 39.47842, 88.82644, 157.9137, 246.7401, 355.3058, 483.6106, 631.6547, 799.438, 986.9604};

/*
 * RSBench's fast_nuclear_W(Z) into (*wr, *wi). Complex values are pairs of doubles; each product
 * keeps the operand order of RSBench's c_mul/c_div, dropping only terms that multiply an exact zero.
 */
static inline void faddeeva(double zr, double zi, double *wr, double *wi) {
  const double prefactor = 81.2433;
  /* Three-term asymptotic expansion (QUICK_2). */
  const double qa = 0.5124242247547685, qb = 0.27525512860841095, qc = 0.051765358792987826, qd = 2.724744871391589;

  double z2r = zr * zr - zi * zi;
  double z2i = zr * zi + zi * zr;
  if (sqrt(zr * zr + zi * zi) < 6.0) {
    /* e = cexp(12i * Z): the same value each of the 11 times the original computes it. */
    double t = fast_exp(-12.0 * zi);
    double er = t * cos(12.0 * zr), ei = t * sin(12.0 * zr);
    /* W = (i * (1 - e)) / (12 * Z) */
    double nr = ei, ni = 1.0 - er;
    double dr = 12.0 * zr, di = 12.0 * zi;
    double denom = dr * dr + di * di;
    double w_r = (nr * dr + ni * di) / denom;
    double w_i = (ni * dr - nr * di) / denom;
    double sr = 0.0, si = 0.0;
    double br0 = 144.0 * z2r, bi = -(144.0 * z2i);
    for (int n = 0; n < 10; n++) {
      /* sum += an[n] * ((neg_1n[n] * e - 1) / (denominator_left[n] - 144 * Z^2)) */
      double tr = neg_1n[n] * er - 1.0, ti = neg_1n[n] * ei;
      double br = denominator_left[n] - br0;
      double bd = br * br + bi * bi;
      sr += an[n] * ((tr * br + ti * bi) / bd);
      si += an[n] * ((ti * br - tr * bi) / bd);
    }
    /* W += (0, prefactor) * (Z * sum) */
    double pr = zr * sr - zi * si;
    double pi = zr * si + zi * sr;
    *wr = w_r + -(prefactor * pi);
    *wi = w_i + prefactor * pr;
  } else {
    /* W = (Z * i) * (a / (Z^2 - b) + c / (Z^2 - d)) */
    double xr = z2r - qb, xd = xr * xr + z2i * z2i;
    double yr = z2r - qd, yd = yr * yr + z2i * z2i;
    double sr = (qa * xr) / xd + (qc * yr) / yd;
    double si = -(qa * z2i) / xd + -(qc * z2i) / yd;
    *wr = -zi * sr - zr * si;
    *wi = -zi * si + zr * sr;
  }
}

/* Per channel l, the factor (r, i) of calculate_sig_T; fields, not arrays, so a wasm build keeps them in locals. */
struct sig_t {
  double r0, i0, r1, i1, r2, i2, r3, i3;
};

/* calculate_sig_T: per channel l, (cos 2phi, -sin 2phi) with phi from K0RS * sqrt(E) and the phase shifts. */
static inline struct sig_t sig_t_factors(const double *k0rs, double sqrt_e) {
  struct sig_t f;
  double phi = k0rs[0] * sqrt_e * 2.0;
  f.r0 = cos(phi);
  f.i0 = -sin(phi);
  phi = k0rs[1] * sqrt_e;
  phi -= -atan(phi);
  phi *= 2.0;
  f.r1 = cos(phi);
  f.i1 = -sin(phi);
  phi = k0rs[2] * sqrt_e;
  phi -= atan((3.0 * phi) / (3.0 - phi * phi));
  phi *= 2.0;
  f.r2 = cos(phi);
  f.i2 = -sin(phi);
  phi = k0rs[3] * sqrt_e;
  phi -= atan((phi * (15.0 - phi * phi)) / (15.0 - 6.0 * phi * phi));
  phi *= 2.0;
  f.r3 = cos(phi);
  f.i3 = -sin(phi);
  return f;
}

/*
 * Lookup i (RSBench's event loop body): the verification value of its four macroscopic cross
 * sections (total, absorption, fission, total - absorption).
 */
static inline long rs_lookup(uint64_t i, int max_poles, int max_windows, int max_nucs, const double *poles,
                             const int *pole_l, const double *windows, const int *bounds, const double *k0rs,
                             const int *n_windows, const int *num_nucs, const int *mats, const double *concs) {
  uint64_t s = fast_forward(1070, 2 * i);
  double e = lcg_double(&s);
  int mat = pick_mat(lcg_double(&s));
  double sqrt_e = sqrt(e);
  double m[4] = {0, 0, 0, 0};
  for (int j = 0; j < num_nucs[mat]; j++) {
    long at = (long)mat * max_nucs + j;
    int nuc = mats[at];
    int nw = n_windows[nuc];
    double spacing = 1.0 / nw;
    int window = (int)(e / spacing);
    if (window == nw) window--;
    struct sig_t f = sig_t_factors(k0rs + (long)nuc * NUM_L, sqrt_e);
    long w = (long)nuc * max_windows + window;
    double st = e * windows[w * 3], sa = e * windows[w * 3 + 1], sf = e * windows[w * 3 + 2];
    const double *np = poles + (long)nuc * max_poles * 8;
    const int *nl = pole_l + (long)nuc * max_poles;
    for (int p = bounds[w * 2]; p < bounds[w * 2 + 1]; p++) {
      const double *pp = np + (long)p * 8;
      double wr, wi;
      /* Z = ((E, 0) - EA) * (0.5, 0) */
      faddeeva((e - pp[0]) * 0.5, -pp[1] * 0.5, &wr, &wi);
      int l = nl[p];
      double fr = l == 0 ? f.r0 : l == 1 ? f.r1 : l == 2 ? f.r2 : f.r3;
      double fi = l == 0 ? f.i0 : l == 1 ? f.i1 : l == 2 ? f.i2 : f.i3;
      double wfr = wr * fr - wi * fi;
      double wfi = wr * fi + wi * fr;
      st += pp[2] * wfr - pp[3] * wfi;
      sa += pp[4] * wr - pp[5] * wi;
      sf += pp[6] * wr - pp[7] * wi;
    }
    double conc = concs[at];
    m[0] += st * conc;
    m[1] += sa * conc;
    m[2] += sf * conc;
    m[3] += (st - sa) * conc;
  }
  return verification(m, 4, -1.7976931348623157e308);
}
#ifdef USE_TARGET
#pragma omp end declare target
#endif

#ifdef __wasm__
/*
 * Lookups first .. first+count-1 in contiguous blocks per team; each team stores the sum of its
 * verification values at partials[team_id]. The parameters are examples/rsbench/kernels.ts's.
 */
OFFLOAD_KERNEL void rsbench_lookups(long long first, int count, int max_poles, int max_windows, int max_nucs,
                                    offload_ptr(const double) poles, offload_ptr(const int) pole_l,
                                    offload_ptr(const double) windows, offload_ptr(const int) bounds,
                                    offload_ptr(const double) k0rs, offload_ptr(const int) n_windows,
                                    offload_ptr(const int) num_nucs, offload_ptr(const int) mats,
                                    offload_ptr(const double) concs, offload_ptr(long long) partials) {
  int teams = num_teams(0), team = team_id(0);
  int block = (count + teams - 1) / teams;
  int start = team * block, end = start + block < count ? start + block : count;
  long long sum = 0;
  for (int i = start; i < end; i++)
    sum += rs_lookup((uint64_t)(first + i), max_poles, max_windows, max_nucs, poles, pole_l, windows, bounds, k0rs,
                     n_windows, num_nucs, mats, concs);
  partials[team] = sum;
}
#else
/* avg * n items over n nuclides: each has one, and each further draw adds one to nuclide randInt % n. */
static int *counts(uint64_t *seed, int n, int avg, int *max) {
  int *result = malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++) result[i] = 1;
  for (long i = 0; i < (long)avg * n - n; i++) result[lcg_int(seed) % (uint64_t)n]++;
  *max = 0;
  for (int i = 0; i < n; i++)
    if (result[i] > *max) *max = result[i];
  return result;
}

int main(int argc, char **argv) {
  long lookups = argc > 1 ? atol(argv[1]) : FULL_LOOKUPS;
  int large = argc > 2 && strcmp(argv[2], "large") == 0;
  if (lookups < 1 || (argc > 2 && !large && strcmp(argv[2], "small") != 0)) {
    fprintf(stderr, "usage: %s <lookups> [small|large]\n", argv[0]);
    return 2;
  }
  const int n_nuc = large ? 355 : 68;

  /* Materials; then one stream from seed 42 in RSBench's order: concentrations first. */
  int num_nucs[12], max_nucs;
  int *mats = materials(large, num_nucs, &max_nucs);
  double *concs = calloc(12 * max_nucs, sizeof(double));
  uint64_t seed = 42;
  for (int m = 0; m < 12; m++)
    for (int j = 0; j < num_nucs[m]; j++) concs[m * max_nucs + j] = lcg_double(&seed);

  int max_poles, max_windows;
  int *n_poles = counts(&seed, n_nuc, AVG_POLES, &max_poles);
  int *n_windows = counts(&seed, n_nuc, AVG_WINDOWS, &max_windows);

  /* Poles, nuclide-major with stride max_poles: EA, RT, RA, RF as (re, im), then the channel l. */
  long n_pole_slots = (long)n_nuc * max_poles;
  double *poles = calloc(n_pole_slots * 8, sizeof(double));
  int *pole_l = calloc(n_pole_slots, sizeof(int));
  for (int nuc = 0; nuc < n_nuc; nuc++)
    for (int p = 0; p < n_poles[nuc]; p++) {
      long at = (long)nuc * max_poles + p;
      double *o = poles + at * 8;
      /* EA = (f, 0) * (r, im); RT, RA, RF = (f * r, im), each from two fresh draws. */
      o[0] = POLE_F * lcg_double(&seed);
      o[1] = POLE_F * lcg_double(&seed);
      for (int k = 2; k < 8; k += 2) {
        o[k] = lcg_double(&seed) * POLE_F;
        o[k + 1] = lcg_double(&seed);
      }
      pole_l[at] = (int)(lcg_int(&seed) % NUM_L);
    }

  /* Windows: T, A, F and [first pole, end pole); the remainder of poles goes to the first windows. */
  long n_window_slots = (long)n_nuc * max_windows;
  double *windows = calloc(n_window_slots * 3, sizeof(double));
  int *bounds = calloc(n_window_slots * 2, sizeof(int));
  for (int nuc = 0; nuc < n_nuc; nuc++) {
    int space = n_poles[nuc] / n_windows[nuc];
    int remainder = n_poles[nuc] - space * n_windows[nuc];
    int ctr = 0;
    for (int w = 0; w < n_windows[nuc]; w++) {
      long at = (long)nuc * max_windows + w;
      windows[at * 3] = lcg_double(&seed);
      windows[at * 3 + 1] = lcg_double(&seed);
      windows[at * 3 + 2] = lcg_double(&seed);
      bounds[at * 2] = ctr;
      bounds[at * 2 + 1] = ctr + space - 1;
      ctr += space;
      if (w < remainder) {
        ctr++;
        bounds[at * 2 + 1]++;
      }
    }
  }

  double *k0rs = malloc(sizeof(double) * n_nuc * NUM_L);
  for (int i = 0; i < n_nuc * NUM_L; i++) k0rs[i] = lcg_double(&seed);

  long sum = 0;
  int threads = 1;
#ifdef USE_TARGET
#pragma omp target enter data map(to: poles[0:n_pole_slots * 8], pole_l[0:n_pole_slots], windows[0:n_window_slots * 3], bounds[0:n_window_slots * 2], \
                                      k0rs[0:n_nuc * NUM_L], n_windows[0:n_nuc], num_nucs[0:12], mats[0:12 * max_nucs], concs[0:12 * max_nucs])
#endif
  double start = omp_get_wtime();
#ifdef USE_TARGET
#pragma omp target teams distribute parallel for reduction(+ : sum) map(tofrom: threads)
#else
#pragma omp parallel for reduction(+ : sum)
#endif
  for (long i = 0; i < lookups; i++) {
    if (i == 0) threads = omp_get_num_threads();
    sum += rs_lookup((uint64_t)i, max_poles, max_windows, max_nucs, poles, pole_l, windows, bounds, k0rs, n_windows,
                     num_nucs, mats, concs);
  }
  double seconds = omp_get_wtime() - start;
#ifdef USE_TARGET
#pragma omp target exit data map(release: poles[0:n_pole_slots * 8], pole_l[0:n_pole_slots], windows[0:n_window_slots * 3], bounds[0:n_window_slots * 2], \
                                      k0rs[0:n_nuc * NUM_L], n_windows[0:n_nuc], num_nucs[0:12], mats[0:12 * max_nucs], concs[0:12 * max_nucs])
#endif
  long checksum = sum % CHECKSUM_MOD;
  long expected = lookups == FULL_LOOKUPS ? (large ? 358389 : 880018)
                  : large                ? -1
                  : lookups == 1000      ? 3533
                  : lookups == 20000     ? 70370
                                         : -1;
  const char *valid = expected < 0 ? "null" : checksum == expected ? "true" : "false";
  printf("{\"app\":\"rsbench\",\"variant\":\"%s\",\"size\":\"%s\",\"lookups\":%ld,\"checksum\":%ld,\"valid\":%s,\"seconds\":%.6f,\"lookups_per_s\":%.0f,\"threads\":%d}\n",
#ifdef USE_TARGET
         "offload",
#else
         "host",
#endif
         large ? "large" : "small", lookups, checksum, valid, seconds, lookups / seconds, threads);
  return expected >= 0 && checksum != expected;
}
#endif
