/**
 * The host device: kernels from `wasm` images run on a pool of worker threads, all sharing one
 * `WebAssembly.Memory`; a device pointer is a byte offset into that memory.
 */
import { errors, quoted, type OffloadError } from '../../errors.js';
import { parseBytes, type Environment } from '../../units.js';
import { environment, performance } from '../../platform.js';
import { cpuModel, hostParallelism } from './host-threads.js';
import { dropped } from '../../runtime/debug.js';
import {
  exportedAddresses,
  readWasmModuleInfo,
  type DataSegment,
  type WasmModuleInfo,
} from '../../build/wasm-module-info.js';
import {
  BARRIER_IMPORT,
  DEVICE_IMPORTS,
  DEVICE_IMPORT_MODULE,
  ENV_IMPORTS,
  PAGE_BYTES,
  STATIC_WINDOW_END,
  STATIC_WINDOW_START,
} from '../../image/wasm-abi.js';
import type {
  Allocation,
  DeviceImage,
  DeviceInfo,
  Grid,
  LaunchArg,
  LoadedImage,
  LoadedKernel,
  MemoryInfo,
  MemoryKind,
  PluginDevice,
  PluginQueue,
} from '../interface.js';
import { type HostCallListener, MEMORY_KINDS, type PrintListener } from '../interface.js';
import { CALL_PENDING } from '../serial-queue.js';
import { DeviceAllocator } from './allocator.js';
import { collectGarbageSoon } from './garbage.js';
import { HostQueue } from './host-queue.js';
import { readCodeShapes, type CodeShape } from '../../build/wasm-code-shape.js';
import { InlinePolicy, inlineMode, type InlineMode } from './inline.js';
import type { HostDeviceOptions } from './options.js';
import { alignScratch, type GridWords, trapText, KernelEnvironment } from './kernel-env.js';
import type { TeamShape } from './launch-protocol.js';
import {
  asyncifyOf,
  MAX_TEAM_MEMORY_BYTES,
  MAX_TEAM_THREADS,
  runTeamThreads,
  MAX_STACK_BYTES,
  stackBytesFor,
  type Asyncify,
} from './team-threads.js';
import { droppedLine } from './kernel-print.js';
import { ARG_KIND, type ArgKind, fitErrorText, MAX_ARGS, MAX_WORKERS, PRINT_BYTES } from './launch-ring.js';
import { type Flight, type FlightSettled, WorkerPool } from './worker-pool.js';
import type { HostCallHandler } from './host-calls.js';

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

/** A launch's host-call handler, naming its kernel (made apart: only kernels that call the host need one). */
const hostCallOf =
  (kernel: string, listener: HostCallListener): HostCallHandler =>
  (name, values) =>
    listener(kernel, name, values);

/** A team's call of `fn`, for runTeamThreads (made apart: a closure in runInline would cost every inline launch its context). */
const teamThreadsRun =
  (fn: KernelFunction, values: unknown[]): (() => unknown) =>
  () =>
    fn(...values);

/** An argument's value as a kernel takes it: a pointer is its address. */
/** A queued launch's last word: its idle queue already placed it on the workers. */
export const ON_WORKERS = 1;
/** A queued launch's last word: the policy places it in its turn. */
export const IN_TURN = 0;
export const argValue = (arg: LaunchArg): number | bigint =>
  arg.type === 'ptr' ? (arg.alloc as HostAllocation).address + arg.offset : arg.value;

export class HostAllocation implements Allocation {
  constructor(
    readonly bytes: number,
    readonly kind: MemoryKind,
    readonly address: number,
  ) {}
}

type KernelFunction = (...args: unknown[]) => unknown;

