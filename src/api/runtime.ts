import { asOffloadError, errors } from '../errors.js';
import { decodeBundle } from '../image/bundle.js';
import type { Plugin } from '../plugins/interface.js';
import type { HostCall, HostFunctions } from './host-functions.js';
import { ImageRegistry } from '../runtime/image-registry.js';
import { InfoLog, infoEnabled } from '../runtime/info-log.js';
import type { KernelPrint, RuntimeOptions } from '../runtime/options.js';
import type { HostView, MapSpec } from '../omp/map.js';
import { Mapper, type TargetArgument } from '../omp/mapper.js';
import {
  runSpread,
  type SpreadArgument,
  type SpreadKernel,
  type SpreadOptions,
  type SpreadRange,
  type SpreadResult,
} from '../omp/spread.js';
import { registeredPlugins } from '../plugins/builtin.js';
import { debug, debugFromEnv, dropped } from '../runtime/debug.js';
import { webgpuUnavailable } from '../plugins/webgpu/adapter.js';
import { traceFile, Tracer, tracing, type ProxyTrace, type TraceDocument } from '../runtime/trace.js';
import { checkInteger, checkOptions, describe } from './checks.js';
import { RuntimeContext } from './context.js';
import { Device } from './device.js';
import { runtimeMetrics } from './metrics.js';
import type { RuntimeMetrics } from '../runtime/device-counters.js';
import { Kernel } from './kernel.js';
import { Library } from './library.js';
import { MAX_TIMEOUT_MS, type LaunchGrid } from './queue.js';
import { parseMilliseconds, type Environment } from '../units.js';
import { abortable, abortError, checkSignal } from '../abort.js';
import { environment, letGo } from '../platform.js';
import { readBytes } from '../platform-files.js';

// What the published declarations use of the platform beyond ES2022, declared as Node and the
// DOM declare it, so that a program type-checks them without @types/node and without the DOM
// library (both merge with these when present).
declare global {
  // `await using` (explicit resource management): Node 20+ has the symbols, lib es2022 does not
  // declare them (lib esnext.disposable and @types/node do, the same way).
  interface SymbolConstructor {
    readonly dispose: unique symbol;
    readonly asyncDispose: unique symbol;
  }
  interface Disposable {
    [Symbol.dispose](): void;
  }
  interface AsyncDisposable {
    [Symbol.asyncDispose](): PromiseLike<void>;
  }
  /** The platform's AbortSignal (Node's, the DOM's): what the runtime reads of one. */
  interface AbortSignal {
    readonly aborted: boolean;
  }
}

/** Options of `runtime.shutdown()`. */
export interface ShutdownOptions {
  /**
   * How long to wait for work already enqueued before stopping the devices anyway (what is left
   * then fails with DEVICE_LOST; a kernel still running is stopped). Default 5000 ms.
   */
  graceMs?: number;
}

const DEFAULT_GRACE_MS = 5000;

/**
 * A WHATWG `URL` object (Node's and a page's global), named by its shape so that the published
 * declarations need neither the DOM library nor @types/node; `register` takes only a real `URL`.
 */
export interface BundleUrl {
  readonly href: string;
  readonly protocol: string;
}

/**
 * One offloading runtime: its devices (local first, then remote), registered libraries and
 * everything allocated through it. `shutdown()` frees all of it.
 */
export class Runtime {
  readonly devices: readonly Device[];
  private shutdownPromise: Promise<void> | undefined;
  private readonly mapper: Mapper;
  /** Contexts made from this runtime; shut down before it. */
  private readonly children = new Set<Runtime>();
  /** Plugins init left out, and why (a page that is not cross-origin isolated has no host device). */
  private readonly leftOut: readonly string[];

