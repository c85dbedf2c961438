import type { ParamInfo } from '../image/manifest.js';
import type { LoadedKernel } from '../plugins/interface.js';
import type { Device } from './device.js';
import type { Library } from './library.js';

/** A kernel of a library, loaded on one device. Launch it with `queue.launch()`. */
export class Kernel {
  /** @internal Use `device.kernel()`. */
  constructor(
    readonly device: Device,
    readonly library: Library,
    /** @internal */ readonly loaded: LoadedKernel,
  ) {}

  get name(): string {
    return this.loaded.name;
  }

  get params(): readonly ParamInfo[] {
    return this.loaded.params;
  }
}