export class HostKernel implements LoadedKernel {
  readonly format = 'wasm';
  /** The kernel instantiated on this (the calling) thread, for inline launches; none with OFFLOAD_HOST_INLINE=never. */
  inline: KernelFunction | undefined;
  /** That instance's asyncify exports, when the kernel's module has barriers. */
  inlineAsyncify: Asyncify | undefined;
  /** Whether its module was built with barriers (asyncify): its threads need stacks. */
  hasBarriers = false;
  /** The most stack a thread of it saves at a barrier (read from its code); undefined: no bound. */
  barrierStackBytes: number | undefined = 0;
  /** Whether its module calls host functions: it never runs inline (a call waits for this thread). */
  callsHost = false;
  /**
   * Its inline launches' argument values, reused: an inline run ends before anything can launch
   * again (a print listener runs after the kernel has), so one array serves them all.
   */
  readonly inlineValues: (number | bigint)[];
  constructor(
    readonly name: string,
    readonly params: LoadedKernel['params'],
    readonly image: HostImage,
    readonly index: number,
    readonly kinds: readonly ArgKind[],
    readonly policy: InlinePolicy,
  ) {
    this.inlineValues = params.map(() => 0);
  }

  get staticBytes(): number {
    const range = this.image.staticRange;
    return range ? range.end - range.start : 0;
  }
}

/** A static data range of loaded images, shared by byte-identical images. */
interface StaticRange {
  start: number;
  end: number;
  /** The first image's bytes: an image with the same bytes shares the range (compared, not hashed: a page has no synchronous hash). */
  bytes: Uint8Array;
  owner: string;
  users: number;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

class HostImage implements LoadedImage {
  readonly kernels = new Map<string, HostKernel>();
  /** Its device globals: module-level data in its static range, by name. */
  readonly globals = new Map<string, HostAllocation>();
  constructor(
    readonly id: number,
    readonly name: string,
    readonly staticRange: StaticRange | undefined,
  ) {}
}

/** Where an image's active data segments write: [start, end) of device memory. */
interface StaticSpan {
  start: number;
  end: number;
}

const hex = (n: number) => `0x${n.toString(16)}`;

/** The facts the device checks, read from the image's module (`shown` names the image). */
function moduleInfoOf(image: DeviceImage, shown: string): WasmModuleInfo {
  try {
    return readWasmModuleInfo(image.bytes);
  } catch (error) {
    // E.g. a data segment whose address is not a constant: its range could not be reserved.
    const reason = error instanceof Error ? error.message : String(error);
    throw errors.incompatibleImage(
      `image of ${shown} cannot be loaded: ${reason}; rebuild it with 'offload build'`,
      undefined,
      error,
    );
  }
}

/**
 * The range the module's active data segments write on every instantiation (on each worker,
 * and again on a worker that replaces a dead one), or undefined when they write nothing. Each
 * segment must lie wholly inside the static window: anywhere else it would overwrite buffers of
 * this context, or null page bytes.
 */
function staticSpanOf(segments: readonly DataSegment[], shown: string): StaticSpan | undefined {
  let span: StaticSpan | undefined;
  for (const { offset, size } of segments) {
    if (size === 0) continue; // writes nothing
    const end = offset + size;
    if (offset < STATIC_WINDOW_START || end > STATIC_WINDOW_END) {
      throw errors.incompatibleImage(
        `image of ${shown} has static data at [${hex(offset)}, ${hex(end)}), outside the static window ` +
          `[${hex(STATIC_WINDOW_START)}, ${hex(STATIC_WINDOW_END)}) of device memory; rebuild it with 'offload build' ` +
          `(and a --static-base inside the window, if given)`,
      );
    }
    span =
      span === undefined
        ? { start: offset, end }
        : { start: Math.min(span.start, offset), end: Math.max(span.end, end) };
  }
  return span;
}

/** What a kernel's code can do (for inline launches); an image this reader cannot follow runs on the workers only. */
function codeShapesOf(bytes: Uint8Array, info: WasmModuleInfo, kernels: readonly string[]): Map<string, CodeShape> {
  try {
    return readCodeShapes(bytes, kernels, info);
  } catch (error) {
    dropped('host device', "reading its kernels' code (they run on the workers only)")(error);
    return new Map(
      kernels.map((name) => [
        name,
        { bounded: false, synchronizes: true, codeBytes: 0, callsHost: true, barrierStackBytes: undefined },
      ]),
    );
  }
}

const ON_THIS_THREAD = 'on the calling thread';

/**
 * Zeroes [start, end) of `heap`, a view of shared memory. Uint8Array.fill on shared memory runs
 * byte by byte (35 ms for 128 MiB on a 2-vCPU VM); 8-byte words fill it 7x faster.
 */
function zero(heap: Uint8Array, start: number, end: number): void {
  const first = Math.min(end, Math.ceil(start / 8) * 8); // addresses reach 4 GiB: no 32-bit bit operations
  const last = Math.max(first, Math.floor(end / 8) * 8);
  heap.fill(0, start, first);
  if (last > first) new BigInt64Array(heap.buffer, heap.byteOffset + first, (last - first) / 8).fill(0n);
  heap.fill(0, last, end);
}

/**
 * Drops the image's instance on this thread: a Kernel handle the program still holds must not
 * keep the instance, and with it the context's memory, alive; its later launches go to the
 * workers, which refuse them as unloaded.
 */
function dropInline(image: HostImage): void {
  for (const kernel of image.kernels.values()) {
    kernel.inline = undefined;
    kernel.inlineAsyncify = undefined;
  }
}

/** The grid and imports of every inline kernel: this thread runs one team at a time. */
const inlineEnv = new KernelEnvironment();

/**
 * The print() lines of the inline launch running on this thread (one at a time: a kernel cannot
 * launch), kept within a worker slot's budget and delivered when it ends; reused across launches.
 */
class InlinePrints {
  private readonly lines: { team: number; text: string }[] = [];
  private bytes = 0;
  private dropped = 0;

