/**
 * Registered libraries (the seeds' __tgt_register_lib / __tgt_unregister_lib) and the images
 * they have loaded on each device. Images load lazily, once per device, on first use; a
 * library unloads from its devices in the reverse order it loaded on them, and libraries are
 * unregistered in the reverse order of registration at shutdown (nested lifetimes).
 *
 * Unregistering while launches of the library are still in flight defers: the unload waits
 * until they have completed; new kernels and launches of the library are refused at once.
 */
import { asOffloadError, errors, OffloadError } from '../errors.js';
import type { Bundle } from '../image/manifest.js';
import type { LoadedImage, PluginDevice } from '../plugins/interface.js';
import type { InfoLog } from './info-log.js';
import { debug, dropped } from './debug.js';
import { performance } from '../platform.js';

interface DeviceLoad {
  device: PluginDevice;
  deviceId: number;
  image: Promise<LoadedImage>;
}

export class LibraryRecord {
  unregistered = false;
  /** Loads in the order they started; unloading walks it backwards. */
  readonly loads: DeviceLoad[] = [];
  private activeLaunches = 0;
  private idleWaiters: (() => void)[] = [];

  constructor(
    readonly id: number,
    readonly bundle: Bundle,
  ) {}

  get name(): string {
    return this.bundle.manifest.name;
  }

  /** Counts a launch as using the library until `launchEnded()`. */
  launchBegan(): void {
    this.activeLaunches++;
  }

  launchEnded(): void {
    if (--this.activeLaunches === 0 && this.idleWaiters.length > 0)
      for (const wake of this.idleWaiters.splice(0)) wake();
  }

  idle(): Promise<void> {
    if (this.activeLaunches === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}

export class ImageRegistry {
  private readonly libraries: LibraryRecord[] = [];
  private nextId = 1;

  constructor(private readonly info: InfoLog) {}

  register(bundle: Bundle): LibraryRecord {
    const record = new LibraryRecord(this.nextId++, bundle);
    this.libraries.push(record);
    return record;
  }

  /** The library's image on `device`, loading it on first use. */
  image(library: LibraryRecord, device: PluginDevice, deviceId: number): Promise<LoadedImage> {
    if (library.unregistered) {
      return Promise.reject(errors.invalidArgument(`library '${library.name}' was unregistered`, deviceId));
    }
    const existing = library.loads.find((load) => load.device === device);
    if (existing) return existing.image;
    const image = this.load(library, device, deviceId);
    library.loads.push({ device, deviceId, image });
    // A failed load is forgotten so that a later call may try again (after the cause is fixed);
    // its error goes to every caller of image() that awaits it.
    image.catch(() => {
      const index = library.loads.findIndex((load) => load.image === image);
      if (index >= 0) library.loads.splice(index, 1);
    });
    return image;
  }

  private async load(library: LibraryRecord, device: PluginDevice, deviceId: number): Promise<LoadedImage> {
    const { bundle } = library;
    const formats = device.info.imageFormats;
    const chosen = formats
      .map((format) => bundle.images.find((image) => image.info.format === format))
      .find((image) => image);
    if (!chosen) {
      const has = bundle.images.map((image) => image.info.format).join(', ') || 'none';
      // The build's notes say why a kernel has no image but wasm (a kernel in C, C++ or Rust).
      const notes = bundle.manifest.entries.flatMap((entry) => (entry.wasmOnly === undefined ? [] : [entry.wasmOnly]));
      throw errors.incompatibleImage(
        `library '${library.name}' has no image device ${deviceId} can run: it has [${has}], the device runs [${formats.join(', ')}]` +
          (notes.length > 0 && !formats.includes('wasm') ? `; the build noted:\n${notes.join('\n')}` : ''),
        deviceId,
      );
    }
    debug.log(
      `device ${deviceId}`,
      `library '${library.name}': loading its ${chosen.info.format} image (the first of [${formats.join(', ')}] it has)`,
    );
    const started = performance.now();
    try {
      const loaded = await device.loadImage({
        name: library.name,
        info: chosen.info,
        bytes: chosen.bytes,
        entries: bundle.manifest.entries,
      });
      this.info.imageLoaded(
        deviceId,
        library.name,
        chosen.info.format,
        chosen.bytes.byteLength,
        loaded.kernels.size,
        performance.now() - started,
      );
      return loaded;
    } catch (error) {
      // Keep the plugin's code (UNSUPPORTED, DEVICE_LOST, ...) and add which library and device;
      // a plugin refuses a bad image as INCOMPATIBLE_IMAGE itself, so anything else is a bug.
      const what = `loading library '${library.name}' on device ${deviceId}`;
      if (!(error instanceof OffloadError)) throw asOffloadError(error, what, { device: deviceId });
      throw new OffloadError(error.code, `${what} failed: ${error.message}`, { device: deviceId, cause: error });
    }
  }

  /** Refuses new use at once; unloads once in-flight launches have completed. Idempotent. */
  async unregister(library: LibraryRecord): Promise<void> {
    if (library.unregistered) return;
    library.unregistered = true;
    await library.idle();
    const failures: unknown[] = [];
    for (const load of library.loads.splice(0).reverse()) {
      try {
        const image = await load.image.catch((error: unknown) =>
          dropped(`device ${load.deviceId}`, `loading library '${library.name}' (now unregistered)`)(error),
        );
        if (image && !load.device.lost) {
          await load.device.unloadImage(image);
          this.info.imageUnloaded(load.deviceId, library.name);
        }
      } catch (error) {
        failures.push(error);
      }
    }
    const index = this.libraries.indexOf(library);
    if (index >= 0) this.libraries.splice(index, 1);
    if (failures.length > 0) throw failures[0];
  }

  /** Unregisters every library, the last registered first. */
  async unregisterAll(): Promise<void> {
    for (const library of [...this.libraries].reverse())
      await this.unregister(library).catch(dropped('shutdown', `unregistering library '${library.name}'`));
  }
}
