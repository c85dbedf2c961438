/// <reference types="@webgpu/types" preserve="true" />
/** The WebGPU plugin: one device, on the adapter Dawn finds (see adapter.ts for which), and a context of it per runtime context. */
import type { ImageInfo } from '../../image/manifest.js';
import type { Plugin, PluginDevice } from '../interface.js';
import { registerPlugin } from '../../runtime/plugin-registry.js';
import { findAdapter, noteUnavailable, webgpuOptionsFromEnv } from './adapter.js';
import { WebGpuDevice } from './device.js';

export class WebGpuPlugin implements Plugin {
  readonly name = 'webgpu';
  private readonly gpuDevice: WebGpuDevice;
  /** False for a context: its deinit leaves the GPU device to the plugin it came from. */
  private readonly owner: boolean;

  /**
   * @param source An adapter, or (for a context) the device whose GPU the context shares.
   * @param memoryBytes The device's memory budget (see WebGpuOptions.memoryBytes).
   */
  constructor(source: GPUAdapter | WebGpuDevice, memoryBytes?: number, loopBudget?: number) {
    this.owner = !(source instanceof WebGpuDevice);
    this.gpuDevice =
      source instanceof WebGpuDevice ? source.context() : new WebGpuDevice(source, undefined, memoryBytes, loopBudget);
  }

  async init(): Promise<number> {
    return 1;
  }

  device(index: number): PluginDevice {
    if (index !== 0) throw new RangeError(`the webgpu plugin has no device ${index}`);
    return this.gpuDevice;
  }

  async createContext(): Promise<Plugin> {
    return new WebGpuPlugin(this.gpuDevice);
  }

  isCompatible(image: ImageInfo): boolean {
    return image.format === 'wgsl';
  }

  async deinit(): Promise<void> {
    await this.gpuDevice.close(this.owner);
  }
}

// The WebGPU device follows the host device.
registerPlugin(
  'webgpu',
  async (options) => {
    const settings = options.webgpu ?? webgpuOptionsFromEnv();
    if (settings === false) {
      noteUnavailable('the WebGPU plugin is turned off (OFFLOAD_WEBGPU=off or { webgpu: false })');
      return undefined;
    }
    const found = await findAdapter(settings);
    noteUnavailable('reason' in found ? found.reason : undefined);
    return 'adapter' in found ? new WebGpuPlugin(found.adapter, settings.memoryBytes, settings.loopBudget) : undefined;
  },
  75,
);
