/**
 * Reads the kernels of a WGSL source by the WGSL kernel ABI (docs/wgsl-abi.md): every `@compute`
 * entry point is a kernel; the group-0 storage buffers it uses are its pointer parameters and its
 * group-0 uniform buffer holds its scalar parameters. The parser is wgsl_reflect's; it checks the
 * syntax, not the types: the device's shader compiler does that when the image loads.
 */
import { WgslReflect, type VariableInfo } from 'wgsl_reflect/wgsl_reflect.module.js';
import { errors } from '../errors.js';
import { FAULT_BINDING_NAME } from '../image/manifest.js';
import type { EntryInfo, ParamInfo, WgslKernelInfo, WgslParamInfo, WorkgroupSize } from '../image/manifest.js';

export const WGSL_TRIPLE = 'wgsl-unknown-webgpu';

/** The override constant a WebGPU device sets to a launch's `teamMemoryBytes` (docs/wgsl-abi.md). */
export const TEAM_MEMORY_OVERRIDE = 'team_memory_bytes';

/** WGSL scalar types a kernel parameter may have, and how they travel. */
const SCALAR_TYPE_OF = new Map<string, 'i32' | 'f32'>([
  ['i32', 'i32'],
  ['u32', 'i32'],
  ['f32', 'f32'],
]);

/** The kernels of `source` (shown as `file` in messages), in source order. */
export function wgslKernels(source: string, file: string): WgslKernelInfo[] {
  let reflect: WgslReflect;
  try {
    reflect = new WgslReflect(source);
  } catch (cause) {
    // wgsl_reflect's messages end with "Line: N".
    const message = (cause as Error).message.replace(/\.*\s*Line: (\d+)$/, '');
    const line = /Line: (\d+)$/.exec((cause as Error).message)?.[1];
    throw errors.invalidArgument(`WGSL parse error: ${file}${line ? `:${line}` : ''}: ${message}`);
  }
  const teamMemory = reflect.overrides.some((override) => override.name === TEAM_MEMORY_OVERRIDE);
  const kernels = reflect.entry.compute.map((entry) => {
    const where = `${file}: kernel '${entry.name}'`;
    const resources = [...entry.resources].sort((a, b) => a.group - b.group || a.binding - b.binding);
    const params: WgslParamInfo[] = [];
    let uniform: WgslKernelInfo['uniform'];
    let fault = false;
    for (const resource of resources) {
      // The fault word of translated kernels (docs/wgsl-abi.md, "Faults"): the device's, not a parameter.
      if (
        resource.group === 1 &&
        resource.binding === 0 &&
        resource.name === FAULT_BINDING_NAME &&
        isStorage(resource)
      ) {
        fault = true;
        continue;
      }
      const what = `${where}: '${resource.name}' (@group(${resource.group}) @binding(${resource.binding}))`;
      if (resource.group !== 0) throw errors.invalidArgument(`${what}: kernel parameters are bound in group 0`);
      if (isStorage(resource)) {
        params.push({
          name: resource.name,
          type: 'ptr',
          binding: resource.binding,
          readOnly: resource.access === 'read',
        });
      } else if (isUniform(resource)) {
        if (uniform)
          throw errors.invalidArgument(`${what}: a kernel has one uniform buffer for its scalars, this is the second`);
        uniform = { binding: resource.binding, bytes: resource.size };
        params.push(...scalarParams(resource, what));
      } else {
        throw errors.invalidArgument(
          `${what}: only storage buffers (pointers) and one uniform buffer (scalars) can be kernel parameters`,
        );
      }
    }
    return {
      name: entry.name,
      params,
      workgroupSize: workgroupSizeOf(entry.attributes ?? [], where),
      ...(uniform ? { uniform } : {}),
      ...(teamMemory ? { teamMemory: TEAM_MEMORY_OVERRIDE } : {}),
      ...(fault ? { fault } : {}),
    };
  });
  if (kernels.length === 0) throw errors.invalidArgument(`${file} has no @compute entry point`);
  return kernels;
}

