/**
 * How the arguments of `runtime.spread` follow its chunks (src/omp/spread.ts has the whole
 * picture): the markers a program writes (`spread.first`, `spread.count`, `spread.span`,
 * `spread.part`), and the plan of each argument, checked against the kernel and the range.
 */
import { Buffer, DevicePointer } from '../api/buffer.js';
import { describe } from '../api/internal.js';
import { errors } from '../errors.js';
import type { ParamType } from '../image/manifest.js';
import { isMapSpec, type HostView, type MapSpec } from './map.js';

/** A chunk of a spread's range: units [first, first + count) (teams or items, as the range's). */
export interface Chunk {
  readonly first: number;
  readonly count: number;
}

/** The most items a range has (item ids are i32). */
export const MAX_ITEMS = 2 ** 31 - 1;

const SCALAR = Symbol.for('offload-ts.spread.scalar');
const PART = Symbol.for('offload-ts.spread.part');

/**
 * A scalar worked out for each chunk (`spread.first`, `spread.count`, `spread.span`). Branded,
 * as map clauses are, so that another copy of the package (a bench importing dist/ beside src/)
 * recognises it.
 */
class ChunkScalar {
  readonly [SCALAR] = true;
  constructor(
    readonly text: string,
    readonly of: (chunk: Chunk) => number,
  ) {}
}

/** An array partitioned by the range: `per` elements of it for each unit (`spread.part`). */
class SpreadPart {
  readonly [PART] = true;
  constructor(
    readonly clause: MapSpec,
    readonly per: number,
  ) {}
}

/** An argument of `runtime.spread`. */
export type SpreadArgument = number | bigint | MapSpec | SpreadPart | ChunkScalar | ((chunk: Chunk) => number | bigint);

/** How an argument's section follows the chunks: see the header. */
export const spread = Object.freeze({
  /** The chunk's first unit (team or item) in the whole range. */
  first: new ChunkScalar('spread.first', (chunk) => chunk.first),
  /** The chunk's number of units (teams or items). */
  count: new ChunkScalar('spread.count', (chunk) => chunk.count),
  /**
   * The elements of [0, length) the chunk covers at `per` elements a unit:
   * min(length, (first + count) * per) - first * per. A kernel's `n` over a partitioned array.
   */
  span(per: number, length: number): ChunkScalar {
    checkPositive(per, 'spread.span: per');
    checkPositive(length, 'spread.span: length');
    return new ChunkScalar(
      `spread.span(${per}, ${length})`,
      (chunk) => Math.min(length, (chunk.first + chunk.count) * per) - Math.min(length, chunk.first * per),
    );
  },
  /**
   * `clause`'s array partitioned by the range, `per` elements for each unit: a chunk
   * [first, first + count) maps elements [first * per, (first + count) * per) (the last chunk
   * up to the array's end) and its kernel gets a pointer to them.
   */
  part(clause: MapSpec, per: number): SpreadPart {
    if (!isMapSpec(clause))
      throw errors.invalidArgument(
        `spread.part: the first argument must be a map clause (map.tofrom(y)), got ${describe(clause)}`,
      );
    checkPositive(per, 'spread.part: per');
    return new SpreadPart(clause, per);
  },
});

/** What a chunk does with each argument. */
export type Plan =
  | { kind: 'scalar'; value: number | bigint }
  | { kind: 'chunk'; of: (chunk: Chunk) => number | bigint; i64: boolean; text: string }
  | { kind: 'broadcast'; bytes: Uint8Array; copyIn: boolean; name: string }
  | {
      kind: 'part';
      view: HostView;
      per: number;
      elementBytes: number;
      copyIn: boolean;
      copyOut: boolean;
      inPlace: boolean;
      name: string;
    };

function isScalar(value: unknown): value is ChunkScalar {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[SCALAR] === true;
}

function isPart(value: unknown): value is SpreadPart {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[PART] === true;
}

export function checkPositive(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
    throw errors.invalidArgument(`${what} must be a positive integer, got ${describe(value)}`);
  return value;
}

