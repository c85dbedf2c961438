/**
 * Typed host wrappers of a bundle, as a compiler would generate them: `<output>.js` registers the
 * bundle next to it and launches each kernel through `runtime.target`; `<output>.d.ts` types each
 * kernel's arguments after its manifest signature.
 */
import { errors } from '../errors.js';
import { isLaunchParam, isPerItem, type EntryInfo, type Manifest, type ParamType } from '../image/manifest.js';

/** Members of the wrapper object besides the kernels; `then` would make it a thenable, which `await load()` would call. */
const OWN_MEMBERS = new Set(['library', 'unload', 'then']);

/** Parameter names of the wrapper functions before the kernel's own. */
const LEADING_PARAMS = new Set(['device', 'grid', 'queue']);

/** Words a parameter of a strict-mode (module) declaration cannot be named. */
const RESERVED = new Set(
  (
    'break case catch class const continue debugger default delete do else enum export extends false finally for ' +
    'function if import in instanceof new null return super switch this throw true try typeof var void while with ' +
    'implements interface let package private protected public static yield await arguments eval'
  ).split(' '),
);

const TS_TYPE: Record<ParamType, string> = {
  i32: 'number',
  i64: 'bigint',
  f32: 'number',
  f64: 'number',
  ptr: 'Buffer | DevicePointer | MapSpec',
};

/** A pointer argument of a queue launch, as queue.launch takes it. */
const QUEUE_POINTER = 'Buffer | DevicePointer';

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/**
 * The wrapper module (`<output>.js`).
 * @param bundleFileName the bundle's file name, in the wrapper's directory.
 * @param sources the kernel sources, as the header comment names them.
 * @throws OffloadError INVALID_ARGUMENT when a kernel is named like a member of the wrapper object.
 */
export function wrapperSource(manifest: Manifest, bundleFileName: string, sources: readonly string[]): string {
  const names = kernelsOf(manifest).map((entry) => entry.name);
  // Encoded, so that '#', '?' or '%' in the file name stay part of the path.
  const bundleUrl = JSON.stringify(`./${encodeURIComponent(bundleFileName)}`);
  return `${header(sources)}
// A file: URL in Node, the page's URL of the bundle beside this module in a page.
const BUNDLE = new URL(${bundleUrl}, import.meta.url);
const KERNELS = ${JSON.stringify(names)};

/**
 * An OffloadError made without importing offload-ts: its class recognises this brand, so
 * \`instanceof OffloadError\` and \`OffloadError.is(error, code)\` hold across installs.
 */
function offloadError(code, message, device) {
  const error = new Error(message);
  error.name = 'OffloadError';
  Object.defineProperties(error, {
    code: { value: code, enumerable: true },
    device: { value: device, enumerable: true },
    [Symbol.for('offload-ts.OffloadError')]: { value: true },
  });
  return error;
}

/** Registers the bundle next to this file with \`runtime\` and returns one launch function per kernel. */
export async function load(runtime) {
  const library = await runtime.register(BUNDLE);
  const launcher = (name) => {
    // Resolved once per device; the promise is kept so that concurrent first calls share it,
    // and dropped when it fails so that the next call tries again. \`ready\` holds the kernels
    // resolved, for the synchronous queue launches.
    const kernels = new Map();
    const ready = new Map();
    const kernel = (device) => {
      let pending = kernels.get(device);
      if (pending === undefined) {
        pending = device.kernel(library, name);
        kernels.set(device, pending);
        pending.then(
          (resolved) => ready.set(device, resolved),
          () => kernels.delete(device), // forgotten, to try again; the error goes to the caller's await
        );
      }
      return pending;
    };
    const launch = async (device, grid, ...args) => {
      // runtime.target reports a device that is not this runtime's, and checks the arguments.
      if (!runtime.devices.includes(device)) return runtime.target(device, undefined, grid, args);
      return runtime.target(device, await kernel(device), grid, args);
    };
    launch.kernel = async (device) => {
      if (!runtime.devices.includes(device))
        throw offloadError('INVALID_ARGUMENT', \`kernel '\${name}': the device must be one of this runtime's devices, got \${typeof device}\`);
      return kernel(device);
    };
    // A queue launch is synchronous, as queue.launch is: the kernel must already be loaded for
    // the queue's device; queue.launch then checks the grid and the arguments.
    launch.launch = (queue, grid, ...args) => {
      const device = queue !== null && typeof queue === 'object' ? queue.device : undefined;
      if (!runtime.devices.includes(device))
        throw offloadError('INVALID_ARGUMENT', \`launch of '\${name}': the queue must be a Queue of one of this runtime's devices (device.queue()), got \${queue === null ? 'null' : typeof queue}\`);
      const resolved = ready.get(device);
      if (resolved === undefined)
        throw offloadError(
          'INVALID_ARGUMENT',
          \`launch of '\${name}' on a queue of device \${device.id}: the kernel is not loaded for device \${device.id} yet; await k.\${name}.kernel(device) (or an awaited k.\${name}(device, ...)) once before launching it on that device's queues\`,
          device.id,
        );
      return queue.launch(resolved, grid, args);
    };
    return Object.freeze(launch);
  };
  // fromEntries defines own properties whatever the kernel names are (even '__proto__').
  return Object.freeze({
    ...Object.fromEntries(KERNELS.map((name) => [name, launcher(name)])),
    library,
    unload: () => library.unregister(),
  });
}
`;
}

