/** The WebGPU plugin: one device, on the adapter Dawn finds (see adapter.ts for which). */
import type { ImageInfo } from '../../image/manifest.js';
import type { Plugin, PluginDevice } from '../interface.js';
import { WebGpuDevice } from './device.js';

export class WebGpuPlugin implements Plugin {
  readonly name = 'webgpu';
  private readonly gpuDevice: WebGpuDevice;

  constructor(adapter: GPUAdapter) {
    this.gpuDevice = new WebGpuDevice(adapter);
  }

  async init(): Promise<number> {
    return 1;
  }

  device(index: number): PluginDevice {
    if (index !== 0) throw new RangeError(`the webgpu plugin has no device ${index}`);
    return this.gpuDevice;
  }

  isCompatible(image: ImageInfo): boolean {
    return image.format === 'wgsl';
  }

  async deinit(): Promise<void> {
    await this.gpuDevice.close();
  }
}
