/*
 * The offload-ts device library for kernels in C and C++ (`offload build kernels.c`). The build
 * puts this header on the include path: `#include "offload.h"`.
 *
 * A kernel is a function marked OFFLOAD_KERNEL that returns void and takes scalars (int, unsigned,
 * long long, float, double, ...) and pointers into device memory (a `float *`, or
 * `offload_ptr(float)`, which says the same): a launch's Buffer arguments arrive as pointers.
 * Kernels have no heap (no malloc, calloc, realloc, free, new) and no C library; their locals
 * stay in wasm locals (an array or a local whose address is taken needs a stack, which a device
 * does not give: keep such data in device memory, or in team_memory()). Globals are device
 * memory: one copy per device, as a GPU's, and an initialised one is static data (at most 960 KiB
 * for an image).
 *
 * Each function below is an import (module "offload") that the device answers for the
 * invocation running: the values are constant during one kernel call. `d` picks the dimension
 * of the grid (0 = x, 1 = y, 2 = z).
 */
#ifndef OFFLOAD_H
#define OFFLOAD_H

#ifdef __cplusplus
#define OFFLOAD_EXTERN_C extern "C"
#else
#define OFFLOAD_EXTERN_C
#endif

#define OFFLOAD_IMPORT(name) OFFLOAD_EXTERN_C __attribute__((import_module("offload"), import_name(#name)))

/* Marks a kernel: `OFFLOAD_KERNEL void saxpy(int n, float a, offload_ptr(float) x, float *y)`. */
#define OFFLOAD_KERNEL OFFLOAD_EXTERN_C __attribute__((used, visibility("default")))

/* A device pointer parameter (a Buffer at launch): the same as `T *`, for readers. */
#define offload_ptr(T) T *

/* Index of this invocation's team along dimension d, in [0, num_teams(d)). */
OFFLOAD_IMPORT(team_id) int team_id(int d);
/* Number of teams of the launch along dimension d (at least 1). */
OFFLOAD_IMPORT(num_teams) int num_teams(int d);
/* Index of this invocation's thread in its team along dimension d, in [0, num_threads(d)). */
OFFLOAD_IMPORT(thread_id) int thread_id(int d);
/* Number of threads per team along dimension d (at least 1). */
OFFLOAD_IMPORT(num_threads) int num_threads(int d);
/*
 * Waits until every thread of this team has reached this barrier (as CUDA's __syncthreads). On
 * the host device a kernel that calls it is built with binaryen's asyncify, as an AssemblyScript
 * kernel is.
 */
OFFLOAD_IMPORT(barrier) void barrier(void);
/* Address of this team's team memory (the launch's teamMemoryBytes), shared by its threads. */
OFFLOAD_IMPORT(team_memory) void *team_memory(void);

OFFLOAD_IMPORT(print) void offload_print_(const __CHAR16_TYPE__ *message, int n, double a0, double a1, double a2,
                                          double a3, double a4);

/*
 * print("i, x:", i, x): prints a string literal and up to five numbers on the launching
 * program's stderr (as the AssemblyScript library's print). The literal is kept as static data
 * in the layout the device reads (UTF-16 after its byte length).
 */
#define print(message, ...)                                                                            \
  do {                                                                                                 \
    static const struct {                                                                              \
      unsigned int bytes;                                                                              \
      __CHAR16_TYPE__ text[sizeof(u"" message) / 2];                                                   \
    } __attribute__((aligned(4))) offload_message_ = {sizeof(u"" message) - 2, u"" message};          \
    const double offload_values_[6] = {0, ##__VA_ARGS__};                                              \
    offload_print_(offload_message_.text, (int)(sizeof((double[]){0, ##__VA_ARGS__}) / sizeof(double)) - 1, \
                   offload_values_[1], offload_values_[2], offload_values_[3], offload_values_[4],     \
                   offload_values_[5]);                                                                \
  } while (0)

#endif
