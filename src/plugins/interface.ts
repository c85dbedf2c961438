/**
 * The plugin contract (DESIGN section 3), modelled on LLVM's GenericPluginTy / GenericDeviceTy,
 * asynchronous. Argument checking happens once, above this contract (src/api); a plugin may
 * assume that offsets and sizes it receives are in range, that allocations are its own and live,
 * and that kernel arguments match the kernel's parameters.
 *
 * Queues are objects rather than a `queue` parameter on every device call: a queue owns its
 * ordering state, and a remote plugin needs one per queue on the proxy side anyway.
 */
import type { ClockAlignment, TraceEvent } from '../runtime/trace.js';
import type { OffloadError } from '../errors.js';
import type { EntryInfo, ImageFormat, ImageInfo, ParamType } from '../image/manifest.js';

export type MemoryKind = 'device' | 'host' | 'shared';
export const MEMORY_KINDS: readonly MemoryKind[] = ['device', 'host', 'shared'];

/** What a device says about itself. Static for the device's lifetime. */
/** What runs a device's kernels (`DeviceInfo.kind`). */
export type DeviceKind = (typeof DEVICE_KINDS)[number];
export const DEVICE_KINDS = ['cpu', 'gpu'] as const;

/** The plugin that serves a device (`DeviceInfo.plugin`); a proxy's devices are `remote` here, whatever serves them there. */
export type PluginName = (typeof PLUGIN_NAMES)[number];
export const PLUGIN_NAMES = ['host', 'remote', 'webgpu'] as const;

export interface DeviceInfo {
  /** Human-readable device name, e.g. `host (2 wasm workers)`. */
  name: string;
  /** The kind of hardware that runs the kernels: `cpu` (host workers, or a proxy's) or `gpu` (WebGPU). */
  kind: DeviceKind;
  vendor: string;
  /** The plugin that serves the device: `host`, `remote` (a proxy's device) or `webgpu`. */
  plugin: PluginName;
  /** Total device memory in bytes (what allocations can use). */
  memoryBytes: number;
  /** Upper bound of `threads` per team; larger requests are clamped, as OpenMP's thread_limit. */
  maxThreadsPerTeam: number;
  /** Upper bound of `teams` per launch given as a number (one dimension); dimensions are bounded by maxTeamDims. */
  maxTeams: number;
  /** Upper bounds of a launch's teams along x, y and z (`grid.teams` as dimensions). */
  maxTeamDims: Dims;
  /** Upper bounds of a team's threads along x, y and z; their product is also bounded by maxThreadsPerTeam. */
  maxThreadDims: Dims;
  /** The most team memory (`grid.teamMemoryBytes`, the device library's teamMemory()) a team can have. */
  maxTeamMemoryBytes: number;
  /** Number of units that run teams concurrently (workers, SMs, ...). */
  computeUnits: number;
  /** Image formats this device can load, in order of preference. */
  imageFormats: ImageFormat[];
  /** Memory kinds `alloc` accepts; others are UNSUPPORTED. */
  memoryKinds: MemoryKind[];
  /** Where the device lives: `local`, or `host:port` for a remote one. */
  location: string;
  /**
   * Whether the device can stop a launch that runs past its time limit (`grid.timeoutMs`) and go
   * on. A device that cannot (a GPU cannot preempt a dispatch) refuses launches that ask for one.
   */
  launchTimeouts: boolean;
  /** Whether its kernels' print() lines reach the program (`Offload.init({ print })`, stderr by default). */
  kernelPrint: boolean;
  /** Whether its kernels can call the program's host functions (hostCall; `runtime.hostFunctions`). */
  hostCalls: boolean;
  /** What its kernels and memory can do: programs (and the conformance suite) ask rather than guess. */
  capabilities: DeviceCapabilities;
  /** Hardware limits behind the figures above, by their API's names (a WebGPU adapter's limits). */
  limits?: Record<string, number>;
  /** Which of `limits` gives each of the figures above, for error messages. */
  limitNames?: {
    maxTeams?: string;
    maxThreadsPerTeam?: string;
    maxTeamDims?: string;
    maxThreadDims?: string;
    maxTeamMemoryBytes?: string;
  };
}

/**
 * What a device can do, as liboffload's olGetDeviceInfo and CUDA's device attributes say it.
 * Static for the device's lifetime.
 */
