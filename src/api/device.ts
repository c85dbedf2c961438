import { OffloadError, asOffloadError, errors } from '../errors.js';
import { formatTranslationNote } from '../image/manifest.js';
import {
  MEMORY_KINDS,
  type DeviceInfo,
  type MemoryInfo,
  type MemoryKind,
  type PluginDevice,
} from '../plugins/interface.js';
import { Buffer } from './buffer.js';
import { checkOptions, checkSize, describe } from './checks.js';
import type { RuntimeContext } from './context.js';
import { Kernel } from './kernel.js';
import type { GridSize } from './grid.js';
import {
  checkTeamMemory,
  GPU_ITEM_THREADS,
  HOST_TEAMS_PER_UNIT,
  itemDims,
  itemsGrid,
  type SuggestedGrid,
} from './items.js';
import { Library } from './library.js';
import { Queue } from './queue.js';

export interface AllocOptions {
  /**
   * 'device' (default), 'host' or 'shared'; `device.info.memoryKinds` says which are supported.
   * A 'shared' buffer is mapped memory where `info.capabilities.mappedMemory` is true: its
   * `hostView()` is the device memory itself (zero copy).
   */
  kind?: MemoryKind;
}

/** A device of the runtime: `runtime.devices[id]`. */
export class Device {
  /** @internal Devices come from `Offload.init()`. */
  constructor(
    readonly id: number,
    /** @internal */ readonly plugin: PluginDevice,
    /** @internal */ readonly context: RuntimeContext,
  ) {}

  get info(): DeviceInfo {
    return this.plugin.info;
  }

  /** @internal Rejects when the runtime is closed or the device is gone. */
  checkUsable(): void {
    this.context.checkOpen(this.id);
    const lost = this.plugin.lost;
    if (lost) throw lost.withDevice(this.id);
  }

  /** Allocates `bytes` bytes of device memory. */
  async alloc(bytes: number, options?: AllocOptions): Promise<Buffer> {
    this.checkUsable();
    checkSize(bytes, 'alloc: bytes', this.id);
    if (bytes === 0)
      throw errors.invalidArgument('alloc: bytes is 0; allocate at least 1 byte (liboffload: INVALID_SIZE)', this.id);
    const kind = checkOptions(options, 'alloc: options').kind ?? 'device';
    if (!MEMORY_KINDS.includes(kind as MemoryKind)) {
      throw errors.invalidArgument(
        `alloc: options.kind must be one of ${MEMORY_KINDS.join(', ')}, got ${describe(kind)}`,
        this.id,
      );
    }
    if (!this.info.memoryKinds.includes(kind as MemoryKind)) {
      throw errors.unsupported(
        `device ${this.id} (${this.info.name}) does not support '${kind as MemoryKind}' memory; it supports ${this.info.memoryKinds.join(', ')}`,
        this.id,
      );
    }
    const allocation = await this.plugin.alloc(bytes, kind as MemoryKind).catch((error: unknown) => {
      throw asOffloadError(error, `allocating ${bytes} bytes of '${kind as MemoryKind}' memory on device ${this.id}`, {
        device: this.id,
      });
    });
    this.context.info.alloc(this.id, kind as string, bytes, allocation.address);
    return new Buffer(this, allocation);
  }

  /** @internal Returns a freed buffer's memory to the device. */
  async release(buffer: Buffer): Promise<void> {
    if (this.plugin.lost) return; // the device is gone; so is its memory
    await this.plugin.free(buffer.allocation);
    this.context.info.free(this.id, buffer.byteLength, buffer.allocation.address);
  }

