/*
 * XSBench (event-based lookups, unionized or hash grid) in C: the native peer of offload-ts's
 * port (src/apps/xsbench.ts, examples/xsbench/kernels.ts), with the same data and checksums.
 *
 * Two builds (bench/peers/build.sh does both):
 *   clang-16 -O3 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -DOFFLOAD xsbench.c -o xsbench_offload
 *     lookups in a `target teams distribute parallel for` through libomptarget's x86_64 plugin;
 *     run with LD_LIBRARY_PATH=/usr/lib/llvm-16/lib OMP_TARGET_OFFLOAD=MANDATORY
 *   gcc -O3 -fopenmp xsbench.c -o xsbench_host
 *     the same loop as a plain host `parallel for`.
 * Usage: <binary> <lookups> [unionized|hash] [small|large]. Prints one JSON line; the time is the
 * lookup loop alone (the data is mapped before it).
 *
 * The same file is also the C kernel of offload-ts (`offload bench xsbench --kernel c`): built by
 * `offload build xsbench.c` (clang --target=wasm32 -O3 -msimd128), where __wasm__ is defined, it
 * is only the lookup (xs_lookup) and the two kernels below that run it over a team's block of
 * lookups, with the parameters of examples/xsbench/kernels.ts; main and the data set-up are left out.
 */
#ifdef __wasm__
#include "offload.h"
#else
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#endif
#include <stdint.h>

#include "proxy_apps.h"

#define N_GRIDPOINTS 11303
#define HASH_BINS 10000
#define CHECKSUM_MOD 999983
#define FULL_LOOKUPS 17000000L

/*
 * Keeps the search's step a branch on wasm: clang folds it into two selects, and V8 compiles those
 * without a branch, so each probe waits for the previous probe's load (a cache miss in the
 * unionized grid's 6 MB). A branch lets the CPU predict and start the next load early, as the
 * AssemblyScript port's search does (x86's backend turns such a select back into a branch for the
 * native build). The empty asm emits nothing; measured on 2 workers, the C kernel went from 0.6x
 * the AssemblyScript port's lookups/s to on par with it.
 */
#ifdef __wasm__
#define SEARCH_BRANCH() __asm__ volatile("")
#else
#define SEARCH_BRANCH()
#endif

#ifdef USE_TARGET
#pragma omp declare target
#endif
/* Largest lo with A[lo * stride] <= e, searching [lo, hi]. */
static long search(const double *A, long stride, long lo, long hi, double e) {
  long length = hi - lo;
  while (length > 1) {
    long mid = lo + length / 2;
    if (A[mid * stride] > e) {
      hi = mid;
      SEARCH_BRANCH();
    } else
      lo = mid;
    length = hi - lo;
  }
  return lo;
}

/*
 * Lookup i (XSBench's event loop body): the verification value of its five macroscopic cross
 * sections. hash selects the grid: unionized (index: a row per union point) or hash (index: a row
 * per bin of n_bins over [0, 1)).
 */
static inline long xs_lookup(uint64_t i, int hash, long n_iso, long n_gp, long n_union, long n_bins,
                             const double *unionized, const int *index, const double *grid, const int *num_nucs,
                             const int *mats, const double *concs, long max_nucs) {
  uint64_t s = fast_forward(1070, 2 * i);
  double e = lcg_double(&s);
  int mat = pick_mat(lcg_double(&s));
  double m[5] = {0, 0, 0, 0, 0};
  long idx = 0;
  if (!hash) idx = search(unionized, 1, 0, n_union - 1, e);
  else idx = (long)(e / (1.0 / n_bins));
  for (int j = 0; j < num_nucs[mat]; j++) {
    long nuc = mats[mat * max_nucs + j];
    double conc = concs[mat * max_nucs + j];
    const double *g = grid + nuc * n_gp * 6;
    long k;
    if (!hash) {
      k = index[idx * n_iso + nuc];
    } else {
      long lo = index[idx * n_iso + nuc];
      long hi = idx == n_bins - 1 ? n_gp - 1 : index[(idx + 1) * n_iso + nuc] + 1;
      if (e <= g[lo * 6]) k = 0;
      else if (e >= g[hi * 6]) k = n_gp - 1;
      else k = search(g, 6, lo, hi, e);
    }
    if (k == n_gp - 1) k--;
    const double *low = g + k * 6, *high = low + 6;
    double f = (high[0] - e) / (high[0] - low[0]);
    for (int c = 0; c < 5; c++) m[c] += (high[c + 1] - f * (high[c + 1] - low[c + 1])) * conc;
  }
  return verification(m, 5, -1.0);
}

