/** The address form of an MPI rank: `mpi:N`. */

export function mpiAddress(rank: number): string {
  return `mpi:${rank}`;
}

/** The rank of an `mpi:N` address, or undefined for any other address. */
export function mpiRankOf(address: string): number | undefined {
  const match = /^mpi:(\d+)$/.exec(address);
  return match ? Number(match[1]) : undefined;
}
