/**
 * Launch placement on the host device: each launch runs inline (on the calling thread,
 * inline-run.ts) or is published to the workers (worker-pool.ts), as its kernel's policy says
 * (inline.ts), asked once per launch; a launch with teams of threads or team memory gets its
 * scratch memory here, released when it settles.
 */
import { errors, type OffloadError } from '../../errors.js';
import { performance } from '../../platform.js';
import type { Grid, HostCallListener, LaunchArg, PrintListener } from '../interface.js';
import { CALL_PENDING } from '../serial-queue.js';
import type { HostKernel } from './context-images.js';
import type { ContextMemory, HostAllocation } from './context-memory.js';
import type { HostCallHandler } from './host-calls.js';
import { runInline } from './inline-run.js';
import { alignScratch } from './kernel-env.js';
import { MAX_ARGS } from './launch-ring.js';
import type { TeamShape } from './launch-protocol.js';
import { MAX_STACK_BYTES, stackBytesFor } from './team-threads.js';
import type { Flight, FlightSettled, WorkerPool } from './worker-pool.js';

/** A launch's host-call handler, naming its kernel (made apart: only kernels that call the host need one). */
const hostCallOf =
  (kernel: string, listener: HostCallListener): HostCallHandler =>
  (name, values) =>
    listener(kernel, name, values);

/** A queued launch's last word: its idle queue already placed it on the workers. */
export const ON_WORKERS = 1;
/** A queued launch's last word: the policy places it in its turn. */
export const IN_TURN = 0;
/** An argument's value as a kernel takes it: a pointer is its address. */
export const argValue = (arg: LaunchArg): number | bigint =>
  arg.type === 'ptr' ? (arg.alloc as HostAllocation).address + arg.offset : arg.value;

const ON_THIS_THREAD = 'on the calling thread';

/** Where one context's launches run, and their scratch memory (HostDevice holds one per context). */
export class LaunchPlacement {
  constructor(
    private readonly pool: WorkerPool,
    private readonly memory: ContextMemory,
    /** The device's workers (DeviceInfo.computeUnits): a launch's scratch has a region for each, and one for this thread. */
    private readonly computeUnits: number,
    /** Whether the context has ended: a launch that fails after that leaves its scratch (the memory may be gone). */
    private readonly ended: () => boolean,
  ) {}

  /**
   * Whether a launch of `kernel` over `grid` runs inline (on this thread), by the
   * kernel's policy (inline.ts). Asked once per launch: the policy counts its answers.
   */
  placesInline(kernel: HostKernel, grid: Grid): boolean {
    return kernel.inline !== undefined && kernel.policy.choose(grid.teams, grid.timeoutMs);
  }

  /**
   * The values of a launch's arguments as its kernel takes them (a pointer: its
   * address), written into `into`.
   */
  argValues(args: readonly LaunchArg[], into: (number | bigint)[]): (number | bigint)[] {
    if (args.length > MAX_ARGS)
      throw errors.invalidArgument(`a kernel takes at most ${MAX_ARGS} arguments, not ${args.length}`);
    for (let i = 0; i < args.length; i++) into[i] = argValue(args[i]!);
    return into;
  }

  /**
   * Runs a launch here, on the calling thread (`inline`, decided by the policy), and
   * returns where it ran; or publishes it to the workers, returns CALL_PENDING, and tells
   * `settled` when it settles (HostQueue: its queue then goes on).
   */
  launch(
    kernel: HostKernel,
    grid: Grid,
    values: (number | bigint)[],
    inline: boolean,
    print: PrintListener | undefined,
    hostCall: HostCallListener | undefined,
    settled: FlightSettled,
  ): string | typeof CALL_PENDING {
    const shape = this.teamShape(kernel, grid);
    if (inline) {
      try {
        runInline(kernel, kernel.inline!, grid, shape, values, print, this.computeUnits);
      } finally {
        if (shape?.scratch) this.memory.release(shape.scratch);
      }
      return ON_THIS_THREAD;
    }
    try {
      this.pool.launch(
        {
          name: kernel.name,
          image: kernel.image.id,
          kernel: kernel.index,
          teams: grid.teams,
          threads: grid.threads,
          kinds: kernel.kinds,
          values,
          timeoutMs: grid.timeoutMs,
          print,
          shape,
          hostCall: hostCall && kernel.callsHost ? hostCallOf(kernel.name, hostCall) : undefined,
        },
        settled,
        kernel,
      );
    } catch (error) {
      if (shape?.scratch) this.memory.release(shape.scratch);
      throw error;
    }
    return CALL_PENDING;
  }

  /** A launch on the workers settled: its scratch memory goes back, its kernel's policy learns its time. */
  landed(flight: Flight, error: OffloadError | undefined): void {
    const kernel = flight.tag as HostKernel;
    // Settled: no worker runs a team of it any more (a withdrawn launch's workers were killed).
    if (flight.shape?.scratch && (error === undefined || !this.ended())) this.memory.release(flight.shape.scratch);
    if (error === undefined) kernel.policy.ranOnPool(flight.teams, (performance.now() - flight.submittedAt) * 1000);
  }

  /**
   * The team shape of a launch with more than one dimension, thread or byte of team memory
   * (undefined for a plain one-dimensional launch), with its scratch memory allocated: one
   * region per worker and one for this thread, each with the team memory and, for a kernel
   * with barriers, an asyncify stack per thread (team-threads.ts). Released when it settles.
   */
  private teamShape(kernel: HostKernel, grid: Grid): TeamShape | undefined {
    const { teamDims, threadDims, teamMemoryBytes } = grid;
    if (grid.threads === 1 && teamMemoryBytes === 0 && teamDims[1] === 1 && teamDims[2] === 1) return undefined;
    let stackBytes = 0;
    if (kernel.hasBarriers && grid.threads > 1) {
      const bound = kernel.barrierStackBytes;
      if (bound === undefined || bound > MAX_STACK_BYTES) {
        throw errors.unsupported(
          `kernel '${kernel.name}' cannot run teams of ${grid.threads} threads on the host device: ` +
            (bound === undefined
              ? 'on its way to barrier() it recurses or calls indirectly, so the stack its threads save there has no bound; call barrier() from code that does not recurse'
              : `its threads would save ${bound} bytes of stack at barrier(), more than ${MAX_STACK_BYTES}; keep fewer locals live across barrier()`),
        );
      }
      stackBytes = bound === 0 ? 0 : stackBytesFor(bound);
    }
    const regionBytes = alignScratch(teamMemoryBytes) + grid.threads * stackBytes;
    const scratch = regionBytes === 0 ? 0 : this.memory.allocate((this.computeUnits + 1) * regionBytes);
    return {
      teamsX: teamDims[0],
      teamsY: teamDims[1],
      threadsX: threadDims[0],
      threadsY: threadDims[1],
      scratch,
      regionBytes,
      teamMemoryBytes,
      stackBytes,
    };
  }
}
