/**
 * The native MPI addon (native/mpi, built by `npm run build:mpi`), loaded on first use: every
 * MPI call of the transport goes through it.
 */
import { createRequire } from 'node:module';

export interface MpiAddon {
  /** progressThread: whether MPI allows the progress thread (MPI_THREAD_SERIALIZED or better). */
  init(): { rank: number; size: number; threadLevel: number; tagUpperBound: number; progressThread: boolean };
  isend(dest: number, tag: number, data: Uint8Array): number;
  send(dest: number, tag: number, data: Uint8Array): void;
  /** Ids of the sends completed since the last call. */
  completed(): number[];
  /** [source, tag, bytes] of the next message that has arrived (the same one until it is received), or null. */
  probe(): [number, number, number] | null;
  /** Receives the probed message into `into` (exactly its length) or a fresh array; returns where the bytes are. */
  receive(into?: Uint8Array): Uint8Array;
  /**
   * Collapses the 2 MiB blocks of `data`'s buffer that this send touches into huge pages when
   * the same bytes are sent a third time (see offload_mpi.c); returns how many this call collapsed.
   */
  adviseHugePages(data: Uint8Array): number;
  abort(code: number): void;
  /** MPI_Finalize; `withoutFence` skips Open MPI's closing barrier over every rank (a rank is gone). Stops the progress thread first. */
  finalize(withoutFence: boolean): void;
  /** Starts the progress thread (once, after init); `wake` runs on the event loop, once per awaitProgress. */
  startProgress(wake: () => void): void;
  /**
   * Arms the progress thread: it watches MPI and calls `wake` once a message has arrived or a
   * send completed. `hold` keeps the process alive meanwhile.
   */
  awaitProgress(hold: boolean): void;
  /** Disarms the progress thread (the hub polls by itself again); a wake already sent still comes. */
  disarmProgress(): void;
  /** How often the progress thread has woken the event loop. */
  progressWakes(): number;
}

let addon: MpiAddon | undefined;
let addonError: string | undefined;

/** The native addon, or undefined (with `mpiUnavailable()` saying why) when it was not built. */
export function loadMpiAddon(): MpiAddon | undefined {
  if (addon || addonError) return addon;
  try {
    addon = createRequire(import.meta.url)('../../../native/mpi/build/Release/offload_mpi.node') as MpiAddon;
  } catch (error) {
    addonError = `the MPI addon is not built (${(error as Error).message.split('\n')[0]}); install OpenMPI (Debian: openmpi-bin libopenmpi-dev), then build it: 'npm rebuild offload-ts' in a project that installed the package (its install script builds it, and npm skips that under --ignore-scripts or a script policy), 'npm run build:mpi' in a checkout`;
  }
  return addon;
}

export function mpiUnavailable(): string | undefined {
  loadMpiAddon();
  return addonError;
}
