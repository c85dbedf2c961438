/**
 * Checks the kernel signatures the compiler resolved against the kernel ABI and turns them into
 * manifest entries: a kernel is non-generic, returns void and takes only required scalar or
 * usize (device pointer) parameters.
 */
import { errors } from '../errors.js';
import type { EntryInfo, ParamInfo, ParamType } from '../image/manifest.js';
import type { KernelSignature } from './compiler-job.js';

/** AssemblyScript types a kernel parameter may have, and how they travel (usize is a device pointer). */
const PARAM_TYPE_OF = new Map<string, ParamType>([
  ['i32', 'i32'],
  ['u32', 'i32'],
  ['i16', 'i32'],
  ['u16', 'i32'],
  ['i8', 'i32'],
  ['u8', 'i32'],
  ['bool', 'i32'],
  ['isize', 'i32'],
  ['i64', 'i64'],
  ['u64', 'i64'],
  ['f32', 'f32'],
  ['f64', 'f64'],
  ['usize', 'ptr'],
]);

/** The resolved type of a typed device pointer (`ptr<T>` of the device library) and its element type. */
const TYPED_POINTER = /^~lib\/offload-ts\/device\/ptr<(.+)>$/;
/** Element types a `ptr<T>` may have: the types load<T>/store<T> move. */
export const POINTER_ELEMENT_TYPES = ['i8', 'u8', 'i16', 'u16', 'i32', 'u32', 'i64', 'u64', 'f32', 'f64'] as const;

/** The element type of a resolved `ptr<T>` type name, or undefined when `type` is no typed pointer. */
export function pointerElementOf(type: string): string | undefined {
  return TYPED_POINTER.exec(type)?.[1];
}

/**
 * The manifest entries of `kernels`, in order. Signatures the compiler could not resolve are
 * skipped (the compiler reports those itself).
 * @param displayPath turns a compiler source path into the path to show in messages.
 * @throws OffloadError INVALID_ARGUMENT listing every kernel that breaks the ABI, one per line,
 *   naming the kernel, its file and the offending parameter with its type.
 */
export function kernelEntries(kernels: KernelSignature[], displayPath: (source: string) => string): EntryInfo[] {
  const problems: string[] = [];
  const entries: EntryInfo[] = [];
  const sourceByName = new Map<string, string>();
  for (const kernel of kernels) {
    const where = `kernel '${kernel.name}' (${displayPath(kernel.source)})`;
    const first = sourceByName.get(kernel.name);
    if (first !== undefined) {
      problems.push(`${where} is also exported by ${displayPath(first)}; kernel names must be unique in a bundle`);
      continue;
    }
    sourceByName.set(kernel.name, kernel.source);
    if (kernel.generic) {
      problems.push(`${where} is generic; kernels must have concrete parameter types`);
      continue;
    }
    if (!kernel.resolved) continue;
    const before = problems.length;
    const params: ParamInfo[] = [];
    kernel.params.forEach(({ name, type, declared }, i) => {
      const element = pointerElementOf(type);
      const paramType = element === undefined ? PARAM_TYPE_OF.get(type) : 'ptr';
      if (element !== undefined && !(POINTER_ELEMENT_TYPES as readonly string[]).includes(element)) {
        problems.push(
          `${where}: parameter '${name}' has type '${declared}', a pointer to elements a kernel cannot load or store ` +
            `(write ptr<T> with T one of ${POINTER_ELEMENT_TYPES.join(', ')}, or usize for a pointer addressed in bytes)`,
        );
      } else if (name.startsWith('offload_') && kernel.wrapped === undefined) {
        problems.push(
          `${where}: parameter '${name}' starts with 'offload_', which names the parameters the build adds (item counts, pointer lengths); rename it`,
        );
      } else if (paramType === undefined) {
        problems.push(
          `${where}: parameter '${name}' has type '${declared}', which a kernel cannot take ` +
            `(use i8..i64, u8..u64, bool, f32, f64, ptr<T> or usize for a device pointer)`,
        );
      } else if (i >= kernel.requiredParameters) {
        problems.push(`${where}: parameter '${name}' is optional; kernel parameters must all be required`);
      } else {
        params.push({ name, type: paramType });
      }
    });
    if (kernel.returnType !== 'void') {
      problems.push(`${where} returns '${kernel.returnType}'; kernels must return void`);
    }
    if (problems.length === before) entries.push({ name: kernel.name, kind: 'kernel', params });
  }
  if (problems.length > 0) throw errors.invalidArgument(problems.join('\n'));
  return entries;
}