  readonly add = (team: number, text: string): void => {
    this.bytes += 8 + text.length;
    if (this.bytes > PRINT_BYTES) this.dropped++;
    else this.lines.push({ team, text });
  };

  /** Hands the lines to `print` (if any) and forgets them. */
  deliver(kernel: string, print: PrintListener | undefined): void {
    if (print) {
      for (const { team, text } of this.lines) print(kernel, team, text);
      if (this.dropped > 0) print(kernel, -1, droppedLine(this.dropped));
    }
    // Only when there were lines: setting an array's length is a call into V8's runtime.
    if (this.lines.length !== 0) this.lines.length = 0;
    this.bytes = 0;
    this.dropped = 0;
  }
}

const inlinePrints = new InlinePrints();
/** The grid of the inline launch running now (KernelEnvironment.setGrid), reused. */
const inlineGrid: GridWords = [1, 1, 1, 1, 1, 1, 0, 0, 0];
inlineEnv.onPrint = inlinePrints.add;

const allowedImports = new Set([
  ...ENV_IMPORTS.map((name) => `env.${name}`),
  ...DEVICE_IMPORTS.map((name) => `${DEVICE_IMPORT_MODULE}.${name}`),
]);

/**
 * One context of the host device: a memory of its own, with its allocator, static ranges and
 * images; the worker pool is shared by every context (a worker holds an instance of each image
 * over its context's memory). A kernel's pointers are offsets into its context's memory, so
 * nothing it computes reaches another context's bytes.
 */
export class HostDevice implements PluginDevice {
  /** The context's memory, dropped when the context ends (so that it can be collected). */
  private memory: WebAssembly.Memory | undefined;
  /**
   * A view of the context's memory as far as it has grown (empty once the context ended). The
   * memory grows with allocation (see allocate), and a view taken before stays valid for the
   * bytes it covered: a shared memory is never detached.
   */
  heap: Uint8Array;
  private readonly allocator: DeviceAllocator;
  private readonly images = new Map<number, HostImage>();
  private readonly staticRanges: StaticRange[] = [];
  private lostError: OffloadError | undefined;
  private closed = false;
  /** The end of the highest block this context has allocated: its share of WorkerPool.heldBytes. */
  private highWater = STATIC_WINDOW_END;

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
    const pages = (info.memoryBytes + STATIC_WINDOW_END) / PAGE_BYTES;
    // The memory starts at the static window and grows only as far as the context allocates: a
    // kernel's access past that traps, so a context can touch (commit) no more than it holds.
    // A memory of the device's full size would let a kernel of a 64-byte buffer commit all of it,
    // in every context.
    this.memory = new WebAssembly.Memory({ initial: STATIC_WINDOW_END / PAGE_BYTES, maximum: pages, shared: true });
    this.heap = new Uint8Array(this.memory.buffer);
    this.allocator = new DeviceAllocator({ start: STATIC_WINDOW_END, end: pages * PAGE_BYTES, alignment: 64 });
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