  /** @internal Use `Offload.init()`. */
  constructor(
    private readonly context: RuntimeContext,
    private readonly plugins: readonly Plugin[],
    devices: Device[],
    private readonly parent?: Runtime,
    leftOut?: readonly string[],
  ) {
    this.leftOut = leftOut ?? parent?.leftOut ?? [];
    this.devices = Object.freeze(devices);
    this.mapper = new Mapper(context.info, context.tracer, (device, kernel) => this.checkTarget(device, kernel));
  }

  /**
   * A context: a runtime over the same devices (the same ids, the same hardware) whose device
   * memory, libraries, buffers and queues are its own, as a CUDA context is. A kernel launched
   * in one context reaches only that context's memory, whatever address it computes; memory a
   * context gets is zeroed. A server that runs kernels for several clients gives each client
   * one (`offload proxy` does). `shutdown()` of a context frees everything it made and leaves
   * the devices to this runtime; shutting this runtime down shuts its contexts down first.
   */
  async createContext(options?: ContextOptions): Promise<Runtime> {
    this.context.checkOpen();
    const opts = checkOptions(options, 'createContext: options') as ContextOptions;
    const { info, tracer, launchTimeoutMs } = this.context;
    if (opts.hostCall !== undefined && typeof opts.hostCall !== 'function') {
      throw errors.invalidArgument(
        `createContext: options.hostCall must be a function, got ${describe(opts.hostCall)}`,
      );
    }
    // A context calls the runtime's host functions, unless it is given where its calls go.
    const hostCall = opts.hostCall ?? this.context.hostCall;
    const print = checkPrint(opts.print, 'createContext') ?? this.context.print;
    const context = new RuntimeContext(
      new ImageRegistry(info),
      info,
      opts.tracer ?? tracer,
      launchTimeoutMs,
      print,
      this.context.hostFunctions,
      hostCall,
    );
    const plugins: Plugin[] = [];
    const devices: Device[] = [];
    try {
      for (const parent of this.plugins) {
        const plugin = await parent.createContext();
        plugins.push(plugin);
        const count = await plugin.init();
        for (let index = 0; index < count; index++)
          devices.push(new Device(devices.length, plugin.device(index), context));
      }
    } catch (error) {
      for (const plugin of plugins.reverse())
        await plugin.deinit().catch(dropped('createContext', `stopping plugin ${plugin.name} after a failed context`));
      throw asOffloadError(error, 'creating a context');
    }
    const child = new Runtime(context, plugins, devices, this);
    this.children.add(child);
    return child;
  }

