/**
 * Map clauses, as OpenMP's `map(to: x)`: how a host array relates to device memory around a
 * kernel or a data region. `map.to(x)`, `map.from(x)`, `map.tofrom(x)`, `map.alloc(x)` enter a
 * mapping (and, when the region ends, leave it: `to` and `alloc` by release, `from` and `tofrom`
 * by copying back); `map.release(x)` and `map.delete(x)` leave one explicitly. Modifiers chain:
 * `map.always.tofrom(x)` copies even when the range is already present, `map.present.to(x)`
 * requires it to be. A second argument names the variable for OFFLOAD_INFO.
 */
import { errors } from '../errors.js';
import { afterThisTurn } from '../platform.js';

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

/**
 * Whether `value` is a clause made by this package's `map`: one `instanceof` step for a
 * clause, where isMapSpec's brand lookup costs more, for the present-map path.
 */
export function isOwnClause(value: unknown): value is MapSpec {
  return value instanceof Clause;
}

/** The types that enter a mapping (the others leave one). */
export const ENTER_TYPES: readonly MapType[] = ['to', 'from', 'tofrom', 'alloc'];

/** Whether `type` is one of ENTER_TYPES, written out: the present-map path asks it of every clause. */
export function entersMapping(type: MapType): boolean {
  return type === 'to' || type === 'from' || type === 'tofrom' || type === 'alloc';
}

export interface MapBuilder {
  // Functions, not methods: each works taken off its builder (`const { to } = map`).
  readonly to: (view: HostView, name?: string) => MapSpec;
  readonly from: (view: HostView, name?: string) => MapSpec;
  readonly tofrom: (view: HostView, name?: string) => MapSpec;
  readonly alloc: (view: HostView, name?: string) => MapSpec;
  readonly release: (view: HostView, name?: string) => MapSpec;
  readonly delete: (view: HostView, name?: string) => MapSpec;
  /** Copy even when the range is already present (to on entry, from on exit). */
  readonly always: MapBuilder;
  /** Fail with NOT_FOUND unless the range is already present. */
  readonly present: MapBuilder;
}

/**
 * A clause as made by `map.*`: an instance of a class (the brand is on the prototype), frozen,
 * and handed out again while the same array is named (see Builder).
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

/** The four forms of `map` (plain, always, present, both) by `${always}/${present}`, made when first asked for. */
const builders = new Map<string, Builder>();

function builder(always: boolean, present: boolean): Builder {
  const key = `${always}/${present}`;
  let made = builders.get(key);
  if (!made) builders.set(key, (made = new Builder(always, present)));
  return made;
}

let forgetScheduled = false;

function forgetRecentClauses(): void {
  forgetScheduled = false;
  for (const made of builders.values()) made.forget();
}

/** Whether `last` is a clause of `view` named `name`: small, so that V8 inlines it. */
function isClauseOf(last: Clause | undefined, view: HostView, name: string | undefined): last is Clause {
  return last !== undefined && last.view === view && last.name === name;
}

/**
 * `map` and its modified forms. Each function hands back the clause it made last while the
 * same array (and name) is named, until the event loop's next turn: a loop of `target` calls
 * names the same arrays call after call, and a comparison costs a few ns where making a clause
 * cost 20. A clause is a value (frozen), so sharing it is safe; forgetting at the next turn keeps
 * no array alive that the program dropped. A class, not closures, so that V8 inlines the calls;
 * the last clauses in fields of their own, not an array, so that a call loads one field.
 */
class Builder implements MapBuilder {
  private lastTo: Clause | undefined;
  private lastFrom: Clause | undefined;
  private lastTofrom: Clause | undefined;
  private lastAlloc: Clause | undefined;
  private lastRelease: Clause | undefined;
  private lastDelete: Clause | undefined;
  private alwaysForm: Builder | undefined;
  private presentForm: Builder | undefined;

  constructor(
    private readonly isAlways: boolean,
    private readonly isPresent: boolean,
  ) {
    // Bound, as the closures they replace were: `const { to } = map` still works.
    for (const type of ['to', 'from', 'tofrom', 'alloc', 'release', 'delete'] as const)
      this[type] = this[type].bind(this);
  }

  to(view: HostView, name?: string): MapSpec {
    return isClauseOf(this.lastTo, view, name) ? this.lastTo : (this.lastTo = this.make('to', view, name));
  }
  from(view: HostView, name?: string): MapSpec {
    return isClauseOf(this.lastFrom, view, name) ? this.lastFrom : (this.lastFrom = this.make('from', view, name));
  }
  tofrom(view: HostView, name?: string): MapSpec {
    return isClauseOf(this.lastTofrom, view, name)
      ? this.lastTofrom
      : (this.lastTofrom = this.make('tofrom', view, name));
  }
  alloc(view: HostView, name?: string): MapSpec {
    return isClauseOf(this.lastAlloc, view, name) ? this.lastAlloc : (this.lastAlloc = this.make('alloc', view, name));
  }
  release(view: HostView, name?: string): MapSpec {
    return isClauseOf(this.lastRelease, view, name)
      ? this.lastRelease
      : (this.lastRelease = this.make('release', view, name));
  }
  delete(view: HostView, name?: string): MapSpec {
    return isClauseOf(this.lastDelete, view, name)
      ? this.lastDelete
      : (this.lastDelete = this.make('delete', view, name));
  }

  get always(): MapBuilder {
    return (this.alwaysForm ??= builder(true, this.isPresent));
  }
  get present(): MapBuilder {
    return (this.presentForm ??= builder(this.isAlways, true));
  }

  /** Forgets the last clauses (at the event loop's next turn). */
  forget(): void {
    this.lastTo = this.lastFrom = this.lastTofrom = undefined;
    this.lastAlloc = this.lastRelease = this.lastDelete = undefined;
  }

  private make(type: MapType, view: HostView, name: string | undefined): Clause {
    if (!ArrayBuffer.isView(view))
      throw errors.invalidArgument(
        `map.${type}: expected a TypedArray or DataView, got ${view === null ? 'null' : typeof view}`,
      );
    if (name !== undefined && typeof name !== 'string')
      throw errors.invalidArgument(`map.${type}: the name must be a string, got ${typeof name}`);
    const clause = Object.freeze(new Clause(type, view, this.isAlways, this.isPresent, name));
    if (!forgetScheduled) {
      forgetScheduled = true;
      afterThisTurn(forgetRecentClauses);
    }
    return clause;
  }
}

export const map: MapBuilder = builder(false, false);