  /**
   * Loads a wasm image on every worker. The image is untrusted (a proxy loads what its clients
   * send): what the device relies on (the static data range, no start function, the imports,
   * the memory it needs) is read from the module itself, never from the manifest.
   */
  async loadImage(image: DeviceImage): Promise<LoadedImage> {
    this.checkAlive();
    const shown = quoted(image.name);
    if (image.info.format !== 'wasm') {
      throw errors.unsupported(
        `the host device runs wasm images, not ${quoted(image.info.format)} (image of ${shown})`,
      );
    }
    let module: WebAssembly.Module;
    try {
      module = await WebAssembly.compile(image.bytes as Uint8Array<ArrayBuffer>);
    } catch (error) {
      throw errors.incompatibleImage(
        `image of ${shown} is not a valid wasm module: ${(error as Error).message}`,
        undefined,
        error,
      );
    }
    this.checkAlive(); // the context may have ended while the module compiled
    for (const imp of WebAssembly.Module.imports(module)) {
      if (!allowedImports.has(`${imp.module}.${imp.name}`)) {
        throw errors.incompatibleImage(
          `image of ${shown} imports ${quoted(`${imp.module}.${imp.name}`)}, which the host device does not provide (it provides ${[...allowedImports].join(', ')})`,
        );
      }
    }
    const info = moduleInfoOf(image, shown);
    if (info.hasStart) {
      // It would run on every worker at instantiation, before any launch could time it out: a
      // loop there would hang the device for every context.
      throw errors.incompatibleImage(
        `image of ${shown} has a start function (code that runs when the image loads, on every worker); ` +
          `kernels may only run in launches: rebuild it with 'offload build', which refuses top-level code`,
      );
    }
    const minPages = info.imports.find((imp) => imp.kind === 'memory')?.memory?.minimum ?? 0;
    if (minPages * PAGE_BYTES > STATIC_WINDOW_END) {
      // The memory holds only the static window until buffers are allocated; an image's data
      // lies inside that window, so needing more is a module not built by 'offload build'.
      throw errors.incompatibleImage(
        `image of ${shown} needs ${minPages} pages of memory before any buffer is allocated; ` +
          `the device gives an image ${STATIC_WINDOW_END / PAGE_BYTES} (its static window): rebuild it with 'offload build'`,
      );
    }
    const staticRange = this.reserveStatic(image, shown, staticSpanOf(info.dataSegments, shown));
    const id = this.pool.imageId();
    const hostImage = new HostImage(id, image.name, staticRange);
    const kernels = image.entries.filter((entry) => entry.kind === 'kernel');
    const shapes = codeShapesOf(
      image.bytes,
      info,
      kernels.map((entry) => entry.name),
    );
    const imports = (name: string) =>
      info.imports.some((imp) => imp.module === DEVICE_IMPORT_MODULE && imp.name === name);
    const hasBarriers = imports(BARRIER_IMPORT);
    kernels.forEach((entry, index) => {
      const kinds = entry.params.map((param) => ARG_KIND[param.type]);
      const policy = new InlinePolicy(this.inlineMode, shapes.get(entry.name)!, this.ownsPool);
      const kernel = new HostKernel(entry.name, entry.params, hostImage, index, kinds, policy);
      kernel.hasBarriers = hasBarriers;
      kernel.callsHost = shapes.get(entry.name)!.callsHost;
      kernel.barrierStackBytes = shapes.get(entry.name)!.barrierStackBytes;
      hostImage.kernels.set(entry.name, kernel);
    });
    // Registered before the workers answer, so that a concurrent load sees the static range.
    this.images.set(id, hostImage);
    const kernelList = [...hostImage.kernels.values()].map(({ name, kinds }) => ({ name, kinds: [...kinds] }));
    const replies = await this.pool.load(id, module, this.memory!, kernelList);
    const failed = replies.find((reply) => reply.type === 'load-failed');
    if (failed?.type === 'load-failed' || replies.length === 0) {
      await this.unloadImage(hostImage);
      this.checkAlive();
      throw errors.incompatibleImage(
        `image of ${shown} failed to instantiate: ${failed?.type === 'load-failed' ? failed.message : 'no reply'}`,
      );
    }
    try {
      this.findGlobals(image, info, hostImage, shown);
    } catch (error) {
      await this.unloadImage(hostImage);
      throw error;
    }
    if (this.inlineMode !== 'never' && this.memory) {
      // The same module over the same memory, on this thread (its data segments write what the
      // workers' instances wrote: the bytes of this image's own static range).
      const instance = new WebAssembly.Instance(module, inlineEnv.imports(this.memory));
      const asyncify = asyncifyOf(instance);
      for (const kernel of hostImage.kernels.values()) {
        // A host call waits for this very thread: such a kernel runs on the workers only.
        if (kernel.callsHost) continue;
        kernel.inline = instance.exports[kernel.name] as KernelFunction;
        kernel.inlineAsyncify = asyncify;
      }
    }
    return hostImage;
  }