  private ownDevice(device: unknown, what: string): Device {
    this.context.checkOpen();
    if (!(device instanceof Device) || !this.devices.includes(device)) {
      throw errors.invalidArgument(
        `${what}: the first argument must be a Device of this runtime, got ${describe(device)}`,
      );
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

  /**
   * OpenMP `target update`: copies present ranges to (`to`) or from (`from`) the device; a range
   * not present is skipped, unless `present: true` (then NOT_FOUND).
   */
  async update(
    device: Device,
    motion: { to?: HostView | HostView[]; from?: HostView | HostView[]; present?: boolean },
  ): Promise<void> {
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
  target(device: Device, kernel: Kernel, grid: LaunchGrid, args: readonly TargetArgument[] = []): Promise<void> {
    // Not async, so that V8 inlines it into a loop of calls: the mapper's promise is returned as
    // it is. The mapper never throws, and checks the device and kernel (checkTarget).
    return this.mapper.target(device, kernel, grid, args);
  }

  /**
   * One data-parallel launch over several devices: `range` (`{ teams: n }` of a team kernel,
   * `{ items: n }` of a per-item kernel) is cut into chunks that go to whichever device is
   * ready, sized from each device's measured throughput; each argument says how its data follows
   * a chunk (`map.to(x)`: broadcast read-only; `spread.part(map.tofrom(y), per)`: `per` elements
   * a team or item; `spread.first`, `spread.count`, `spread.span(per, n)` or a
   * function of the chunk: scalars). Resolves when every chunk's results are in the host arrays.
   * A device lost on the way (DEVICE_LOST) has its chunk re-run on the others and is named in
   * `result.lost`; it rejects when every device is lost, and with the first other failure (a
   * trap, a time limit).
   */
  spread(
    devices: readonly Device[],
    kernel: SpreadKernel,
    range: SpreadRange,
    args: readonly SpreadArgument[],
    options?: SpreadOptions,
  ): Promise<SpreadResult> {
    return runSpread(
      { devices: this.devices, info: this.context.info, checkOpen: () => this.context.checkOpen() },
      devices,
      kernel,
      range,
      args,
      options,
    );
  }

  /** Throws unless `device` is one of this runtime's and `kernel` a Kernel loaded for it. */
  private checkTarget(device: unknown, kernel: unknown): void {
    const own = this.ownDevice(device, 'target');
    if (!(kernel instanceof Kernel) || kernel.device !== own)
      throw errors.invalidArgument(
        `target: the kernel must be a Kernel loaded for device ${own.id} (device.kernel(library, name)), got ${describe(kernel)}`,
        own.id,
      );
  }

  /**
   * The program's functions its kernels may call with the device library's hostCall (on devices
   * whose `info.hostCalls` is true, behind a proxy too): `rt.hostFunctions.add('name', fn)`.
   * Contexts made with createContext() share them.
   */
  get hostFunctions(): HostFunctions {
    return this.context.hostFunctions;
  }

  /**
   * What init went on without, one sentence each: an optional proxy (`optionalProxies`, or
   * `host:port?` in OFFLOAD_PROXIES) that could not be reached or did not answer; a device this
   * platform cannot have (the host device in a page that is not cross-origin isolated, naming
   * the headers to send). Empty when everything named was found.
   */
  get diagnostics(): readonly string[] {
    return [...this.leftOut, ...this.plugins.flatMap((plugin) => plugin.diagnostics ?? [])];
  }

  /** @internal Contexts made from this runtime and not shut down (diagnostics). */
  get contextCount(): number {
    return this.children.size;
  }

  /** @internal Queues this runtime and its contexts hold on to (those with work pending; diagnostics). */
  get queuesHeld(): number {
    return [...this.children].reduce((sum, child) => sum + child.queuesHeld, this.context.busy.size);
  }

  /** @internal The mapping table of a device (tests and diagnostics). */
  mappedRanges(device: Device): number {
    return this.mapper.table(this.ownDevice(device, 'mappedRanges')).size;
  }

  /**
   * What this runtime's devices have done and hold now: launches by outcome and their time,
   * bytes copied in and out, memory held against each device's size, operations in flight (the
   * figures a proxy serves at /metrics, for the program's own devices; a remote device as this
   * program sees it). Launch time counts from the first call on. `offload devices --watch` prints it.
   */
  metrics(): RuntimeMetrics {
    return runtimeMetrics(this.context, this.devices);
  }

  /** The device with id `id` (its index in `devices`). Throws NOT_FOUND. */
  device(id: number): Device {
    checkInteger(id, 'device: id', 0, Number.MAX_SAFE_INTEGER);
    const device = this.devices[id];
    if (!device)
      throw errors.notFound(
        `there is no device ${id}; this runtime has ${this.devices.length} (ids 0 to ${this.devices.length - 1})`,
      );
    return device;
  }

  /**
   * Registers a bundle: a path to a `.offload` file or its `file:` URL (in a page, its URL), or
   * its bytes. Images load on first use per device.
   */
  async register(bundle: string | BundleUrl | Uint8Array | ArrayBuffer): Promise<Library> {
    this.context.checkOpen();
    let bytes: Uint8Array;
    if (typeof bundle === 'string' || bundle instanceof URL) {
      // A file (path or file: URL) in Node; a URL in a page (fetched once per page: platform-files.browser.ts).
      try {
        bytes = await readBytes(bundle);
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT')
          throw errors.notFound(`register: no bundle at '${bundle}' (build one with 'offload build')`);
        throw asOffloadError(error, `register: cannot read '${bundle}'`, { code: 'INVALID_ARGUMENT' });
      }
    } else if (bundle instanceof Uint8Array) {
      bytes = bundle;
    } else if (bundle instanceof ArrayBuffer) {
      bytes = new Uint8Array(bundle);
    } else {
      throw errors.invalidArgument(
        `register: expected a bundle path or URL or its bytes (Uint8Array or ArrayBuffer), got ${describe(bundle)}`,
      );
    }
    const record = this.context.registry.register(decodeBundle(bytes));
    return new Library(record, this.context);
  }

  /**
   * Waits for the work enqueued on every queue (for at most `graceMs`), unregisters every
   * library (last registered first), and stops every plugin; contexts made from this runtime
   * first. Work still unfinished after the grace period fails with DEVICE_LOST, and a kernel
   * still running is stopped, so shutdown ends even while a kernel loops. Idempotent;
   * afterwards every call on this runtime's objects rejects with DEVICE_LOST.
   */
  shutdown(options?: ShutdownOptions): Promise<void> {
    if (!this.shutdownPromise) {
      const opts = checkOptions(options, 'shutdown: options');
      const graceMs =
        opts.graceMs === undefined
          ? DEFAULT_GRACE_MS
          : checkInteger(opts.graceMs, 'shutdown: options.graceMs', 0, MAX_TIMEOUT_MS);
      this.shutdownPromise = this.close(graceMs);
    }
    return this.shutdownPromise;
  }

  /** `await using runtime = await Offload.init()` shuts it down at the end of the block. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  private async close(graceMs: number): Promise<void> {
    await Promise.all([...this.children].map((child) => child.shutdown({ graceMs })));
    const drained = await settlesWithin(Promise.all([...this.context.busy].map((queue) => queue.drain())), graceMs);
    if (!drained) {
      // Stop the devices first: what is still running fails, and the libraries are then idle.
      this.context.close();
      await this.stopPlugins();
    }
    await this.context.registry.unregisterAll();
    await this.collectTraces();
    this.context.close();
    await this.stopPlugins();
    this.parent?.children.delete(this);
    if (!this.parent) this.context.tracer?.write();
  }

  /** Before the plugins stop: the spans the proxies recorded for this runtime, into its trace. */
  private async collectTraces(): Promise<void> {
    const tracer = this.context.tracer;
    if (!tracer || this.parent) return;
    let index = 0;
    for (const batch of await this.proxyTraces()) tracer.merge(index++, batch.events, batch.clock, batch.dropped);
  }

  /** The spans the plugins' proxies recorded for this runtime so far (none from a plugin that fails to say). */
  private async proxyTraces(): Promise<ProxyTrace[]> {
    const all: ProxyTrace[] = [];
    for (const plugin of this.plugins) {
      const batches = await plugin.traces?.().catch((error: unknown) => {
        dropped('trace', `collecting the spans plugin ${plugin.name}'s devices recorded`)(error);
        return [];
      });
      all.push(...(batches ?? []));
    }
    return all;
  }

  /**
   * The trace so far, as a Chrome trace object (Perfetto and chrome://tracing open it as JSON):
   * one process per device, a track per queue and one for mapping, a span per copy, launch and
   * mapping call, the proxies' spans on this clock. It needs `Offload.init({ trace: true })` (or
   * a trace file). Before shutdown the proxies are asked for their spans now; after it, the whole
   * run's trace. A page saves it as a file with
   * `URL.createObjectURL(new Blob([JSON.stringify(trace)], { type: 'application/json' }))`.
   */
  async trace(): Promise<TraceDocument> {
    if (this.parent) return this.parent.trace();
    const tracer = this.context.tracer;
    if (!tracer)
      throw errors.invalidArgument(
        'trace: this runtime keeps no trace: start it with Offload.init({ trace: true }) (or a trace file, or OFFLOAD_TRACE)',
      );
    if (this.shutdownPromise) {
      await this.shutdownPromise.catch(() => {});
      return tracer.document();
    }
    return tracer.document(await this.proxyTraces());
  }

  private stopped: Promise<void> | undefined;

  private stopPlugins(): Promise<void> {
    this.stopped ??= (async () => {
      for (const plugin of [...this.plugins].reverse())
        await plugin.deinit().catch(dropped('shutdown', `stopping plugin ${plugin.name}`));
    })();
    return this.stopped;
  }
}

/** Whether `promise` settles within `ms` milliseconds (the timer does not hold the process). */
function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    letGo(timer);
    promise.then(
      () => {
        clearTimeout(timer);
        resolve(true);
      },
      () => {
        clearTimeout(timer);
        resolve(true);
      },
    );
  });
}