#ifdef USE_TARGET
#pragma omp end declare target
#endif

#ifdef __wasm__
/*
 * Lookups first .. first+count-1 in contiguous blocks per team; each team stores the sum of its
 * verification values at partials[team_id]. The parameters are examples/xsbench/kernels.ts's.
 * Inlined into each kernel so that `hash` is a constant there (clang otherwise shares one copy).
 */
static inline __attribute__((always_inline)) void
xs_lookups(long long first, int count, int n_iso, int n_gp, int hash, int n_bins, const double *unionized,
           const int *index, const double *grid, const int *num_nucs, const int *mats, const double *concs,
           int max_nucs, long long *partials) {
  int teams = num_teams(0), team = team_id(0);
  int block = (count + teams - 1) / teams;
  int start = team * block, end = start + block < count ? start + block : count;
  long long sum = 0;
  for (int i = start; i < end; i++)
    sum += xs_lookup((uint64_t)(first + i), hash, n_iso, n_gp, (long)n_iso * n_gp, n_bins, unionized, index, grid,
                     num_nucs, mats, concs, max_nucs);
  partials[team] = sum;
}

OFFLOAD_KERNEL void xs_lookups_unionized(long long first, int count, int n_iso, int n_gp,
                                         offload_ptr(const double) unionized, offload_ptr(const int) index,
                                         offload_ptr(const double) grid, offload_ptr(const int) num_nucs,
                                         offload_ptr(const int) mats, offload_ptr(const double) concs, int max_nucs,
                                         offload_ptr(long long) partials) {
  xs_lookups(first, count, n_iso, n_gp, 0, 1, unionized, index, grid, num_nucs, mats, concs, max_nucs, partials);
}