  /**
   * The image's device globals (entries of kind 'global'): each an exported constant of the
   * module holding the address of module-level data, whose length AssemblyScript's object
   * header keeps just before it. The image is untrusted: the address and the length must lie
   * inside its own static range, read from the module and from device memory (where its data
   * segments were just written), never from the manifest.
   */
  private findGlobals(image: DeviceImage, info: WasmModuleInfo, hostImage: HostImage, shown: string): void {
    const wanted = image.entries.filter((entry) => entry.kind === 'global');
    if (wanted.length === 0) return;
    const addresses = exportedAddresses(info);
    const range = hostImage.staticRange;
    const view = new DataView(this.heap.buffer, this.heap.byteOffset, this.heap.byteLength);
    for (const { name } of wanted) {
      const address = addresses.get(name);
      const header = address === undefined ? undefined : address - 4;
      const bytes =
        header === undefined || !range || header < range.start || address! > range.end
          ? undefined
          : view.getUint32(header, true);
      if (address === undefined || bytes === undefined || address + bytes > range!.end) {
        throw errors.incompatibleImage(
          `image of ${shown} lists global ${quoted(name)}, which is not module-level data of its own static range ` +
            `(an exported constant whose data lies inside it); rebuild it with 'offload build'`,
        );
      }
      hostImage.globals.set(name, new HostAllocation(bytes, 'device', address));
    }
  }

  async global(image: LoadedImage, name: string): Promise<Allocation | undefined> {
    return (image as HostImage).globals.get(name);
  }

  /**
   * Reserves the image's static data range `span` (read from its module: the manifest's
   * staticBase/staticSize are not trusted). Byte-identical images (the same bundle registered
   * twice) share one range, counted; any other overlap is refused, since AssemblyScript images
   * cannot be relocated (see wasm-abi.ts).
   */
  private reserveStatic(image: DeviceImage, shown: string, span: StaticSpan | undefined): StaticRange | undefined {
    if (span === undefined) return undefined;
    const { start, end } = span;
    for (const range of this.staticRanges) {
      if (start >= range.end || range.start >= end) continue;
      if (range.start === start && range.end === end && sameBytes(range.bytes, image.bytes)) {
        range.users++;
        return range;
      }
      throw errors.incompatibleImage(
        `image of ${shown} keeps static data at [${hex(start)}, ${hex(end)}), ` +
          `which overlaps image ${quoted(range.owner)} loaded on this device; rebuild one of them with another --static-base`,
      );
    }
    const range: StaticRange = { start, end, bytes: image.bytes, owner: image.name, users: 1 };
    this.staticRanges.push(range);
    return range;
  }

  private releaseStatic(image: HostImage): void {
    const range = image.staticRange;
    if (!range || --range.users > 0) return;
    this.staticRanges.splice(this.staticRanges.indexOf(range), 1);
    // Zero the range so the next image that uses it starts from clean memory.
    zero(this.heap, range.start, range.end);
  }

  async unloadImage(image: LoadedImage): Promise<void> {
    const hostImage = image as HostImage;
    if (!this.images.has(hostImage.id)) return;
    this.images.delete(hostImage.id);
    dropInline(hostImage);
    if (!this.pool.lost) await this.pool.unload(hostImage.id);
    this.releaseStatic(hostImage);
  }

