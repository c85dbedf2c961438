import { readFile } from 'node:fs/promises';
import { errors, OffloadError } from '../errors.js';
import { decodeBundle } from '../image/bundle.js';
import type { Plugin } from '../plugins/interface.js';
import { ImageRegistry } from '../runtime/image-registry.js';
import { InfoLog, infoEnabled } from '../runtime/info-log.js';
import type { RuntimeOptions } from '../runtime/options.js';
import { registeredPlugins } from '../runtime/plugin-registry.js';
import { checkInteger, checkOptions, describe } from './checks.js';
import { RuntimeContext } from './context.js';
import { Device } from './device.js';
import { Library } from './library.js';

/**
 * One offloading runtime: its devices (local first, then remote), registered libraries and
 * everything allocated through it. `shutdown()` frees all of it.
 */
export class Runtime {
  readonly devices: readonly Device[];
  private shutdownPromise: Promise<void> | undefined;

  /** @internal Use `Offload.init()`. */
  constructor(
    private readonly context: RuntimeContext,
    private readonly plugins: readonly Plugin[],
    devices: Device[],
  ) {
    this.devices = Object.freeze(devices);
  }

  /** The device with id `id` (its index in `devices`). Throws NOT_FOUND. */
  device(id: number): Device {
    checkInteger(id, 'device: id', 0, Number.MAX_SAFE_INTEGER);
    const device = this.devices[id];
    if (!device) throw errors.notFound(`there is no device ${id}; this runtime has ${this.devices.length} (ids 0 to ${this.devices.length - 1})`);
    return device;
  }

  /** Registers a bundle (a path to a `.offload` file, or its bytes). Images load on first use per device. */
  async register(bundle: string | Uint8Array): Promise<Library> {
    this.context.checkOpen();
    let bytes: Uint8Array;
    if (typeof bundle === 'string') {
      try {
        bytes = await readFile(bundle);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') throw errors.notFound(`register: no bundle at '${bundle}' (build one with 'offload build')`);
        throw errors.invalidArgument(`register: cannot read '${bundle}': ${(error as Error).message}`);
      }
    } else if (bundle instanceof Uint8Array) {
      bytes = bundle;
    } else {
      throw errors.invalidArgument(`register: expected a bundle path or its bytes (Uint8Array), got ${describe(bundle)}`);
    }
    const record = this.context.registry.register(decodeBundle(bytes));
    return new Library(record, this.context);
  }

  /**
   * Waits for every queue to drain, unregisters every library (last registered first), and
   * stops every plugin. Idempotent; afterwards every call on this runtime's objects rejects
   * with DEVICE_LOST.
   */
  shutdown(): Promise<void> {
    this.shutdownPromise ??= this.close();
    return this.shutdownPromise;
  }

  private async close(): Promise<void> {
    await Promise.all([...this.context.queues].map((queue) => queue.drain()));
    await this.context.registry.unregisterAll();
    this.context.close();
    for (const plugin of [...this.plugins].reverse()) await plugin.deinit().catch(() => {});
  }
}

async function init(options?: RuntimeOptions): Promise<Runtime> {
  const opts = checkOptions(options, 'Offload.init: options') as RuntimeOptions;
  const info = opts.info ?? infoEnabled();
  if (typeof info !== 'boolean' && typeof info !== 'function') {
    throw errors.invalidArgument(`Offload.init: options.info must be a boolean or a function, got ${describe(info)}`);
  }
  if (opts.proxies !== undefined && (!Array.isArray(opts.proxies) || !opts.proxies.every((p) => typeof p === 'string'))) {
    throw errors.invalidArgument(`Offload.init: options.proxies must be an array of 'host:port' strings, got ${describe(opts.proxies)}`);
  }
  if (opts.token !== undefined && typeof opts.token !== 'string') {
    throw errors.invalidArgument(`Offload.init: options.token must be a string, got ${describe(opts.token)}`);
  }
  const log = typeof info === 'function' ? new InfoLog(true, info) : new InfoLog(info);
  const context = new RuntimeContext(new ImageRegistry(log), log);
  const plugins: Plugin[] = [];
  const devices: Device[] = [];
  try {
    for (const { factory } of registeredPlugins()) {
      const plugin = await factory(opts);
      if (!plugin) continue;
      plugins.push(plugin);
      const count = await plugin.init();
      for (let index = 0; index < count; index++) devices.push(new Device(devices.length, plugin.device(index), context));
    }
  } catch (error) {
    for (const plugin of plugins.reverse()) await plugin.deinit().catch(() => {});
    if (error instanceof OffloadError) throw error;
    throw errors.invalidArgument(`Offload.init failed: ${(error as Error).message}`);
  }
  return new Runtime(context, plugins, devices);
}

/** The entry point: `const runtime = await Offload.init()`. */
export const Offload = Object.freeze({ init });
