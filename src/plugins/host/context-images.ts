/**
 * The images loaded in one host device context: each checked against what the device relies on,
 * its static data range reserved, its kernels and globals found; loaded on every worker and, for
 * its kernels' inline runs, on this thread (inline-run.ts).
 */
import { errors, quoted } from '../../errors.js';
import { dropped } from '../../runtime/debug.js';
import {
  exportedAddresses,
  readWasmModuleInfo,
  type DataSegment,
  type WasmModuleInfo,
} from '../../build/wasm-module-info.js';
import { readCodeShapes, type CodeShape } from '../../build/wasm-code-shape.js';
import {
  BARRIER_IMPORT,
  DEVICE_IMPORTS,
  DEVICE_IMPORT_MODULE,
  ENV_IMPORTS,
  PAGE_BYTES,
  STATIC_WINDOW_END,
  STATIC_WINDOW_START,
} from '../../image/wasm-abi.js';
import type { DeviceImage, LoadedImage, LoadedKernel } from '../interface.js';
import { HostAllocation, zero, type ContextMemory } from './context-memory.js';
import { InlinePolicy, type InlineMode } from './inline.js';
import { dropInline, instantiateInline } from './inline-run.js';
import { ARG_KIND, type ArgKind } from './launch-ring.js';
import type { Asyncify } from './team-threads.js';
import type { WorkerPool } from './worker-pool.js';

/** A kernel's wasm function, as an instance on this thread exports it. */
export type KernelFunction = (...args: unknown[]) => unknown;

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

export class HostImage implements LoadedImage {
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

const allowedImports = new Set([
  ...ENV_IMPORTS.map((name) => `env.${name}`),
  ...DEVICE_IMPORTS.map((name) => `${DEVICE_IMPORT_MODULE}.${name}`),
]);

/** One context's images, by id, and the static data ranges they hold (HostDevice holds one per context). */
export class ContextImages {
  private readonly images = new Map<number, HostImage>();
  private readonly staticRanges: StaticRange[] = [];

  constructor(
    private readonly pool: WorkerPool,
    private readonly memory: ContextMemory,
    private readonly inlineMode: InlineMode,
    /** The context's kernels are the program's own, trusted to learn inline launches (inline.ts). */
    private readonly trusted: boolean,
    /** Throws if the context has ended or its device is lost (HostDevice's check, made again after each await). */
    private readonly checkAlive: () => void,
  ) {}

  /**
   * Loads a wasm image on every worker. The image is untrusted (a proxy loads what its clients
   * send): what the device relies on (the static data range, no start function, the imports,
   * the memory it needs) is read from the module itself, never from the manifest.
   */
  async load(image: DeviceImage): Promise<LoadedImage> {
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
      const policy = new InlinePolicy(this.inlineMode, shapes.get(entry.name)!, this.trusted);
      const kernel = new HostKernel(entry.name, entry.params, hostImage, index, kinds, policy);
      kernel.hasBarriers = hasBarriers;
      kernel.callsHost = shapes.get(entry.name)!.callsHost;
      kernel.barrierStackBytes = shapes.get(entry.name)!.barrierStackBytes;
      hostImage.kernels.set(entry.name, kernel);
    });
    // Registered before the workers answer, so that a concurrent load sees the static range.
    this.images.set(id, hostImage);
    const kernelList = [...hostImage.kernels.values()].map(({ name, kinds }) => ({ name, kinds: [...kinds] }));
    const replies = await this.pool.load(id, module, this.memory.wasm!, kernelList);
    const failed = replies.find((reply) => reply.type === 'load-failed');
    if (failed?.type === 'load-failed' || replies.length === 0) {
      await this.unload(hostImage);
      this.checkAlive();
      throw errors.incompatibleImage(
        `image of ${shown} failed to instantiate: ${failed?.type === 'load-failed' ? failed.message : 'no reply'}`,
      );
    }
    try {
      this.findGlobals(image, info, hostImage, shown);
    } catch (error) {
      await this.unload(hostImage);
      throw error;
    }
    const wasm = this.memory.wasm;
    if (this.inlineMode !== 'never' && wasm) instantiateInline(hostImage, module, wasm);
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
    const heap = this.memory.heap;
    const view = new DataView(heap.buffer, heap.byteOffset, heap.byteLength);
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
    zero(this.memory.heap, range.start, range.end);
  }

  async unload(image: LoadedImage): Promise<void> {
    const hostImage = image as HostImage;
    if (!this.images.has(hostImage.id)) return;
    this.images.delete(hostImage.id);
    dropInline(hostImage);
    if (!this.pool.lost) await this.pool.unload(hostImage.id);
    this.releaseStatic(hostImage);
  }

  /**
   * The context ended: forgets every image and drops its instance on this thread, and returns
   * them (the workers still hold them).
   */
  clear(): HostImage[] {
    const images = [...this.images.values()];
    this.images.clear();
    images.forEach(dropInline);
    return images;
  }
}
