/** The host plugin: one host device per runtime (see device.ts), and a context of it per runtime context. */
import type { ImageInfo } from '../../image/manifest.js';
import type { Plugin } from '../interface.js';
import { registerPlugin } from '../../runtime/plugin-registry.js';
import { defaultHostOptions, HostDevice } from './device.js';
import type { HostDeviceOptions } from './options.js';
import { hostUnavailable } from './host-threads.js';

export class HostPlugin implements Plugin {
  readonly name = 'host';
  private hostDevice: HostDevice | undefined;

  /**
   * @param options Worker count and memory size (defaults from the environment).
   * @param parent For a context: the plugin whose device (and workers) it shares.
   */
  constructor(
    private readonly options: Partial<HostDeviceOptions> = {},
    private readonly parent?: HostPlugin,
  ) {}

  async init(): Promise<number> {
    if (!this.hostDevice) {
      this.hostDevice = this.parent
        ? this.parent.device(0).context()
        : HostDevice.create({ ...defaultHostOptions(), ...this.options });
    }
    return 1;
  }

  device(index: number): HostDevice {
    if (index !== 0 || !this.hostDevice) throw new RangeError(`the host plugin has no device ${index}`);
    return this.hostDevice;
  }

  async createContext(): Promise<Plugin> {
    return new HostPlugin(this.options, this);
  }

  isCompatible(image: ImageInfo): boolean {
    return image.format === 'wasm';
  }

  async deinit(): Promise<void> {
    await this.hostDevice?.close();
  }
}

// The host plugin is there wherever the platform has workers over shared memory (Node always; a
// cross-origin isolated page): local devices come first in the device table.
registerPlugin(
  'host',
  (options) => (options.host === false || hostUnavailable() ? undefined : new HostPlugin(options.host ?? {})),
  100,
  (options) => (options.host === false ? undefined : hostUnavailable()),
);
