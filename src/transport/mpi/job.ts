/**
 * The ranks of an `mpirun` job as proxies and clients: their addresses (`mpi:N`), the job's
 * default token, discovering the proxy ranks, and opening a channel to one.
 */
import { errors } from '../../errors.js';
import type { Transport } from '../transport.js';
import { mpiUnavailable } from './addon.js';
import { MpiHub } from './hub.js';
import { mpiAddress, mpiRankOf } from './address.js';

/** The token of an MPI job's proxies when OFFLOAD_TOKEN is not set: only the job's ranks reach them. */
export const MPI_DEFAULT_TOKEN = 'offload-mpi-job';

/** Whether this process is a rank of an MPI job (started by mpirun). */
export function inMpiJob(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.OMPI_COMM_WORLD_SIZE !== undefined || env.PMIX_RANK !== undefined || env.PMI_RANK !== undefined;
}

/** Opens a transport to `mpi:N` from an application rank. */
export function connectMpi(address: string): Transport {
  const rank = mpiRankOf(address);
  if (rank === undefined) throw errors.invalidArgument(`'${address}' is not an MPI address (mpi:<rank>)`);
  // A proxy rank reuses its own hub (proxy-to-proxy links); anyone else becomes an application.
  return MpiHub.current()?.connect(rank) ?? MpiHub.get('app').connect(rank);
}

/**
 * Under mpirun, the job's proxy ranks as addresses (once every rank said what it is), or none
 * outside a job or without the addon.
 */
export async function jobProxies(): Promise<string[]> {
  if (!inMpiJob() || mpiUnavailable() !== undefined) return [];
  return (await MpiHub.get('app').proxies()).map(mpiAddress);
}

/** A proxy rank serving the job's application ranks (see serveJob). */
export interface JobListener {
  /** This rank's address, `mpi:N`. */
  readonly address: string;
  /** Resolves once every application rank of the job has left. */
  readonly finished: Promise<void>;
  /** Leaves the job (MPI is finalized): the last thing the proxy does. */
  close(): void;
}

/** As a proxy rank: each application channel becomes a Transport handed to `accept`. */
export function serveJob(accept: (transport: Transport) => void): JobListener {
  const unavailable = mpiUnavailable();
  if (unavailable) throw errors.unsupported(`serving MPI ranks: ${unavailable}`);
  if (!inMpiJob()) throw errors.unsupported('serving MPI ranks: not an MPI rank (start it with mpirun)');
  const hub = MpiHub.get('proxy');
  const finished = new Promise<void>((resolve) => hub.serve(accept, resolve));
  return { address: mpiAddress(hub.rank), finished, close: () => hub.finalize() };
}