/**
 * The wrapper's declarations (`<output>.d.ts`): i32, f32 and f64 parameters take numbers, i64
 * ones bigints, pointers a Buffer, a DevicePointer or a map clause.
 * @throws OffloadError INVALID_ARGUMENT when a kernel is named like a member of the wrapper object.
 */
export function wrapperTypes(manifest: Manifest): string {
  const members = kernelsOf(manifest).map((entry) => {
    // A per-item kernel takes `{ items }`; the launch passes its item counts, its last three parameters.
    const perItem = isPerItem(entry.params);
    const own = { ...entry, params: entry.params.filter((param) => !isLaunchParam(param.name)) };
    const names = parameterNames(own);
    const gridType = perItem ? 'ItemsGrid' : 'Grid';
    const typed = (pointer: string): string[] =>
      names.map((name, i) => {
        const type = own.params[i]!.type;
        return `${name}: ${type === 'ptr' ? pointer : TS_TYPE[type]}`;
      });
    const awaited = ['device: Device', `grid: ${gridType}`, ...typed(TS_TYPE.ptr)];
    // A queue launch takes what queue.launch takes: no map clause, which needs the awaited form.
    const queued = ['queue: Queue', `grid: ${gridType}`, ...typed(QUEUE_POINTER)];
    const signature = `${entry.name}(${perItem ? 'i: item, ' : ''}${own.params.map((p) => `${p.name}: ${p.type}`).join(', ')})`;
    return `  /** Launches \`${signature}\` and resolves when it is done. */
  readonly ${memberName(entry.name)}: {
    (${awaited.join(', ')}): Promise<void>;
    /** Enqueues \`${signature}\` on \`queue\`; the kernel must be loaded for the queue's device (\`kernel(device)\`, or an awaited launch there). */
    launch(${queued.join(', ')}): Event;
    /** The kernel on \`device\`, loaded on first use. */
    kernel(device: Device): Promise<Kernel>;
  };`;
  });
  return `${header([])}
import type { Buffer, Device, DevicePointer, Event, Grid, ${kernelsOf(manifest).some((entry) => isPerItem(entry.params)) ? 'ItemsGrid, ' : ''}Kernel, Library, MapSpec, Queue, Runtime } from 'offload-ts';

/** The kernels of bundle ${JSON.stringify(manifest.name)}. */
export interface Kernels {
${members.join('\n')}
  /** The registered bundle. */
  readonly library: Library;
  /** Unregisters the bundle. */
  unload(): Promise<void>;
}

/** Registers the bundle next to this file with \`runtime\`. */
export function load(runtime: Runtime): Promise<Kernels>;
`;
}

function header(sources: readonly string[]): string {
  return `// Generated by offload build${sources.length > 0 ? ` from ${sources.join(', ')}` : ''}; do not edit.`;
}

function kernelsOf(manifest: Manifest): EntryInfo[] {
  const kernels = manifest.entries.filter((entry) => entry.kind === 'kernel');
  const clash = kernels.find((entry) => OWN_MEMBERS.has(entry.name));
  if (clash !== undefined) {
    throw errors.invalidArgument(
      `kernel '${clash.name}' cannot have a typed wrapper: ${[...OWN_MEMBERS].map((m) => `'${m}'`).join(', ')} ` +
        `are names the wrapper object needs; rename the kernel`,
    );
  }
  return kernels;
}

function memberName(name: string): string {
  return IDENTIFIER.test(name) ? name : JSON.stringify(name);
}

/** The entry's parameter names as distinct identifiers that are no reserved word and differ from `device`, `grid` and `queue`. */
function parameterNames(entry: EntryInfo): string[] {
  const taken = new Set(LEADING_PARAMS);
  return entry.params.map(({ name }) => {
    let identifier = name.replace(/[^\w$]/g, '_');
    if (!IDENTIFIER.test(identifier)) identifier = `_${identifier}`;
    while (RESERVED.has(identifier) || taken.has(identifier)) identifier += '_';
    taken.add(identifier);
    return identifier;
  });
}