  /**
   * The teams and threads this device would run `options.items` items of `kernel` with
   * (liboffload's olCalculateOptimalOccupancy): what a `{ items }` launch of a per-item kernel
   * uses, and a grid for an explicit `{ teams, threads }` launch of a kernel written for teams.
   * On the host device 16 teams per worker of one thread, each running one contiguous block; on a
   * GPU teams of 64 threads, one item per thread, `[x, y, 1]` teams when x would pass
   * `info.maxTeamDims`. OFFLOAD_INFO prints the choice.
   * @throws OffloadError INVALID_ARGUMENT for an items count of 0, past 2^31 - 1, or team memory
   *   past `info.maxTeamMemoryBytes`.
   */
  suggestGrid(kernel: Kernel, options: { items: GridSize; teamMemoryBytes?: number }): SuggestedGrid {
    this.checkUsable();
    if (!(kernel instanceof Kernel) || kernel.device !== this)
      throw errors.invalidArgument(
        `suggestGrid: kernel must be a Kernel of device ${this.id}, got ${describe(kernel)}`,
        this.id,
      );
    const shape = checkOptions(options, 'suggestGrid: options');
    const what = `suggestGrid for '${kernel.name}': options.items`;
    const dims = itemDims(shape.items, what, this.id);
    const teamMemoryBytes = checkTeamMemory(
      shape.teamMemoryBytes,
      'suggestGrid: options.teamMemoryBytes',
      this.info,
      this.id,
    );
    const grid = itemsGrid(dims, kernel.loaded.format, this.info, what, this.id);
    this.context.info.suggestedGrid(
      this.id,
      `suggestGrid '${kernel.name}' (${kernel.loaded.format}): ${dims.join(' x ')} items${teamMemoryBytes > 0 ? `, ${teamMemoryBytes} bytes of team memory` : ''} -> teams ${Array.isArray(grid.teams) ? grid.teams.join(' x ') : grid.teams}, threads ${grid.threads} (${kernel.loaded.format === 'wasm' ? `${HOST_TEAMS_PER_UNIT} teams per compute unit, a contiguous block each` : `${GPU_ITEM_THREADS} threads a team, one item per thread`})`,
    );
    return grid;
  }

  /** The kernel `name` of `library`, loading the library's image on this device on first use. */
  async kernel(library: Library, name: string): Promise<Kernel> {
    this.checkUsable();
    if (!(library instanceof Library)) {
      throw errors.invalidArgument(
        `kernel: library must be a Library from runtime.register(), got ${describe(library)}`,
        this.id,
      );
    }
    if (library.context !== this.context) {
      throw errors.invalidArgument(`kernel: library '${library.name}' belongs to another runtime`, this.id);
    }
    if (typeof name !== 'string')
      throw errors.invalidArgument(`kernel: name must be a string, got ${describe(name)}`, this.id);
    // A kernel the build could not translate to WGSL: on a device that runs only WGSL, the build's note says why.
    const note = this.info.imageFormats.includes('wasm')
      ? undefined
      : library.record.bundle.manifest.notes?.find((candidate) => candidate.kernel === name);
    const untranslated = (cause?: unknown): OffloadError =>
      errors.incompatibleImage(
        `kernel '${name}' of library '${library.name}' has no image device ${this.id} can run (it runs [${this.info.imageFormats.join(', ')}]): ${formatTranslationNote(note!)}`,
        this.id,
        cause,
      );
    let image;
    try {
      image = await this.context.registry.image(library.record, this.plugin, this.id);
    } catch (error) {
      if (note !== undefined && error instanceof OffloadError && error.code === 'INCOMPATIBLE_IMAGE')
        throw untranslated(error);
      throw error;
    }
    const loaded = image.kernels.get(name);
    if (!loaded && note !== undefined) throw untranslated();
    if (!loaded) {
      const known = [...image.kernels.keys()].join(', ') || 'none';
      throw errors.notFound(`library '${library.name}' has no kernel '${name}' (it has: ${known})`, this.id);
    }
    return new Kernel(this, library, loaded);
  }

  /**
   * How much memory this runtime could allocate on the device now (olGetDeviceInfo
   * FREE_MEMORY, cudaMemGetInfo): `totalBytes` in all, `freeBytes` free, and
   * `largestFreeBlockBytes`, the largest one `alloc` that fits. On a remote device, within this
   * client's memory quota on the proxy. A snapshot: other queues, contexts or clients change it.
   */
  async memoryInfo(): Promise<MemoryInfo> {
    this.checkUsable();
    try {
      return await this.plugin.memoryInfo();
    } catch (error) {
      throw asOffloadError(error, `reading the memory of device ${this.id}`, { device: this.id });
    }
  }

  /** A new in-order queue on this device. Queues run concurrently with each other. */
  queue(): Queue {
    this.checkUsable();
    return new Queue(this);
  }
}
