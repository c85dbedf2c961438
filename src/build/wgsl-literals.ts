/**
 * WGSL literals of the translation: numbers in the type their context gives them (as
 * AssemblyScript types them), f32 text that reads back to the same value, zeros and ones.
 */
import type { SyntaxNode } from './compiler-job.js';
import { V128 } from './wgsl-simd.js';
import { group, type Ty, type Value } from './wgsl-builtins.js';
import { fail, unsignedness } from './wgsl-types.js';

/** A u32 literal's value / 4 when it is a multiple of 4 (as code), else undefined. */
export function literalWords(value: Value): string | undefined {
  if (value.literal?.literalKind !== 'Integer' || !unsignedness(value.type)) return undefined;
  const n = BigInt.asUintN(32, BigInt(value.literal.value as string));
  return n % 4n === 0n ? `${n / 4n}u` : undefined;
}

export function zero(type: Ty): string {
  if (type === 'v128') return `${V128}(0u)`;
  return type === 'f32' ? '0.0f' : type === 'i32' ? '0i' : type === 'bool' ? 'false' : '0u';
}

export function one(type: Ty): string {
  return type === 'f32' ? '1.0f' : type === 'i32' ? '1i' : '1u';
}

/** An f32 literal that WGSL reads back to the same value. */
export function f32Literal(value: number): string {
  const rounded = Math.fround(value);
  // JavaScript writes an integer below 1e21 without a point or an exponent; WGSL's f32 wants one.
  const bare = !Number.isFinite(rounded) || (Number.isInteger(rounded) && Math.abs(rounded) < 1e21);
  return `${rounded}${bare ? '.0' : ''}f`;
}

/** A numeric literal in its context's type (i32 without one), as AssemblyScript types it. */
export function literal(node: SyntaxNode, context?: Ty, negate = false): Value {
  const kind = node.literalKind;
  if (kind === 'Float') {
    const value = (negate ? -1 : 1) * (node.value as number);
    const shown = Number.isInteger(value) ? value.toFixed(1) : String(value);
    if (context !== 'f32')
      return fail(
        node,
        `uses the float literal ${shown} where AssemblyScript computes in f64 (WGSL has no f64): give it an f32 context, as <f32>${shown}`,
      );
    if (!Number.isFinite(Math.fround(value))) return fail(node, `uses the literal ${value}, which f32 cannot hold`);
    return { code: f32Literal(value), type: 'f32', literal: negate ? { ...node, value } : node };
  }
  if (kind !== 'Integer')
    return fail(
      node,
      `uses a ${String(kind).toLowerCase()} literal (kernels on WebGPU have no strings, arrays or objects)`,
    );
  const big = BigInt(node.value as string) * (negate ? -1n : 1n);
  const tagged = { literal: negate ? { ...node, value: String(big) } : node };
  if (context === 'f32') return { code: f32Literal(Number(big)), type: 'f32', ...tagged };
  if (big < -(2n ** 31n) || big >= 2n ** 32n)
    return fail(node, `uses the literal ${big}, which needs 64 bits (WGSL has no i64)`);
  if (context === 'u32' || context === 'usize')
    return { code: `${BigInt.asUintN(32, big)}u`, type: context, ...tagged };
  if (big >= 2n ** 31n && context !== 'i32')
    return fail(
      node,
      `uses the literal ${big}, which AssemblyScript types i64 here (WGSL has no i64): write <u32>${big}`,
    );
  const n = Number(BigInt.asIntN(32, big));
  if (n < 0 && n !== -(2 ** 31)) return { ...group(`${n}i`), type: 'i32', ...tagged };
  return { code: n === -(2 ** 31) ? 'i32(-2147483648)' : `${n}i`, type: 'i32', ...tagged };
}
