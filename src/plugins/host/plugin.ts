/** The host plugin: one host device per runtime (see device.ts). */
import type { ImageInfo } from '../../image/manifest.js';
import type { Plugin, PluginDevice } from '../interface.js';
import { defaultHostOptions, HostDevice, type HostDeviceOptions } from './device.js';

export class HostPlugin implements Plugin {
  readonly name = 'host';
  private hostDevice: HostDevice | undefined;

  constructor(private readonly options: Partial<HostDeviceOptions> = {}) {}

  async init(): Promise<number> {
    if (!this.hostDevice) this.hostDevice = new HostDevice({ ...defaultHostOptions(), ...this.options });
    return 1;
  }

  device(index: number): PluginDevice {
    if (index !== 0 || !this.hostDevice) throw new RangeError(`the host plugin has no device ${index}`);
    return this.hostDevice;
  }

  isCompatible(image: ImageInfo): boolean {
    return image.format === 'wasm';
  }

  async deinit(): Promise<void> {
    await this.hostDevice?.close();
  }
}
