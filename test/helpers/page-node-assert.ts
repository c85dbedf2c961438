/**
 * The part of node:assert/strict the conformance suite uses, for a page: bundlePage aliases
 * `node:assert/strict` to this file. Same meanings as Node's strict mode: `equal` is Object.is,
 * `deepEqual` compares prototypes, own enumerable keys, typed arrays and DataViews by content,
 * NaN equal to itself and -0 apart from 0.
 */

export class AssertionError extends Error {
  override name = 'AssertionError';
}

function show(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value);
  if (ArrayBuffer.isView(value)) {
    const items = Array.from(value as unknown as ArrayLike<unknown>).slice(0, 16);
    return `${value.constructor.name}(${(value as unknown as ArrayLike<unknown>).length}) [${items.map(show).join(', ')}${items.length < (value as unknown as ArrayLike<unknown>).length ? ', ...' : ''}]`;
  }
  if (Array.isArray(value)) return `[${value.slice(0, 16).map(show).join(', ')}${value.length > 16 ? ', ...' : ''}]`;
  if (Object.is(value, -0)) return '-0';
  if (value && typeof value === 'object') {
    try {
      return JSON.stringify(value, (_, inner: unknown) => (typeof inner === 'bigint' ? `${inner}n` : inner));
    } catch {
      return Object.prototype.toString.call(value);
    }
  }
  return String(value);
}

function fail(message: string | Error | undefined, fallback: string): never {
  if (message instanceof Error) throw message;
  throw new AssertionError(message ?? fallback);
}

function ok(value: unknown, message?: string | Error): asserts value {
  if (!value) fail(message, `expected a truthy value, got ${show(value)}`);
}

function equal(actual: unknown, expected: unknown, message?: string | Error): void {
  if (!Object.is(actual, expected)) fail(message, `expected ${show(expected)}, got ${show(actual)}`);
}

function notEqual(actual: unknown, expected: unknown, message?: string | Error): void {
  if (Object.is(actual, expected)) fail(message, `expected anything but ${show(expected)}`);
}

/** Where `a` and `b` differ (a path and the two values), or undefined when they are deeply equal. */
function difference(a: unknown, b: unknown, path: string, seen: Map<object, object>): string | undefined {
  if (Object.is(a, b)) return undefined;
  const here = path || 'the value';
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null)
    return `${here}: expected ${show(b)}, got ${show(a)}`;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b))
    return `${here}: expected a ${b.constructor?.name ?? 'null-prototype object'}, got a ${a.constructor?.name ?? 'null-prototype object'}`;
  if (seen.get(a) === b) return undefined;
  seen.set(a, b);
  if (a instanceof DataView || a instanceof ArrayBuffer) {
    const bytes = (x: DataView | ArrayBuffer): Uint8Array =>
      x instanceof DataView ? new Uint8Array(x.buffer, x.byteOffset, x.byteLength) : new Uint8Array(x);
    return difference(bytes(a), bytes(b as DataView | ArrayBuffer), path, seen);
  }
  if (ArrayBuffer.isView(a)) {
    const x = a as unknown as ArrayLike<unknown>;
    const y = b as unknown as ArrayLike<unknown>;
    if (x.length !== y.length) return `${here}: expected length ${y.length}, got ${x.length}`;
    for (let i = 0; i < x.length; i++) {
      if (!Object.is(x[i], y[i])) return `${path}[${i}]: expected ${show(y[i])}, got ${show(x[i])}`;
    }
    return undefined;
  }
  if (a instanceof Date) return a.getTime() === (b as Date).getTime() ? undefined : `${here}: dates differ`;
  if (a instanceof Map || a instanceof Set) {
    const x = [...(a as Map<unknown, unknown>).entries()];
    const y = [...(b as Map<unknown, unknown>).entries()];
    return difference(x, y, path, seen);
  }
  const keysA = Object.keys(a);
  const keysB = Object.keys(b);
  if (keysA.length !== keysB.length) return `${here}: expected keys ${show(keysB)}, got ${show(keysA)}`;
  for (const key of keysB) {
    if (!Object.prototype.hasOwnProperty.call(a, key)) return `${here}: missing key ${key}`;
    const found = difference(
      (a as Record<string, unknown>)[key],
      (b as Record<string, unknown>)[key],
      Array.isArray(a) ? `${path}[${key}]` : `${path}.${key}`,
      seen,
    );
    if (found) return found;
  }
  return undefined;
}

function deepEqual(actual: unknown, expected: unknown, message?: string | Error): void {
  const found = difference(actual, expected, '', new Map());
  if (found) fail(message, `not deeply equal: ${found}`);
}

function notDeepEqual(actual: unknown, expected: unknown, message?: string | Error): void {
  if (!difference(actual, expected, '', new Map())) fail(message, `expected values that differ: ${show(actual)}`);
}

function match(text: string, pattern: RegExp, message?: string | Error): void {
  if (typeof text !== 'string' || !pattern.test(text)) fail(message, `expected ${show(text)} to match ${pattern}`);
}

type Expected = RegExp | ((error: unknown) => boolean) | (abstract new (...args: never[]) => unknown);

function check(error: unknown, expected: Expected | undefined, message?: string | Error): void {
  if (expected === undefined) return;
  if (expected instanceof RegExp) {
    match(error instanceof Error ? error.message : String(error), expected, message);
  } else if (expected.prototype instanceof Error || expected === Error) {
    if (!(error instanceof expected)) fail(message, `expected a ${expected.name}, got ${show(error)}`);
  } else if ((expected as (error: unknown) => boolean)(error) !== true) {
    fail(message, `the error does not pass the check: ${error instanceof Error ? error.message : String(error)}`);
  }
}

function throws(body: () => unknown, expected?: Expected, message?: string | Error): void {
  try {
    body();
  } catch (error) {
    check(error, expected, message);
    return;
  }
  fail(message, 'expected the function to throw');
}

async function rejects(
  promise: Promise<unknown> | (() => Promise<unknown>),
  expected?: Expected,
  message?: string | Error,
) {
  try {
    await (typeof promise === 'function' ? promise() : promise);
  } catch (error) {
    check(error, expected, message);
    return;
  }
  fail(message, 'expected a rejection');
}

const assert = Object.assign((value: unknown, message?: string | Error) => ok(value, message), {
  ok,
  equal,
  strictEqual: equal,
  notEqual,
  notStrictEqual: notEqual,
  deepEqual,
  deepStrictEqual: deepEqual,
  notDeepEqual,
  match,
  throws,
  rejects,
  fail: (message?: string) => fail(message, 'failed'),
  AssertionError,
});

export default assert;