/** Options of `runtime.createContext`. */
export interface ContextOptions {
  /** Where the context's kernels' print() lines go. Default: where the runtime's go. */
  print?: (line: KernelPrint) => void;
  /**
   * Answers the context's kernels' host calls (kernel, function name, arguments). Default: the
   * runtime's `hostFunctions`. (A proxy sends each client's calls back to that client.)
   */
  hostCall?: (call: HostCall) => Promise<number>;
  /** @internal Where the context's spans go instead of the runtime's trace (a proxy's session that its client traces). */
  tracer?: Tracer;
}

function checkPrint(print: unknown, what: string): ((line: KernelPrint) => void) | undefined {
  if (print !== undefined && typeof print !== 'function')
    throw errors.invalidArgument(`${what}: options.print must be a function, got ${describe(print)}`);
  return print as ((line: KernelPrint) => void) | undefined;
}

/** OFFLOAD_LAUNCH_TIMEOUT: the default time limit of launches, in milliseconds. */
export function launchTimeoutFromEnv(env: Environment = environment()): number | undefined {
  const text = env.OFFLOAD_LAUNCH_TIMEOUT;
  return text === undefined || text === '' ? undefined : parseMilliseconds(text, 'OFFLOAD_LAUNCH_TIMEOUT');
}

async function init(options?: RuntimeOptions): Promise<Runtime> {
  const opts = checkOptions(options, 'Offload.init: options') as RuntimeOptions;
  debug.enabled = debugFromEnv();
  const info = opts.info ?? infoEnabled();
  if (typeof info !== 'boolean' && typeof info !== 'function') {
    throw errors.invalidArgument(`Offload.init: options.info must be a boolean or a function, got ${describe(info)}`);
  }
  if (
    opts.proxies !== undefined &&
    (!Array.isArray(opts.proxies) || !opts.proxies.every((p) => typeof p === 'string'))
  ) {
    throw errors.invalidArgument(
      `Offload.init: options.proxies must be an array of 'host:port' strings, got ${describe(opts.proxies)}`,
    );
  }
  if (opts.optionalProxies !== undefined && typeof opts.optionalProxies !== 'boolean') {
    throw errors.invalidArgument(
      `Offload.init: options.optionalProxies must be a boolean, got ${describe(opts.optionalProxies)}`,
    );
  }
  if (opts.token !== undefined && typeof opts.token !== 'string') {
    throw errors.invalidArgument(`Offload.init: options.token must be a string, got ${describe(opts.token)}`);
  }
  if (opts.trace !== undefined && typeof opts.trace !== 'string' && typeof opts.trace !== 'boolean') {
    throw errors.invalidArgument(
      `Offload.init: options.trace must be a file path, or true to keep the trace for runtime.trace(), got ${describe(opts.trace)}`,
    );
  }
  const signal = checkSignal(opts.signal, 'Offload.init: options.signal');
  if (opts.connectTimeoutMs !== undefined)
    checkInteger(opts.connectTimeoutMs, 'Offload.init: options.connectTimeoutMs', 1, MAX_TIMEOUT_MS);
  if (opts.requestTimeoutMs !== undefined)
    checkInteger(opts.requestTimeoutMs, 'Offload.init: options.requestTimeoutMs', 1, MAX_TIMEOUT_MS);
  if (signal?.aborted) throw abortError(signal, 'Offload.init');
  const launchTimeoutMs =
    opts.launchTimeoutMs === undefined
      ? launchTimeoutFromEnv()
      : checkInteger(opts.launchTimeoutMs, 'Offload.init: options.launchTimeoutMs', 1, MAX_TIMEOUT_MS);
  const building = build(opts, info, launchTimeoutMs);
  if (!signal) return building;
  return abortable(building, signal, 'Offload.init').catch((error: unknown) => {
    // Given up: what init still builds is shut down once it is there.
    if (signal.aborted)
      void building
        .then((runtime) => runtime.shutdown({ graceMs: 0 }))
        .catch(dropped('Offload.init', 'making (then shutting down) the runtime given up on its signal'));
    throw error;
  });
}