  async alloc(bytes: number, kind: MemoryKind): Promise<Allocation> {
    this.checkAlive();
    return new HostAllocation(bytes, kind, this.allocate(bytes));
  }

  /** `bytes` of this context's memory, within what its contexts together may hold. */
  private allocate(bytes: number): number {
    const address = this.allocator.alloc(bytes);
    const end = address + this.allocator.sizeOf(address)!;
    if (end > this.highWater) {
      // Every context has a memory of the device's full size, committed as it is touched; the
      // contexts together may hold no more than one device's worth (see WorkerPool.heldBytes).
      const growth = end - this.highWater;
      if (this.pool.heldBytes + growth > this.info.memoryBytes) {
        this.allocator.free(address);
        throw errors.outOfMemory(
          `cannot allocate ${bytes} bytes: the host device's ${this.info.memoryBytes} bytes are held by its ` +
            `${this.pool.contexts} contexts (${this.pool.heldBytes} bytes; a context holds memory up to the highest address it ` +
            'has allocated, until it ends)',
        );
      }
      this.pool.heldBytes += growth;
      this.highWater = end;
      this.grow(end);
    }
    return address;
  }

  /** Grows the memory to cover `end` (a page multiple past it); running kernels see it at once. */
  private grow(end: number): void {
    const memory = this.memory;
    if (!memory) return;
    const pages = Math.ceil(end / PAGE_BYTES) - memory.buffer.byteLength / PAGE_BYTES;
    if (pages <= 0) return;
    memory.grow(pages);
    this.heap = new Uint8Array(memory.buffer);
  }

  hostView(alloc: Allocation, offset: number, bytes: number): Uint8Array {
    // The heap would hand out any range (other allocations', or a short view past its end): the
    // callers check, and a range outside the allocation is refused here too.
    if (!(offset >= 0 && bytes >= 0 && offset + bytes <= alloc.bytes))
      throw errors.outOfBounds(
        `a view of ${bytes} bytes at offset ${offset} does not lie inside its allocation of ${alloc.bytes} bytes`,
      );
    const start = (alloc as HostAllocation).address + offset;
    return this.heap.subarray(start, start + bytes);
  }

  /**
   * This context's free bytes: those free below its high-water mark, plus what the device's
   * contexts together have not yet taken (see alloc). The largest block is the allocator's,
   * within that.
   */
  async memoryInfo(): Promise<MemoryInfo> {
    this.checkAlive();
    const total = this.info.memoryBytes;
    const heldHere = this.highWater - STATIC_WINDOW_END;
    const freeBytes = Math.max(0, heldHere - this.allocator.usedBytes) + Math.max(0, total - this.pool.heldBytes);
    return {
      totalBytes: total,
      freeBytes,
      largestFreeBlockBytes: Math.min(this.allocator.largestFreeBlock, freeBytes),
    };
  }

  async free(alloc: Allocation): Promise<void> {
    this.checkAlive();
    this.release((alloc as HostAllocation).address);
  }

  private release(address: number): void {
    const size = this.allocator.free(address);
    // Zeroed before it is handed out again: a new buffer never shows what the last one held.
    // (Zeroing at free touches only pages that were used; zeroing at alloc would commit fresh ones.)
    zero(this.heap, address, address + size);
  }

  createQueue(): PluginQueue {
    return new HostQueue(this);
  }

  /**
   * @internal Whether a launch of `kernel` over `grid` runs inline (on this thread), by the
   * kernel's policy (inline.ts). Asked once per launch: the policy counts its answers.
   */
  placesInline(kernel: HostKernel, grid: Grid): boolean {
    return kernel.inline !== undefined && kernel.policy.choose(grid.teams, grid.timeoutMs);
  }

  /**
   * @internal The values of a launch's arguments as its kernel takes them (a pointer: its
   * address), written into `into`.
   */
  argValues(args: readonly LaunchArg[], into: (number | bigint)[]): (number | bigint)[] {
    if (args.length > MAX_ARGS)
      throw errors.invalidArgument(`a kernel takes at most ${MAX_ARGS} arguments, not ${args.length}`);
    for (let i = 0; i < args.length; i++) into[i] = argValue(args[i]!);
    return into;
  }

