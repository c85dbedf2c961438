/**
 * Typed host wrappers of a bundle, as a compiler would generate them: `<output>.js` registers the
 * bundle next to it and launches each kernel through `runtime.target`; `<output>.d.ts` types each
 * kernel's arguments after its manifest signature.
 */
import { errors } from '../errors.js';
import { isLaunchParam, isPerItem, type EntryInfo, type Manifest, type ParamType } from '../image/manifest.js';

/** Members of the wrapper object besides the kernels; `then` would make it a thenable, which `await load()` would call. */
const OWN_MEMBERS = new Set(['library', 'unload', 'then']);

/** Parameter names of every wrapper function before the kernel's own. */
const LEADING_PARAMS = new Set(['device', 'grid']);

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
import { fileURLToPath } from 'node:url';

const BUNDLE = fileURLToPath(new URL(${bundleUrl}, import.meta.url));
const KERNELS = ${JSON.stringify(names)};

/** Registers the bundle next to this file with \`runtime\` and returns one launch function per kernel. */
export async function load(runtime) {
  const library = await runtime.register(BUNDLE);
  const launcher = (name) => {
    // Resolved once per device; the promise is kept so that concurrent first calls share it,
    // and dropped when it fails so that the next call tries again.
    const kernels = new Map();
    return async (device, grid, ...args) => {
      // runtime.target reports a device that is not this runtime's, and checks the arguments.
      if (!runtime.devices.includes(device)) return runtime.target(device, undefined, grid, args);
      let kernel = kernels.get(device);
      if (kernel === undefined) {
        kernel = device.kernel(library, name);
        kernels.set(device, kernel);
        kernel.catch(() => kernels.delete(device)); // forgotten, to try again; the error goes to the await below
      }
      return runtime.target(device, await kernel, grid, args);
    };
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
    const params = [
      'device: Device',
      `grid: ${perItem ? 'ItemsGrid' : 'Grid'}`,
      ...parameterNames(own).map((name, i) => `${name}: ${TS_TYPE[own.params[i]!.type]}`),
    ];
    const signature = `${entry.name}(${perItem ? 'i: item, ' : ''}${own.params.map((p) => `${p.name}: ${p.type}`).join(', ')})`;
    return `  /** Launches \`${signature}\`. */
  ${memberName(entry.name)}(${params.join(', ')}): Promise<void>;`;
  });
  return `${header([])}
import type { Buffer, Device, DevicePointer, Grid, ${kernelsOf(manifest).some((entry) => isPerItem(entry.params)) ? 'ItemsGrid, ' : ''}Library, MapSpec, Runtime } from 'offload-ts';

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

/** The entry's parameter names as distinct identifiers that are no reserved word and differ from `device` and `grid`. */
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