async function build(
  opts: RuntimeOptions,
  info: boolean | ((line: string) => void),
  launchTimeoutMs: number | undefined,
): Promise<Runtime> {
  const log = typeof info === 'function' ? new InfoLog(true, info) : new InfoLog(info);
  const context = new RuntimeContext(
    new ImageRegistry(log),
    log,
    tracing(opts.trace) ? new Tracer(traceFile(opts.trace)) : undefined,
    launchTimeoutMs,
    checkPrint(opts.print, 'Offload.init'),
  );
  const plugins: Plugin[] = [];
  const devices: Device[] = [];
  const leftOut: string[] = [];
  let made: Promise<Plugin | undefined>[] = [];
  try {
    // Every factory starts at once (a GPU probe overlaps the host workers' start and the proxies'
    // connects); the plugins still take their places in priority order.
    const registered = registeredPlugins();
    made = registered.map(({ factory }) => Promise.resolve().then(() => factory(opts)));
    for (const promise of made) promise.catch(() => {}); // each is awaited below, or settled in the catch
    for (const [index, promise] of made.entries()) {
      const plugin = await promise;
      const name = registered[index]!.name;
      if (!plugin) {
        const unavailable = registered[index]!.unavailable?.(opts);
        if (unavailable !== undefined) leftOut.push(`plugin ${name} left out: ${unavailable}`);
        debug.log(
          `plugin ${name}`,
          unavailable !== undefined
            ? `not loaded: ${unavailable}`
            : name === 'webgpu' && webgpuUnavailable()
              ? `not loaded: ${webgpuUnavailable()}`
              : 'not loaded: nothing for it here (see Offload.init options)',
        );
        continue;
      }
      plugins.push(plugin);
      const count = await plugin.init();
      debug.log(
        `plugin ${name}`,
        `loaded with ${count} device${count === 1 ? '' : 's'}, ids ${devices.length} to ${devices.length + count - 1}`,
      );
      for (let index = 0; index < count; index++)
        devices.push(new Device(devices.length, plugin.device(index), context));
    }
  } catch (error) {
    // Plugins other factories made meanwhile are stopped too.
    for (const other of await Promise.allSettled(made)) {
      if (other.status === 'fulfilled' && other.value && !plugins.includes(other.value)) plugins.push(other.value);
    }
    for (const plugin of plugins.reverse())
      await plugin.deinit().catch(dropped('Offload.init', `stopping plugin ${plugin.name} after a failed init`));
    throw asOffloadError(error, 'starting the runtime (Offload.init)');
  }
  return new Runtime(context, plugins, devices, undefined, leftOut);
}

/** The entry point: `const runtime = await Offload.init()`. */
export const Offload = Object.freeze({ init });
