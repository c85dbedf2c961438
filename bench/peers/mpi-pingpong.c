/*
 * The physical limit of MPI on this machine, for `npm run bench -- mpi`: between ranks 0 and 1
 * of one mpirun job, the round trip of a 1-byte message and the time to send 64 MiB (in 1 MiB
 * messages, as offload-ts chunks) until the receiver acknowledges. Prints one JSON line (rank 0):
 * the write's median of REPS repetitions, as bench/remote-client.ts reports offload-ts's (the best
 * one is printed too, for reference; the suite compares medians).
 * With --huge-pages, the 64 MiB array is collapsed into 2 MiB pages first (MADV_COLLAPSE), as
 * offload-ts's MPI transport does to arrays it sends again and again: the fair baseline for that.
 * Build: mpicc -O2 mpi-pingpong.c -o mpi-pingpong; run: mpirun -np 2 ./mpi-pingpong [--huge-pages]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define ROUNDS 2000
#define BYTES (64L * 1024 * 1024)
#define CHUNK (1024 * 1024)
#define REPS 7

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char byte = 0;
  char *data = malloc(BYTES);
  memset(data, 0x5a, BYTES);
  if (argc > 1 && strcmp(argv[1], "--huge-pages") == 0) {
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t begin = ((uintptr_t)data + huge - 1) & ~(huge - 1), end = ((uintptr_t)data + BYTES) & ~(huge - 1);
    madvise((void *)begin, end - begin, MADV_HUGEPAGE);
    if (madvise((void *)begin, end - begin, MADV_COLLAPSE) != 0) perror("MADV_COLLAPSE");
  }
  for (int warm = 0; warm < 2; warm++) {
    double start = MPI_Wtime();
    for (int i = 0; i < ROUNDS; i++) {
      if (rank == 0) {
        MPI_Send(&byte, 1, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(&byte, 1, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(&byte, 1, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&byte, 1, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    }
    double rtt = (MPI_Wtime() - start) / ROUNDS;
    double times[REPS];
    for (int r = 0; r < REPS; r++) {
      start = MPI_Wtime();
      for (long off = 0; off < BYTES; off += CHUNK) {
        if (rank == 0) MPI_Send(data + off, CHUNK, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        else MPI_Recv(data + off, CHUNK, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      if (rank == 0) MPI_Recv(&byte, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      else MPI_Send(&byte, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
      times[r] = MPI_Wtime() - start;
    }
    qsort(times, REPS, sizeof(double), by_value);
    double median = times[REPS / 2];
    if (rank == 0 && warm == 1)
      printf("{\"rtt_us\":%.2f,\"write_64mib_s\":%.6f,\"write_gb_s\":%.3f,\"best_64mib_s\":%.6f}\n", rtt * 1e6, median,
             BYTES / median / 1e9, times[0]);
  }
  free(data);
  MPI_Finalize();
  return 0;
}