export interface DeviceCapabilities {
  /** Kernels take and compute 64-bit integers (i64 parameters). */
  i64: boolean;
  /** Kernels take and compute f64. */
  f64: boolean;
  /** A kernel's fault (out-of-bounds access, unreachable) fails its launch with KERNEL_TRAP; false: faults go unnoticed. */
  traps: boolean;
  /** Queues of the device run at the same time (a kernel on one can wait for work of another). */
  concurrentQueues: boolean;
  /** Kernels have atomic operations on device memory. */
  atomics: boolean;
  /** `alloc(bytes, { kind: 'shared' })` gives buffers whose `hostView()` is the device memory itself. */
  mappedMemory: boolean;
  /** Bytes of memory a team shares (teamMemory(): CUDA's shared memory, WebGPU's workgroup storage), as info.maxTeamMemoryBytes; 0: none. */
  maxTeamMemoryBytes: number;
}

/** The names of the boolean capabilities, in the order documentation lists them. */
export const BOOLEAN_CAPABILITIES = ['i64', 'f64', 'traps', 'concurrentQueues', 'atomics', 'mappedMemory'] as const;

/** What `device.memoryInfo()` says: bytes in all, free, and the largest one allocation that fits now. */
export interface MemoryInfo {
  totalBytes: number;
  freeBytes: number;
  largestFreeBlockBytes: number;
}

/** A live allocation. Plugins subclass or extend it with their own fields. */
export interface Allocation {
  readonly bytes: number;
  readonly kind: MemoryKind;
  /** Device address, where the device has a flat address space (for diagnostics only). */
  readonly address?: number;
}

/** An image handed to a device: the bundle's image info, its bytes, and the bundle's entries. */
export interface DeviceImage {
  /** Bundle name, for diagnostics. */
  name: string;
  info: ImageInfo;
  bytes: Uint8Array;
  entries: EntryInfo[];
}

export interface LoadedKernel {
  readonly name: string;
  readonly params: readonly { name: string; type: ParamType }[];
  /** The format of the image it was loaded from. */
  readonly format: ImageFormat;
  /** Bytes of static data its image keeps in device memory (0 where there is none). */
  readonly staticBytes: number;
}

export interface LoadedImage {
  readonly kernels: ReadonlyMap<string, LoadedKernel>;
}

/** Sizes along x, y and z. */
export type Dims = [number, number, number];

/**
 * The launch grid after checks: `teams` and `threads` are the totals (products of the
 * dimensions, at least 1; threads already clamped to the device), a team's linear id runs x
 * fastest, then y, then z.
 */
export interface Grid {
  teams: number;
  threads: number;
  teamDims: Dims;
  threadDims: Dims;
  /** Bytes of scratch memory each team gets (teamMemory()), shared by its threads. */
  teamMemoryBytes: number;
  /** The launch fails with TIMEOUT after running this long (the device stops it and goes on). */
  timeoutMs?: number;
}

/**
 * A rectangular copy after checks (olMemcpyRect, cudaMemcpy3D): `depth` slices of `height` rows
 * of `width` bytes. Row r of slice z starts at `offset + z * slicePitch + r * rowPitch` on each
 * side; every row lies inside its side's memory.
 */
export interface Rect {
  width: number;
  height: number;
  depth: number;
  srcOffset: number;
  srcRowPitch: number;
  srcSlicePitch: number;
  dstOffset: number;
  dstRowPitch: number;
  dstSlicePitch: number;
}

/** Calls `row(srcAt, dstAt)` with the start of each row of `rect` on both sides, slice by slice. */
export function forEachRow(rect: Rect, row: (srcAt: number, dstAt: number) => void): void {
  // An empty rectangle has no rows, however many slices it names (2^40 empty slices must not loop).
  if (rect.width === 0 || rect.height === 0 || rect.depth === 0) return;
  for (let z = 0; z < rect.depth; z++) {
    for (let r = 0; r < rect.height; r++) {
      row(
        rect.srcOffset + z * rect.srcSlicePitch + r * rect.srcRowPitch,
        rect.dstOffset + z * rect.dstSlicePitch + r * rect.dstRowPitch,
      );
    }
  }
}

/** Bytes a rectangle moves (its rows packed one after another). */
export function rectBytes(rect: Pick<Rect, 'width' | 'height' | 'depth'>): number {
  return rect.width * rect.height * rect.depth;
}

/** One lowered kernel argument, aligned with the kernel's parameters. */
export type LaunchArg =
  | { type: 'i32' | 'f32' | 'f64'; value: number }
  | { type: 'i64'; value: bigint }
  | { type: 'ptr'; alloc: Allocation; offset: number };

/**
 * Told when a launch settles: `error` undefined when it completed, else why it failed; `where`,
 * where the device can say, is where it ran (for OFFLOAD_INFO: 'on the workers').
 */
export interface LaunchSettled {
  launchSettled(error: unknown, where: string | undefined): void;
}

