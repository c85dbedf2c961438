import { asOffloadError, errors, quoted } from '../errors.js';
import type { EntryInfo } from '../image/manifest.js';
import { Buffer, type DevicePointer } from './buffer.js';
import { describe } from './checks.js';
import { Device } from './device.js';
import type { LibraryRecord } from '../runtime/image-registry.js';
import type { RuntimeContext } from './context.js';

/** A registered bundle. Its images load on each device on first use. */
export class Library {
  /** @internal Use `runtime.register()`. */
  constructor(
    /** @internal */ readonly record: LibraryRecord,
    /** @internal */ readonly context: RuntimeContext,
  ) {}

  get name(): string {
    return this.record.name;
  }

  /** The kernels the bundle provides, with their parameters. */
  get kernels(): readonly EntryInfo[] {
    return this.record.bundle.manifest.entries.filter((entry) => entry.kind === 'kernel');
  }

  /** The device globals the bundle provides: module-level data its kernels share on a device. */
  get globals(): readonly string[] {
    return this.record.bundle.manifest.entries.filter((entry) => entry.kind === 'global').map((entry) => entry.name);
  }

  /**
   * The device global `name` on `device` (olGetSymbol GLOBAL_VARIABLE, cudaGetSymbolAddress):
   * module-level data of the kernel source (`export const table: StaticArray<f32> = [...]`),
   * one copy per device (per runtime context), seen by every team, loaded with the library's
   * image. The pointer's buffer has the data's size; read, write, copy and fill it through
   * queues and pass it to kernels like any buffer. It is never freed (`free()` rejects); it is
   * gone once the library is unregistered.
   * @throws (rejects) NOT_FOUND for a name the library has no global of, UNSUPPORTED on a device
   *   whose images keep no module-level data in device memory (a WebGPU device).
   */
  async global(device: Device, name: string): Promise<DevicePointer> {
    this.context.checkOpen();
    if (!(device instanceof Device) || device.context !== this.context) {
      throw errors.invalidArgument(
        `global: device must be a Device of this library's runtime, got ${describe(device)}`,
      );
    }
    device.checkUsable();
    if (typeof name !== 'string')
      throw errors.invalidArgument(`global: name must be a string, got ${describe(name)}`, device.id);
    if (this.record.unregistered)
      throw errors.invalidArgument(`global: the library '${this.name}' was unregistered`, device.id);
    if (!this.globals.includes(name)) {
      throw errors.notFound(
        `library '${this.name}' has no global ${quoted(name)} (it has: ${this.globals.join(', ') || 'none'})`,
        device.id,
      );
    }
    if (!device.plugin.global) {
      throw errors.unsupported(
        `global: device ${device.id} (${device.info.name}) keeps no module-level data in device memory: its ${device.info.imageFormats.join(', ')} images have no device globals`,
        device.id,
      );
    }
    const image = await this.context.registry.image(this.record, device.plugin, device.id);
    const allocation = await device.plugin.global(image, name).catch((error: unknown) => {
      throw asOffloadError(error, `finding global ${quoted(name)} of library '${this.name}' on device ${device.id}`, {
        device: device.id,
      });
    });
    if (!allocation)
      throw errors.notFound(
        `the image of library '${this.name}' that device ${device.id} loaded has no global ${quoted(name)}`,
        device.id,
      );
    return new Buffer(device, allocation, this.record).at(0);
  }

  get unregistered(): boolean {
    return this.record.unregistered;
  }

  /**
   * Unloads the library's images from every device, in the reverse order they were loaded.
   * Kernels of the library are refused from now on; launches already enqueued complete first.
   */
  async unregister(): Promise<void> {
    this.context.checkOpen();
    await this.context.registry.unregister(this.record);
  }

  /** `await using library = await runtime.register(path)` unregisters it at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (!this.context.isClosed) await this.unregister();
  }
}
