/**
 * The host device: kernels from `wasm` images run on a pool of worker threads (worker-pool.ts),
 * shared by every context of the device. A context has a memory of its own (context-memory.ts)
 * and images of its own (context-images.ts), and places each launch inline or on the workers
 * (launch-placement.ts); this file makes the device and its contexts, and ends them.
 */
import { errors, quoted, type OffloadError } from '../../errors.js';
import { parseBytes, type Environment } from '../../units.js';
import { environment } from '../../platform.js';
import { cpuModel, hostParallelism } from './host-threads.js';
import { PAGE_BYTES, STATIC_WINDOW_END } from '../../image/wasm-abi.js';
import type {
  Allocation,
  DeviceImage,
  DeviceInfo,
  LoadedImage,
  MemoryInfo,
  MemoryKind,
  PluginDevice,
  PluginQueue,
} from '../interface.js';
import { MEMORY_KINDS } from '../interface.js';
import { ContextImages, type HostImage } from './context-images.js';
import { ContextMemory, HostAllocation } from './context-memory.js';
import { collectGarbageSoon } from './garbage.js';
import { HostQueue } from './host-queue.js';
import { inlineMode, type InlineMode } from './inline.js';
import { LaunchPlacement } from './launch-placement.js';
import type { HostDeviceOptions } from './options.js';
import { MAX_WORKERS } from './launch-ring.js';
import { MAX_TEAM_MEMORY_BYTES, MAX_TEAM_THREADS } from './team-threads.js';
import { WorkerPool } from './worker-pool.js';

/** The largest memory a wasm32 module can address, less one page (V8 refuses a full 4 GiB shared memory on some builds). */
export const MAX_HOST_MEMORY = 65535 * PAGE_BYTES;

export function defaultHostOptions(env: Environment = environment()): HostDeviceOptions {
  const threads = env.OFFLOAD_HOST_THREADS === undefined ? hostParallelism() : Number(env.OFFLOAD_HOST_THREADS);
  if (!Number.isInteger(threads) || threads < 1 || threads > MAX_WORKERS) {
    throw errors.invalidArgument(
      `OFFLOAD_HOST_THREADS must be an integer from 1 to ${MAX_WORKERS}, not ${quoted(String(env.OFFLOAD_HOST_THREADS))}`,
    );
  }
  const memoryBytes =
    env.OFFLOAD_HOST_MEMORY === undefined
      ? 1024 * 1024 * 1024
      : parseBytes(env.OFFLOAD_HOST_MEMORY, 'OFFLOAD_HOST_MEMORY');
  return { threads, memoryBytes, inline: inlineMode(env) };
}

/**
 * One context of the host device: a memory of its own, with its allocator, static ranges and
 * images; the worker pool is shared by every context (a worker holds an instance of each image
 * over its context's memory). A kernel's pointers are offsets into its context's memory, so
 * nothing it computes reaches another context's bytes.
 */
export class HostDevice implements PluginDevice {
  /** @internal The context's memory and its allocations (HostQueue reads and writes its heap). */
  readonly memory: ContextMemory;
  private readonly images: ContextImages;
  /** @internal Where the context's launches run (HostQueue places each of its launches there). */
  readonly placement: LaunchPlacement;
  private lostError: OffloadError | undefined;
  private closed = false;

  private constructor(
    readonly info: DeviceInfo,
    private readonly pool: WorkerPool,
    /**
     * True for the device's first context, which owns the pool. Its kernels are the program's
     * own (trusted to learn inline launches); later contexts are a proxy's clients.
     */
    private readonly ownsPool: boolean,
    private readonly inlineMode: InlineMode,
  ) {
    this.memory = new ContextMemory(info.memoryBytes, pool);
    this.images = new ContextImages(pool, this.memory, inlineMode, ownsPool, () => this.checkAlive());
    this.placement = new LaunchPlacement(pool, this.memory, info.computeUnits, () => this.closed);
    pool.contexts++;
  }

  census(): Record<string, number> {
    return this.pool.census();
  }