/** Tells `settled` how `done` settles: the adapter for plugins whose launches are promises. */
export function settleWhen(done: Promise<string | void>, settled: LaunchSettled): void {
  done.then(
    (where) => settled.launchSettled(undefined, typeof where === 'string' ? where : undefined),
    (error: unknown) => settled.launchSettled(error ?? new Error('the launch failed without a reason'), undefined),
  );
}

/** Characters of one print() line a device keeps, and of a kernel name a line carries (a longer one ends in '...'). */
export const MAX_PRINT_CHARS = 256;
export const MAX_KERNEL_NAME_CHARS = 128;

/** `text` cut to `max` characters, ending in '...' when cut. */
export function cut(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

/**
 * Where the print() lines of a queue's launches go: the kernel's name, the team (-1 for a line
 * about the whole launch) and the text. Called before the launch's promise settles.
 */
export type PrintListener = (kernel: string, team: number, text: string) => void;

/** The most arguments a host call carries, and the longest name of a host function (characters). */
export const MAX_HOST_CALL_ARGS = 6;
export const MAX_HOST_FUNCTION_NAME = 128;

/**
 * Answers a kernel's call of host function `name` (the device library's hostCall) with `args`;
 * rejects with the reason the call failed (the kernel then traps with it).
 */
export type HostCallListener = (kernel: string, name: string, args: number[]) => Promise<number>;

/**
 * An in-order queue. Every method enqueues one operation and returns at once with a promise
 * that settles when that operation has completed (or failed); `launch` tells a LaunchSettled
 * instead. Operations of one queue run in the order they were enqueued; different queues may
 * overlap.
 *
 * Failure is sticky until `synchronize`: once an operation fails, the operations enqueued after
 * it are skipped and reject with the same error, so that a kernel never runs on data whose copy
 * failed. `synchronize` resolves when everything enqueued so far has completed, or rejects with
 * the first failure since the previous `synchronize` and clears it.
 */
export interface PluginQueue {
  /** Set by the runtime on queues whose devices can print (kernels' print()); unset: lines are dropped. */
  onPrint?: PrintListener;
  /** Set by the runtime: where the host calls of this queue's launches go; unset: they fail. */
  onHostCall?: HostCallListener;
  /** Host to device: copies `src` into `dst` at `dstOffset`. `src` is read when the op runs. */
  submit(dst: Allocation, dstOffset: number, src: Uint8Array): Promise<void>;
  /** Device to host: copies `dst.byteLength` bytes of `src` at `srcOffset` into `dst`. */
  retrieve(dst: Uint8Array, src: Allocation, srcOffset: number): Promise<void>;
  /**
   * Device to device. One of `srcDevice` and `dstDevice` is this queue's device; the other may
   * be the same device or another one, of any plugin. A plugin moves the bytes directly when
   * both ends allow it, and through host memory otherwise.
   */
  exchange(
    srcDevice: PluginDevice,
    src: Allocation,
    srcOffset: number,
    dstDevice: PluginDevice,
    dst: Allocation,
    dstOffset: number,
    bytes: number,
  ): Promise<void>;
  /**
   * Enqueues a launch and tells `settled` once, when it settles (possibly before this returns:
   * an inline launch on an idle queue runs at once). No promise: a launch is the hot path, and
   * the runtime's event is the one object it makes. `args` is the caller's scratch,
   * valid only during this call: a plugin that runs the launch later copies what it needs.
   * `grid` is immutable and may be kept. Failures go to `settled`, never thrown.
   */
  launch(kernel: LoadedKernel, grid: Grid, args: readonly LaunchArg[], settled: LaunchSettled): void;
  /** An operation that completes once `event` has completed (event from any queue or device). */
  waitEvent(event: PluginEvent): Promise<void>;
  /**
   * Records an event: it completes when every operation enqueued before it has. With `timing`,
   * the event also says when the queue reached it (`PluginEvent.timing`).
   */
  record(timing?: boolean): PluginEvent;
  synchronize(): Promise<void>;

  // --- liboffload's further operations (olMemFill, olMemcpyRect, olLaunchHostFunction) ---

  /**
   * Fills `bytes` bytes of `dst` at `offset` with `pattern` (1, 2, 4 or 8 bytes) repeated from
   * `offset` on; `bytes` is a multiple of the pattern's length (checked above).
   */
  fill(dst: Allocation, offset: number, bytes: number, pattern: Uint8Array): Promise<void>;
  /** Host to device, a rectangle: `src` is the host side of `rect`, `dst` the device side. */
  submitRect(dst: Allocation, src: Uint8Array, rect: Rect): Promise<void>;
  /** Device to host, a rectangle: `src` is the device side of `rect`, `dst` the host side. */
  retrieveRect(dst: Uint8Array, src: Allocation, rect: Rect): Promise<void>;
  /** Device to device within this queue's device, a rectangle. */
  copyRect(dst: Allocation, src: Allocation, rect: Rect): Promise<void>;
  /**
   * Runs `fn` on the program's thread when the queue reaches it; the queue's later operations
   * wait until its promise settles. `fn` never rejects (the API layer keeps its failure).
   */
  hostFunction(fn: () => Promise<void>): Promise<void>;
  /** True when every enqueued operation has completed (successfully or not). */
  query(): boolean;
  /** Releases the queue once its operations have completed. Further use is a caller bug. */
  destroy(): Promise<void>;
}

/** Where an event's time was read: events compare only when their clocks are the same object. */
export interface EventTiming {
  /** The clock: LOCAL_CLOCK for devices of this process, a proxy connection for its devices. */
  readonly clock: object;
  /** Milliseconds on that clock when the queue reached the event (rejects as `done` does). */
  readonly at: Promise<number>;
}

/** The clock of every device this process runs itself (performance.now()). */
export const LOCAL_CLOCK: object = Object.freeze({ clock: 'this process' });

/** A point in a queue. `done` never rejects unhandled: a holder must observe it. */
export interface PluginEvent {
  readonly done: Promise<void>;
  /** Set on events recorded with timing. */
  readonly timing?: EventTiming;
  /** The queue that recorded it (a plugin may recognise its own events and avoid a round trip). */
  readonly queue: PluginQueue;
  query(): boolean;
}

export interface PluginDevice {
  readonly info: DeviceInfo;
  loadImage(image: DeviceImage): Promise<LoadedImage>;
  unloadImage(image: LoadedImage): Promise<void>;
  alloc(bytes: number, kind: MemoryKind): Promise<Allocation>;
  free(alloc: Allocation): Promise<void>;
  createQueue(): PluginQueue;
  /**
   * Optional, for devices whose memory the host addresses directly (the host device): a view of
   * `bytes` bytes of `alloc` at `offset`. Writing through it bypasses the queues, so the caller
   * must order it itself (the proxy does, for a streamed write its queue is parked at).
   * Throws OUT_OF_BOUNDS for a range that does not lie inside `alloc`.
   */
  hostView?(alloc: Allocation, offset: number, bytes: number): Uint8Array;
  /** Set once the device is gone; every later operation rejects with it. */
  readonly lost: OffloadError | undefined;
  /** How much of its memory this context could allocate now (olGetDeviceInfo FREE_MEMORY, cudaMemGetInfo). */
  memoryInfo(): Promise<MemoryInfo>;
  /**
   * Optional, for devices whose images keep module-level data in device memory: the device
   * global `name` of a loaded image (olGetSymbol GLOBAL_VARIABLE), as an allocation that lives
   * as long as the image and that `free` must never be given; undefined when the image has none
   * of that name. Devices without it have no device globals (UNSUPPORTED above).
   */
  global?(image: LoadedImage, name: string): Promise<Allocation | undefined>;
  /**
   * Optional, for diagnostics and leak tests: counts of what the device holds now, across all
   * its contexts (contexts, images loaded, buffers: whatever the plugin keeps).
   */
  census?(): Record<string, number>;
}

export interface Plugin {
  readonly name: string;
  /** Starts the plugin; resolves to the number of devices it serves (0 is fine). */
  init(): Promise<number>;
  device(index: number): PluginDevice;
  /** Whether a device of this plugin can run `image`. */
  isCompatible(image: ImageInfo): boolean;
  /**
   * A plugin over the same devices whose device memory, images and queues are its own (a
   * context, as CUDA and liboffload have): nothing a kernel of one context computes reaches
   * another's memory. Its `deinit()` frees what the context made and leaves the devices (and
   * the other contexts) running. Call `init()` on it before use, as on any plugin.
   */
  createContext(): Promise<Plugin>;
  /** Stops every device and frees everything (for a context: everything the context made). Idempotent. */
  deinit(): Promise<void>;
  /** Spans its devices recorded in processes of their own (a proxy's), to merge into the program's trace. */
  traces?(): Promise<RemoteTrace[]>;
  /** What `init()` went on without, one sentence each (an optional proxy that did not answer): `runtime.diagnostics`. */
  readonly diagnostics?: readonly string[];
}

/** One proxy's spans for this program, on the proxy's clock, and how that clock relates to ours. */
export interface RemoteTrace {
  events: TraceEvent[];
  clock: ClockAlignment;
  /** Spans the proxy left out (over MAX_REMOTE_EVENTS). */
  dropped: number;
}