function bytesOf(view: HostView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function elementBytes(view: HostView): number {
  return (view as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1;
}

/** The plan of each argument, checked against the kernel's parameters and the range. */
export function planArguments(
  args: unknown,
  params: readonly { type: ParamType }[],
  kernel: string,
  { units, unit }: { units: number; unit: 'team' | 'item' },
): Plan[] {
  if (!Array.isArray(args)) throw errors.invalidArgument(`spread: args must be an array, got ${describe(args)}`);
  if (args.length !== params.length)
    throw errors.invalidArgument(`spread: kernel '${kernel}' takes ${params.length} arguments, got ${args.length}`);
  return args.map((arg: unknown, index): Plan => {
    const type = params[index]!.type;
    const what = `spread: argument ${index}`;
    if (arg instanceof Buffer || arg instanceof DevicePointer)
      throw errors.invalidArgument(
        `${what} is a device buffer, which lives on one device: pass the host array as a map clause (map.to(x), spread.part(map.tofrom(y), per))`,
      );
    if (typeof arg === 'number' || typeof arg === 'bigint') {
      if (type === 'ptr')
        throw errors.invalidArgument(`${what} is a pointer parameter; give a map clause, got ${describe(arg)}`);
      return { kind: 'scalar', value: arg };
    }
    if (isScalar(arg) || typeof arg === 'function') {
      if (type === 'ptr')
        throw errors.invalidArgument(`${what} is a pointer parameter; give a map clause, got a value of the chunk`);
      if (isScalar(arg)) {
        const of = arg.of;
        return { kind: 'chunk', of, i64: type === 'i64', text: arg.text };
      }
      return { kind: 'chunk', of: arg as (chunk: Chunk) => number | bigint, i64: type === 'i64', text: 'a function' };
    }
    const part = isPart(arg) ? arg : undefined;
    const clause = part ? part.clause : arg;
    if (!isMapSpec(clause))
      throw errors.invalidArgument(
        `${what} must be a number, a bigint, a value of the chunk (spread.first, ...) or a map clause, got ${describe(arg)}`,
      );
    if (type !== 'ptr')
      throw errors.invalidArgument(
        `${what} is a ${type} parameter of '${kernel}', not a pointer: it takes no map clause`,
      );
    const name = clause.name ?? `argument ${index}`;
    const named = `${what} ('${name}')`;
    if (clause.present)
      throw errors.invalidArgument(
        `${named}: map.present cannot follow the chunks: a spread copies what each device needs itself`,
      );
    if (clause.type === 'release' || clause.type === 'delete')
      throw errors.invalidArgument(
        `${named}: map.${clause.type} leaves a mapping; a spread takes to, from, tofrom or alloc`,
      );
    if (!part) {
      if (clause.type === 'from' || clause.type === 'tofrom')
        throw errors.invalidArgument(
          `${named}: map.${clause.type} of the whole array cannot follow the chunks (every chunk would write all of it); ` +
            `partition it with spread.part(map.${clause.type}(${name}), elementsPer${unit === 'item' ? 'Item' : 'Team'}), or broadcast it read-only with map.to`,
        );
      return { kind: 'broadcast', bytes: bytesOf(clause.view), copyIn: clause.type === 'to', name };
    }
    const size = elementBytes(clause.view);
    const length = clause.view.byteLength / size;
    const least = (units - 1) * part.per + 1;
    const most = units * part.per;
    if (length < least || length > most)
      throw errors.invalidArgument(
        `${named}: its sections cannot follow the chunks: ${part.per} element${part.per === 1 ? '' : 's'} per ${unit} over ${units} ${unit}s needs an array of ` +
          `${least} to ${most} elements, and it has ${length}`,
      );
    return {
      kind: 'part',
      view: clause.view,
      per: part.per,
      elementBytes: size,
      copyIn: clause.type === 'to' || clause.type === 'tofrom',
      copyOut: clause.type === 'from' || clause.type === 'tofrom',
      inPlace: clause.type === 'tofrom',
      name,
    };
  });
}

/** The host bytes of a part's section for a chunk. */
export function section(plan: Extract<Plan, { kind: 'part' }>, chunk: Chunk): Uint8Array {
  const length = plan.view.byteLength / plan.elementBytes;
  const start = Math.min(length, chunk.first * plan.per) * plan.elementBytes;
  const end = Math.min(length, (chunk.first + chunk.count) * plan.per) * plan.elementBytes;
  return new Uint8Array(plan.view.buffer, plan.view.byteOffset + start, end - start);
}