  /**
   * @internal Runs a launch here, on the calling thread (`inline`, decided by the policy), and
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
        this.runInline(kernel, kernel.inline!, grid, shape, values, print);
      } finally {
        if (shape?.scratch) this.release(shape.scratch);
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
      if (shape?.scratch) this.release(shape.scratch);
      throw error;
    }
    return CALL_PENDING;
  }

  /** @internal A launch on the workers settled: its scratch memory goes back, its kernel's policy learns its time. */
  landed(flight: Flight, error: OffloadError | undefined): void {
    const kernel = flight.tag as HostKernel;
    // Settled: no worker runs a team of it any more (a withdrawn launch's workers were killed).
    if (flight.shape?.scratch && (error === undefined || !this.closed)) this.release(flight.shape.scratch);
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
    const scratch = regionBytes === 0 ? 0 : this.allocate((this.info.computeUnits + 1) * regionBytes);
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

  /**
   * Runs every team of a launch here, in order, as the workers would: a trap ends the launch
   * with the same KERNEL_TRAP text; a time limit is checked afterwards (a wasm call on this
   * thread cannot be stopped), which the policy makes rare by running only short kernels here.
   */
  private runInline(
    kernel: HostKernel,
    fn: KernelFunction,
    grid: Grid,
    shape: TeamShape | undefined,
    values: unknown[],
    print: PrintListener | undefined,
  ): void {
    const env = inlineEnv;
    // The calling thread's scratch region is the one after the workers'.
    const region = shape === undefined ? 0 : shape.scratch + this.info.computeUnits * shape.regionBytes;
    inlineGrid[0] = grid.teams;
    inlineGrid[1] = grid.teamDims[0];
    inlineGrid[2] = grid.teamDims[1];
    inlineGrid[3] = grid.threads;
    inlineGrid[4] = grid.threadDims[0];
    inlineGrid[5] = grid.threadDims[1];
    inlineGrid[6] = region;
    inlineGrid[7] = shape?.teamMemoryBytes ?? 0;
    inlineGrid[8] = shape?.stackBytes ?? 0;
    env.setGrid(inlineGrid);
    const run = grid.threads === 1 ? undefined : teamThreadsRun(fn, values);
    const started = performance.now();
    let trap: string | undefined;
    let team = 0;
    for (; team < grid.teams; team++) {
      env.teamId = team;
      try {
        if (run === undefined) fn(...values);
        else runTeamThreads(env, kernel.inlineAsyncify, run);
      } catch (error) {
        trap = trapText(kernel.name, team, error);
        break;
      } finally {
        env.endTrace(kernel.name);
      }
    }
    inlinePrints.deliver(kernel.name, print);
    const ms = performance.now() - started;
    kernel.policy.ranInline(Math.min(team + 1, grid.teams), ms * 1000);
    // Cut as a worker's ring slot cuts it, so the text is the same wherever the team ran.
    if (trap !== undefined) throw errors.kernelTrap(new TextDecoder().decode(fitErrorText(trap)));
    if (grid.timeoutMs !== undefined && ms > grid.timeoutMs) {
      throw errors.timeout(
        `launch of kernel '${kernel.name}' (${grid.teams} teams) ran past its time limit of ${grid.timeoutMs} ms on the calling thread, ` +
          `where it cannot be stopped: it ran to its end in ${ms.toFixed(1)} ms (OFFLOAD_HOST_INLINE=never keeps launches on the workers)`,
      );
    }
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
    this.pool.heldBytes -= this.highWater - STATIC_WINDOW_END;
    this.lostError ??= reason;
    if (this.ownsPool) {
      this.images.forEach(dropInline);
      this.images.clear();
      await this.pool.close(reason);
      return;
    }
    const images = [...this.images.values()];
    this.images.clear();
    images.forEach(dropInline);
    this.memory = undefined;
    this.heap = new Uint8Array(0);
    if (!this.pool.lost) {
      // What still runs of this context stops now (a kernel that loops would never let the
      // workers answer the unloads); the other contexts' launches go on.
      this.pool.cancel(new Set(images.map((image) => image.id)), reason);
      await Promise.all(images.map((image) => this.pool.unload(image.id)));
    }
    collectGarbageSoon();
  }
}