OFFLOAD_KERNEL void xs_lookups_hash(long long first, int count, int n_iso, int n_gp, int hash_bins,
                                    offload_ptr(const int) index, offload_ptr(const double) grid,
                                    offload_ptr(const int) num_nucs, offload_ptr(const int) mats,
                                    offload_ptr(const double) concs, int max_nucs, offload_ptr(long long) partials) {
  xs_lookups(first, count, n_iso, n_gp, 1, hash_bins, 0, index, grid, num_nucs, mats, concs, max_nucs, partials);
}
#else
static int cmp_energy(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long lookups = argc > 1 ? atol(argv[1]) : FULL_LOOKUPS;
  int hash = argc > 2 && strcmp(argv[2], "hash") == 0;
  int large = argc > 3 && strcmp(argv[3], "large") == 0;
  if (lookups < 1) {
    fprintf(stderr, "usage: %s <lookups> [unionized|hash] [small|large]\n", argv[0]);
    return 2;
  }
  const long n_iso = large ? 355 : 68, n_gp = N_GRIDPOINTS, points = n_iso * n_gp;

  /* Nuclide grids: 6 doubles per point drawn in order from seed 42, each isotope sorted by energy. */
  double *grid = malloc(sizeof(double) * 6 * points);
  uint64_t seed = 42;
  for (long i = 0; i < 6 * points; i++) grid[i] = lcg_double(&seed);
  for (long iso = 0; iso < n_iso; iso++) qsort(grid + iso * n_gp * 6, n_gp, 6 * sizeof(double), cmp_energy);

  long n_index = hash ? HASH_BINS * n_iso : points * n_iso;
  double *unionized = malloc(sizeof(double) * (hash ? 1 : points));
  int *index = malloc(sizeof(int) * n_index);
  if (!hash) {
    for (long p = 0; p < points; p++) unionized[p] = grid[p * 6];
    qsort(unionized, points, sizeof(double), cmp_energy);
    long *low = calloc(n_iso, sizeof(long));
    double *high = malloc(sizeof(double) * n_iso);
    for (long iso = 0; iso < n_iso; iso++) high[iso] = grid[(iso * n_gp + 1) * 6];
    for (long u = 0; u < points; u++) {
      for (long iso = 0; iso < n_iso; iso++) {
        if (unionized[u] >= high[iso] && low[iso] != n_gp - 2) {
          low[iso]++;
          high[iso] = grid[(iso * n_gp + low[iso] + 1) * 6];
        }
        index[u * n_iso + iso] = (int)low[iso];
      }
    }
    free(low);
    free(high);
  } else {
    double du = 1.0 / HASH_BINS;
    for (long e = 0; e < HASH_BINS; e++)
      for (long iso = 0; iso < n_iso; iso++) index[e * n_iso + iso] = (int)search(grid + iso * n_gp * 6, 6, 0, n_gp - 1, e * du);
  }

  /* Materials and concentrations (seed 1070 * 1070, row by row). */
  int num_nucs[12], max_nucs;
  int *mats = materials(large, num_nucs, &max_nucs);
  double *concs = calloc(12 * max_nucs, sizeof(double));
  seed = 1070 * 1070;
  for (int m = 0; m < 12; m++)
    for (int j = 0; j < num_nucs[m]; j++) concs[m * max_nucs + j] = lcg_double(&seed);

  long n_union = hash ? 1 : points;
  long sum = 0;
  int threads = 1;
#ifdef USE_TARGET
#pragma omp target enter data map(to: grid[0:6 * points], unionized[0:n_union], index[0:n_index], num_nucs[0:12], mats[0:12 * max_nucs], concs[0:12 * max_nucs])
#endif
  double start = omp_get_wtime();
#ifdef USE_TARGET
#pragma omp target teams distribute parallel for reduction(+ : sum) map(tofrom: threads)
#else
#pragma omp parallel for reduction(+ : sum)
#endif
  for (long i = 0; i < lookups; i++) {
    if (i == 0) threads = omp_get_num_threads();
    sum += xs_lookup((uint64_t)i, hash, n_iso, n_gp, n_union, HASH_BINS, unionized, index, grid, num_nucs, mats, concs,
                     max_nucs);
  }
  double seconds = omp_get_wtime() - start;
#ifdef USE_TARGET
#pragma omp target exit data map(release: grid[0:6 * points], unionized[0:n_union], index[0:n_index], num_nucs[0:12], mats[0:12 * max_nucs], concs[0:12 * max_nucs])
#endif
  long checksum = sum % CHECKSUM_MOD;
  long expected = lookups == FULL_LOOKUPS ? (large ? 952131 : 945990) : (!large && lookups == 1000 ? 3044 : -1);
  const char *valid = expected < 0 ? "null" : checksum == expected ? "true" : "false";
  printf("{\"app\":\"xsbench\",\"variant\":\"%s\",\"grid\":\"%s\",\"size\":\"%s\",\"lookups\":%ld,\"checksum\":%ld,\"valid\":%s,\"seconds\":%.6f,\"lookups_per_s\":%.0f,\"threads\":%d}\n",
#ifdef USE_TARGET
         "offload",
#else
         "host",
#endif
         hash ? "hash" : "unionized", large ? "large" : "small", lookups, checksum, valid, seconds, lookups / seconds, threads);
  return expected >= 0 && checksum != expected;
}
#endif
