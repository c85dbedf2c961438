import { readFile } from 'node:fs/promises';
import { errors, OffloadError } from '../errors.js';
import { decodeBundle } from '../image/bundle.js';
import type { Plugin } from '../plugins/interface.js';
import { ImageRegistry } from '../runtime/image-registry.js';
import { InfoLog, infoEnabled } from '../runtime/info-log.js';
import type { RuntimeOptions } from '../runtime/options.js';
import type { HostView, MapSpec } from '../runtime/mapping/map.js';
import { Mapper, type TargetArgument } from '../runtime/mapping/mapper.js';
import { registeredPlugins } from '../runtime/plugin-registry.js';
import { traceFile, Tracer } from '../runtime/trace.js';
import { checkInteger, checkOptions, describe } from './checks.js';
import { RuntimeContext } from './context.js';
import { Device } from './device.js';
import { Kernel } from './kernel.js';
import { Library } from './library.js';
import type { Grid } from './queue.js';

/**
 * One offloading runtime: its devices (local first, then remote), registered libraries and
 * everything allocated through it. `shutdown()` frees all of it.
 */
export class Runtime {
  readonly devices: readonly Device[];
  private shutdownPromise: Promise<void> | undefined;
  private readonly mapper: Mapper;

  /** @internal Use `Offload.init()`. */
  constructor(
    private readonly context: RuntimeContext,
    private readonly plugins: readonly Plugin[],
    devices: Device[],
  ) {
    this.devices = Object.freeze(devices);
    this.mapper = new Mapper(context.info, context.tracer);
  }

  private ownDevice(device: unknown, what: string): Device {
    this.context.checkOpen();
    if (!(device instanceof Device) || !this.devices.includes(device)) {
      throw errors.invalidArgument(`${what}: the first argument must be a Device of this runtime, got ${describe(device)}`);
    }
    return device;
  }

  /**
   * OpenMP `target enter data`: maps each clause's host range onto `device` (allocating and, for
   * `to`/`tofrom`, copying absent ranges; counting references to present ones).
   */
  async enterData(device: Device, maps: MapSpec | readonly MapSpec[]): Promise<void> {
    await this.mapper.enterData(this.ownDevice(device, 'enterData'), maps);
  }

  /** OpenMP `target exit data`: `map.from`/`tofrom` copy back when the count reaches zero, `release`/`delete` only unmap. */
  async exitData(device: Device, maps: MapSpec | readonly MapSpec[]): Promise<void> {
    await this.mapper.exitData(this.ownDevice(device, 'exitData'), maps);
  }

  /** OpenMP `target update`: copies present ranges to (`to`) or from (`from`) the device. */
  async update(device: Device, motion: { to?: HostView | HostView[]; from?: HostView | HostView[] }): Promise<void> {
    await this.mapper.update(this.ownDevice(device, 'update'), motion);
  }

  /**
   * OpenMP `target data`: maps `maps` for the duration of `body` (kernels inside reuse the device
   * copies without copying) and leaves them afterwards, also when `body` throws.
   */
  async targetData<T>(device: Device, maps: MapSpec | readonly MapSpec[], body: () => Promise<T> | T): Promise<T> {
    return this.mapper.targetData(this.ownDevice(device, 'targetData'), maps, body);
  }

  /**
   * OpenMP `target`: launches `kernel` on `device`; an argument may be a map clause (replaced by
   * the device pointer of its range, mapped around the launch) or a plain kernel argument.
   * Resolves when the kernel and the copies back have completed.
   */
  async target(device: Device, kernel: Kernel, grid: Grid, args: readonly TargetArgument[] = []): Promise<void> {
    const own = this.ownDevice(device, 'target');
    if (!(kernel instanceof Kernel) || kernel.device !== own) {
      throw errors.invalidArgument(`target: the kernel must be a Kernel loaded for device ${own.id} (device.kernel(library, name)), got ${describe(kernel)}`, own.id);
    }
    await this.mapper.target(own, kernel, grid, args);
  }

  /** @internal The mapping table of a device (tests and diagnostics). */
  mappedRanges(device: Device): number {
    return this.mapper.table(device).size;
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
    this.context.tracer?.write();
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
  if (opts.trace !== undefined && typeof opts.trace !== 'string') {
    throw errors.invalidArgument(`Offload.init: options.trace must be a file path, got ${describe(opts.trace)}`);
  }
  const log = typeof info === 'function' ? new InfoLog(true, info) : new InfoLog(info);
  const file = traceFile(opts.trace);
  const context = new RuntimeContext(new ImageRegistry(log), log, file === undefined ? undefined : new Tracer(file));
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
