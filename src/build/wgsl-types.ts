/**
 * The value types of the WGSL translation as the syntax trees name them, and how a construct the
 * translation does not cover is reported (Untranslatable, caught per kernel into a note).
 */
import type { FunctionSyntax, SyntaxNode } from './compiler-job.js';
import type { Ty } from './wgsl-builtins.js';

/** An untranslatable construct: the line and the reason (caught per kernel into a note). */
export class Untranslatable extends Error {
  constructor(
    readonly line: number,
    reason: string,
  ) {
    super(reason);
  }
}

/** Throws Untranslatable at `node`'s line. */
export const fail = (node: { line: number }, reason: string): never => {
  throw new Untranslatable(node.line, reason);
};

/** Whether `type` is a 32-bit integer (an address included). */
export function isInteger(type: Ty): boolean {
  return type === 'i32' || type === 'u32' || type === 'usize';
}

/** Whether `type` is unsigned (u32, or usize, which may be an address). */
export function unsignedness(type: Ty): boolean {
  return type === 'u32' || type === 'usize';
}

/** wasm's 128-bit SIMD types and the builtin namespaces of their operations (v128.load, f64x2.add, ...). */
export const SIMD_TYPES = new Set(['v128', 'i8x16', 'i16x8', 'i32x4', 'i64x2', 'f32x4', 'f64x2']);
export const NO_V128 = ' (a kernel using it stays wasm-only)';

/** Why a type the subset lacks is not in WGSL, for the note ('' when the subset simply leaves it out). */
function whyNot(name: string): string {
  if (name === 'f64' || name === 'i64' || name === 'u64') return ` (WGSL has no ${name})`;
  return SIMD_TYPES.has(name) ? NO_V128 : '';
}

/** A resolved AssemblyScript type name as a type of the subset. */
export function typeOf(name: string, fn: FunctionSyntax, what: string): Ty {
  if (
    name === 'i32' ||
    name === 'u32' ||
    name === 'usize' ||
    name === 'f32' ||
    name === 'bool' ||
    name === 'void' ||
    name === 'v128'
  )
    return name;
  if (name === 'isize') return 'i32';
  const why = whyNot(name);
  throw new Untranslatable(
    fn.line,
    `has ${what} of type ${name}${why}; translated kernels compute with i32, u32, f32 and bool`,
  );
}

/** The resolved name of a type node (the name as written where the compiler resolved none). */
export function typeName(node: SyntaxNode): string {
  return (
    (node.resolved as string | null) ??
    (((node.name as SyntaxNode | undefined)?.identifier as SyntaxNode | undefined)?.text as string | undefined) ??
    '?'
  );
}

/** A type node as a type of the subset (not void: a variable, constant or cast has a value). */
export function typeOfNode(node: SyntaxNode, what: string): Ty {
  const name = typeName(node);
  if (name === 'i32' || name === 'u32' || name === 'usize' || name === 'f32' || name === 'bool' || name === 'v128')
    return name;
  if (name === 'isize') return 'i32';
  const why = whyNot(name);
  return fail(node, `gives ${what} the type ${name}${why}; translated kernels compute with i32, u32, f32 and bool`);
}

/** A syntax node's kind in words, for a note (`ElementAccess` -> `element access`). */
export function describe(node: SyntaxNode): string {
  return node.k.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();
}
