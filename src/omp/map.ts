/**
 * Map clauses, as OpenMP's `map(to: x)`: how a host array relates to device memory around a
 * kernel or a data region. `map.to(x)`, `map.from(x)`, `map.tofrom(x)`, `map.alloc(x)` enter a
 * mapping (and, when the region ends, leave it: `to` and `alloc` by release, `from` and `tofrom`
 * by copying back); `map.release(x)` and `map.delete(x)` leave one explicitly. Modifiers chain:
 * `map.always.tofrom(x)` copies even when the range is already present, `map.present.to(x)`
 * requires it to be. A second argument names the variable for OFFLOAD_INFO.
 */
import { errors } from '../errors.js';

export type MapType = 'to' | 'from' | 'tofrom' | 'alloc' | 'release' | 'delete';

/** A host array view: any TypedArray or DataView (a sub-array maps its own range). */
export type HostView = ArrayBufferView;

const BRAND = Symbol.for('offload-ts.MapSpec');

/** One map clause. Create with `map.*`. */
export interface MapSpec {
  readonly [BRAND]: true;
  readonly type: MapType;
  readonly view: HostView;
  readonly always: boolean;
  readonly present: boolean;
  /** The variable's name, for OFFLOAD_INFO and traces. */
  readonly name: string | undefined;
}

/** Whether `value` is a map clause (of any copy of this package; this one's are found first, by class). */
export function isMapSpec(value: unknown): value is MapSpec {
  return (
    value instanceof Clause ||
    (typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true)
  );
}

/**
 * Whether a mapping already present serves the clause as it is, copying nothing on entry or
 * exit: a type that enters a mapping (to, from, tofrom, alloc), without `always`. This
 * package's clauses work it out once, when made: a present-map `target` call asks every clause.
 */
export function servedByPresent(spec: MapSpec): boolean {
  return spec instanceof Clause ? spec.servedByPresent : !spec.always && entersMapping(spec.type);
}

/** The types that enter a mapping (the others leave one). */
export const ENTER_TYPES: readonly MapType[] = ['to', 'from', 'tofrom', 'alloc'];

/** Whether `type` is one of ENTER_TYPES, written out: the present-map path asks it of every clause. */
export function entersMapping(type: MapType): boolean {
  return type === 'to' || type === 'from' || type === 'tofrom' || type === 'alloc';
}

export interface MapBuilder {
  to(view: HostView, name?: string): MapSpec;
  from(view: HostView, name?: string): MapSpec;
  tofrom(view: HostView, name?: string): MapSpec;
  alloc(view: HostView, name?: string): MapSpec;
  release(view: HostView, name?: string): MapSpec;
  delete(view: HostView, name?: string): MapSpec;
  /** Copy even when the range is already present (to on entry, from on exit). */
  readonly always: MapBuilder;
  /** Fail with NOT_FOUND unless the range is already present. */
  readonly present: MapBuilder;
}

/**
 * A clause as made by `map.*`: an instance of a class, not a frozen literal, because a
 * present-map `target` call makes two or three of them per launch and freezing a literal cost
 * 40 ns each against 10. The fields are readonly to TypeScript; the brand is on the prototype.
 */
class Clause implements MapSpec {
  declare readonly [BRAND]: true;
  readonly servedByPresent: boolean;

  constructor(
    readonly type: MapType,
    readonly view: HostView,
    readonly always: boolean,
    readonly present: boolean,
    readonly name: string | undefined,
  ) {
    this.servedByPresent = !always && entersMapping(type);
  }
}
Object.defineProperty(Clause.prototype, BRAND, { value: true });

function builder(always: boolean, present: boolean): MapBuilder {
  const make =
    (type: MapType) =>
    (view: HostView, name?: string): MapSpec => {
      if (!ArrayBuffer.isView(view))
        throw errors.invalidArgument(
          `map.${type}: expected a TypedArray or DataView, got ${view === null ? 'null' : typeof view}`,
        );
      if (name !== undefined && typeof name !== 'string')
        throw errors.invalidArgument(`map.${type}: the name must be a string, got ${typeof name}`);
      return new Clause(type, view, always, present, name);
    };
  return {
    to: make('to'),
    from: make('from'),
    tofrom: make('tofrom'),
    alloc: make('alloc'),
    release: make('release'),
    delete: make('delete'),
    get always() {
      return builder(true, present);
    },
    get present() {
      return builder(always, true);
    },
  };
}

export const map: MapBuilder = builder(false, false);