// wgsl_reflect's resource types: 0 uniform, 1 storage (its ResourceType enum).
function isUniform(resource: VariableInfo): boolean {
  return (resource.resourceType as number) === 0;
}
function isStorage(resource: VariableInfo): boolean {
  return (resource.resourceType as number) === 1;
}

/** A uniform struct's members are parameters at their offsets; a scalar uniform is one. */
function scalarParams(resource: VariableInfo, what: string): WgslParamInfo[] {
  const members = resource.type.isStruct
    ? (resource.members ?? [])
    : [{ name: resource.name, type: resource.type, offset: 0 }];
  return members.map((member) => {
    const type = SCALAR_TYPE_OF.get(member.type.name);
    if (!type) {
      throw errors.invalidArgument(
        `${what}: scalar parameter '${member.name}' has type ${member.type.name}; kernels take i32, u32 and f32 scalars`,
      );
    }
    return { name: member.name, type, offset: member.offset };
  });
}

function workgroupSizeOf(attributes: { name: string; value: unknown }[], where: string): WorkgroupSize {
  const attribute = attributes.find((a) => a.name === 'workgroup_size');
  const values = (Array.isArray(attribute?.value) ? attribute.value : [attribute?.value]).map((v) => String(v).trim());
  if (!attribute || !values[0]) throw errors.invalidArgument(`${where}: missing @workgroup_size`);
  const sizes = values.map((value) => {
    const fixed = /^(\d+)[ui]?$/.exec(value);
    if (fixed) return Number(fixed[1]);
    if (/^[A-Za-z_]\w*$/.test(value)) return value;
    throw errors.invalidArgument(
      `${where}: @workgroup_size(${values.join(', ')}): each size must be a number or the name of an override constant, not ${value}`,
    );
  });
  return sizes.length === 1 ? sizes[0]! : sizes;
}

/**
 * Joins the WGSL kernels with the wasm image's entries (when there is one): a kernel in both
 * keeps the wasm parameter order and names, and its WGSL pointers and scalars must pair with the
 * wasm ones in order and type. Returns the WGSL kernels in manifest order and the manifest's
 * entries (the wasm ones plus the WGSL-only kernels).
 */
export function joinEntries(
  wasmEntries: EntryInfo[],
  kernels: WgslKernelInfo[],
  file: string,
): { kernels: WgslKernelInfo[]; entries: EntryInfo[] } {
  const entries = [...wasmEntries];
  const joined = kernels.map((kernel) => {
    const twin = wasmEntries.find((entry) => entry.kind === 'kernel' && entry.name === kernel.name);
    if (!twin) {
      entries.push({
        name: kernel.name,
        kind: 'kernel',
        params: kernel.params.map(({ name, type }): ParamInfo => ({ name, type })),
      });
      return kernel;
    }
    const pointers = kernel.params.filter((param) => param.type === 'ptr');
    const scalars = kernel.params.filter((param) => param.type !== 'ptr');
    const shown = (params: { name: string; type: string }[]) =>
      `(${params.map((p) => `${p.name}: ${p.type}`).join(', ')})`;
    const mismatch = () =>
      errors.invalidArgument(
        `${file}: kernel '${kernel.name}' ${shown(kernel.params)} does not match its wasm image ${shown(twin.params)}: ` +
          `pointers must pair with storage buffers in binding order, scalars with the uniform's members in order, with the same types`,
      );
    const params = twin.params.map((param): WgslParamInfo => {
      const next = param.type === 'ptr' ? pointers.shift() : scalars.shift();
      if (!next || next.type !== param.type) throw mismatch();
      return { ...next, name: param.name };
    });
    if (pointers.length > 0 || scalars.length > 0) throw mismatch();
    return { ...kernel, params };
  });
  return { kernels: joined, entries };
}
