/**
 * Argument checks of the public API, done once, before anything reaches a device. Every
 * failure names the argument that was wrong.
 */
import { errors, quoted } from '../errors.js';
import type { ParamInfo } from '../image/manifest.js';

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'bigint') {
    const digits = String(value);
    return digits.length > 40 ? `bigint of ${digits.length} digits ${digits.slice(0, 20)}...n` : `bigint ${digits}n`;
  }
  if (typeof value === 'number') return `number ${value}`;
  if (typeof value === 'string') return `string ${quoted(value)}`;
  if (typeof value === 'object') return value.constructor?.name ?? 'an object';
  return typeof value;
}

/** A non-negative safe integer (byte counts and offsets). */
export function checkSize(value: unknown, name: string, device?: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw errors.invalidArgument(`${name} must be a non-negative integer, got ${describe(value)}`, device);
  }
  return value;
}

/** An integer in [min, max]. */
export function checkInteger(value: unknown, name: string, min: number, max: number, device?: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw errors.invalidArgument(`${name} must be an integer from ${min} to ${max}, got ${describe(value)}`, device);
  }
  return value;
}

/** Whether `value` is an object of options (not null, not an array). */
export function isOptionsObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An options object or undefined. */
export function checkOptions(value: unknown, name: string): Record<string, unknown> {
  if (value === undefined) return {};
  if (!isOptionsObject(value)) {
    throw errors.invalidArgument(`${name} must be an object, got ${describe(value)}`);
  }
  return value;
}

/** The bytes of a TypedArray or DataView, as a Uint8Array over the same memory. */
export function hostBytes(view: unknown, name: string, device?: number): Uint8Array {
  if (!ArrayBuffer.isView(view)) {
    throw errors.invalidArgument(`${name} must be a TypedArray or DataView, got ${describe(view)}`, device);
  }
  return view instanceof Uint8Array ? view : new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** Checks that [offset, offset + bytes) fits in `limit` bytes. */
export function checkRange(offset: number, bytes: number, limit: number, what: string, device?: number): void {
  if (offset + bytes > limit) {
    throw errors.outOfBounds(
      `${what}: ${bytes} bytes at offset ${offset} reach byte ${offset + bytes}, beyond its ${limit} bytes`,
      device,
    );
  }
}

const I32_MIN = -(2 ** 31);
const U32_MAX = 2 ** 32 - 1;
const I64_MIN = -(2n ** 63n);
const U64_MAX = 2n ** 64n - 1n;

/**
 * What a scalar kernel argument of type `type` must be, when `value` is not that; undefined when
 * it is (a launch asks this of every scalar, so the answer costs no string when it is good).
 */
export function scalarProblem(value: unknown, type: ParamInfo['type']): string | undefined {
  switch (type) {
    case 'i32':
      // Both signed and unsigned 32-bit values are accepted: the bits are what reach the kernel.
      return typeof value !== 'number' || !Number.isInteger(value) || value < I32_MIN || value > U32_MAX
        ? `an integer number from ${I32_MIN} to ${U32_MAX}`
        : undefined;
    case 'f32':
    case 'f64':
      return typeof value !== 'number' ? 'a number' : undefined;
    case 'i64':
      return typeof value !== 'bigint' || value < I64_MIN || value > U64_MAX ? 'a bigint (64-bit integer)' : undefined;
    case 'ptr':
      return undefined;
  }
}

/** INVALID_ARGUMENT unless `count` arguments match `params`, naming them (`what`: "launch of 'k'"). */
export function checkArgumentCount(what: string, params: readonly ParamInfo[], count: number, device?: number): void {
  if (count === params.length) return;
  const expected = params.map((p) => `${p.name}: ${p.type}`).join(', ');
  throw errors.invalidArgument(`${what}: expected ${params.length} arguments (${expected}), got ${count}`, device);
}

/** Checks a scalar kernel argument against its parameter; pointers are checked by the caller. */
export function checkScalar(value: unknown, param: ParamInfo, position: string, device?: number): void {
  const problem = scalarProblem(value, param.type);
  if (problem !== undefined)
    throw errors.invalidArgument(
      `${position} '${param.name}' (${param.type}) must be ${problem}, got ${describe(value)}`,
      device,
    );
}
