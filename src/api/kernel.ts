import { isLaunchParam, isPerItem, POINTER_BYTES_PREFIX, type ImageFormat, type ParamInfo } from '../image/manifest.js';
import type { LoadedKernel } from '../plugins/interface.js';
import type { Device } from './device.js';
import type { Library } from './library.js';
import { LaunchScratch } from './launch-scratch.js';

/** What `kernel.info` says. */
export interface KernelInfo {
  name: string;
  /** Typed parameters, as the compiler wrote them in the bundle. */
  params: readonly ParamInfo[];
  /** The format of the image the device loaded it from (`wasm`, `wgsl`). */
  imageFormat: ImageFormat;
  /** The largest grid it can take on this device: teams per launch, threads per team. */
  maxTeams: number;
  maxThreadsPerTeam: number;
  /** Bytes of static data (module-level data) its image keeps in this device's memory. */
  staticDataBytes: number;
}

/** A kernel of a library, loaded on one device. Launch it with `queue.launch()`. */
export class Kernel {
  /** @internal Use `device.kernel()`. */
  constructor(
    readonly device: Device,
    readonly library: Library,
    /** @internal */ readonly loaded: LoadedKernel,
  ) {
    this.scratch = new LaunchScratch(loaded.params);
    this.perItem = isPerItem(loaded.params);
    const params = loaded.params;
    this.ownParams = params.filter((param) => !isLaunchParam(param.name)).length;
    const lengths: [number, number][] = [];
    params.forEach((param, index) => {
      if (!param.name.startsWith(POINTER_BYTES_PREFIX)) return;
      const pointer = params.findIndex((p) => p.name === param.name.slice(POINTER_BYTES_PREFIX.length));
      if (pointer >= 0 && params[pointer]!.type === 'ptr') lengths.push([index, pointer]);
    });
    this.pointerLengths = lengths;
  }

  /** @internal How many of its parameters the program passes (the others, item counts and pointer lengths, the launch does). */
  readonly ownParams: number;
  /**
   * @internal In a bounds-checked build (`offload build --checked`): [parameter index of a
   * pointer's length, index of the pointer], each length the bytes of its buffer from the pointer.
   */
  readonly pointerLengths: readonly (readonly [number, number])[];

  /**
   * Whether it is a per-item kernel (its source's first parameter is `i: item`): launched with
   * `{ items }`, its last three parameters (the item counts) are passed by the launch.
   */
  readonly perItem: boolean;

  /** @internal What its launches reuse (Queue.launch). */
  readonly scratch: LaunchScratch;

  get name(): string {
    return this.loaded.name;
  }

  get params(): readonly ParamInfo[] {
    return this.loaded.params;
  }

  /** What the kernel is on its device (olGetSymbolInfo, cuFuncGetAttribute). */
  get info(): KernelInfo {
    const device = this.device.info;
    return {
      name: this.loaded.name,
      params: this.loaded.params,
      imageFormat: this.loaded.format,
      maxTeams: device.maxTeams,
      maxThreadsPerTeam: device.maxThreadsPerTeam,
      staticDataBytes: this.loaded.staticBytes,
    };
  }
}