  /** The host device: its workers and its first context. */
  static create(options: HostDeviceOptions): HostDevice {
    const { threads, memoryBytes, inline } = options;
    if (!Number.isInteger(threads) || threads < 1 || threads > MAX_WORKERS) {
      throw errors.invalidArgument(`host device threads must be an integer from 1 to ${MAX_WORKERS}, not ${threads}`);
    }
    if (
      !Number.isInteger(memoryBytes) ||
      memoryBytes % PAGE_BYTES !== 0 ||
      memoryBytes <= STATIC_WINDOW_END ||
      memoryBytes > MAX_HOST_MEMORY
    ) {
      throw errors.invalidArgument(
        `host device memory must be a multiple of 64 KiB between ${STATIC_WINDOW_END + PAGE_BYTES} and ${MAX_HOST_MEMORY} bytes, not ${memoryBytes}`,
      );
    }
    const info: DeviceInfo = {
      name: `host (${threads} wasm worker${threads === 1 ? '' : 's'})`,
      kind: 'cpu',
      vendor: cpuModel(),
      plugin: 'host',
      memoryBytes: memoryBytes - STATIC_WINDOW_END,
      // A team's threads take turns on one worker, meeting at barrier() (team-threads.ts).
      maxThreadsPerTeam: MAX_TEAM_THREADS,
      maxTeams: 0x7fffffff,
      maxTeamDims: [0x7fffffff, 0x7fffffff, 0x7fffffff],
      maxThreadDims: [MAX_TEAM_THREADS, MAX_TEAM_THREADS, 64],
      maxTeamMemoryBytes: MAX_TEAM_MEMORY_BYTES,
      computeUnits: threads,
      imageFormats: ['wasm'],
      memoryKinds: [...MEMORY_KINDS],
      location: 'local',
      // With every launch inline (OFFLOAD_HOST_INLINE=always) none can be stopped at its limit.
      launchTimeouts: inline !== 'always',
      kernelPrint: true,
      hostCalls: true,
      capabilities: {
        i64: true,
        f64: true,
        traps: true,
        // With every launch inline one runs at a time, on the calling thread.
        concurrentQueues: inline !== 'always',
        atomics: true,
        // Device memory is a SharedArrayBuffer of this process: a buffer's view is its memory.
        mappedMemory: true,
        maxTeamMemoryBytes: MAX_TEAM_MEMORY_BYTES, // teamMemory(), as info.maxTeamMemoryBytes
      },
    };
    const pool = new WorkerPool(threads);
    const device = new HostDevice(info, pool, true, inline);
    pool.onLost = (error) => {
      device.lostError ??= error;
    };
    return device;
  }

  /** Another context of this device: the same workers, a memory (and images) of its own. */
  context(): HostDevice {
    this.checkAlive();
    return new HostDevice(this.info, this.pool, false, this.inlineMode);
  }

  get lost(): OffloadError | undefined {
    return this.lostError ?? this.pool.lost;
  }

  private checkAlive(): void {
    const lost = this.lost;
    if (lost) throw lost;
  }

  loadImage(image: DeviceImage): Promise<LoadedImage> {
    return this.images.load(image);
  }

  async global(image: LoadedImage, name: string): Promise<Allocation | undefined> {
    return (image as HostImage).globals.get(name);
  }

  unloadImage(image: LoadedImage): Promise<void> {
    return this.images.unload(image);
  }

  async alloc(bytes: number, kind: MemoryKind): Promise<Allocation> {
    this.checkAlive();
    return new HostAllocation(bytes, kind, this.memory.allocate(bytes));
  }

  hostView(alloc: Allocation, offset: number, bytes: number): Uint8Array {
    return this.memory.hostView(alloc, offset, bytes);
  }

  async memoryInfo(): Promise<MemoryInfo> {
    this.checkAlive();
    return this.memory.memoryInfo();
  }

  async free(alloc: Allocation): Promise<void> {
    this.checkAlive();
    this.memory.release((alloc as HostAllocation).address);
  }

  createQueue(): PluginQueue {
    return new HostQueue(this);
  }

  /**
   * Ends this context: its images are unloaded from the workers and its memory is dropped (and
   * collected); later operations reject with `reason`. The first context also stops the workers.
   */
  async close(
    reason = errors.deviceLost(this.ownsPool ? 'the host device was shut down' : 'its context was shut down'),
  ): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.pool.contexts--;
    this.pool.heldBytes -= this.memory.heldBytes;
    this.lostError ??= reason;
    if (this.ownsPool) {
      this.images.clear();
      await this.pool.close(reason);
      return;
    }
    const images = this.images.clear();
    this.memory.drop();
    if (!this.pool.lost) {
      // What still runs of this context stops now (a kernel that loops would never let the
      // workers answer the unloads); the other contexts' launches go on.
      this.pool.cancel(new Set(images.map((image) => image.id)), reason);
      await Promise.all(images.map((image) => this.pool.unload(image.id)));
    }
    collectGarbageSoon();
  }
}
