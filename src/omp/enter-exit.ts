/**
 * Entering and leaving a construct's map clauses on one device, as libomptarget's
 * `__tgt_target_data_begin` and `_end` do, each step logged for OFFLOAD_INFO.
 *
 * Entering a range that is absent allocates its device copy (refcount 1) and copies it for
 * `to`/`tofrom`; entering a present range only bumps the refcount (and copies for `always`).
 * Leaving decrements (`delete`: to zero); at zero the range is copied back for `from`/`tofrom`
 * and its device copy freed; above zero only `always` copies back.
 */
import { errors, OffloadError } from '../errors.js';
import type { Device } from '../api/device.js';
import type { Buffer } from '../api/buffer.js';
import type { Queue } from '../api/queue.js';
import { deviceAddress } from '../api/internal.js';
import type { InfoLog } from '../runtime/info-log.js';
import { dropped } from '../runtime/debug.js';
import type { HostView, MapSpec, MapType } from './map.js';
import { clauseName, notPresent } from './clause-checks.js';
import { describeRange, hostAddress, type MappingTable, type MapEntry, type Presence } from './table.js';

const copiesTo = (type: MapType): boolean => type === 'to' || type === 'tofrom';
const copiesFrom = (type: MapType): boolean => type === 'from' || type === 'tofrom';

function bytesOf(view: HostView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/** A clause applied on entry: its entry and where its range starts in it (none for a zero-length section found nowhere). */
export interface Entered {
  spec: MapSpec;
  entry: MapEntry | undefined;
  offset: number;
}

/**
 * The clauses of one construct that name one mapping entry (the same array, or sections of it
 * inside one mapped range), combined as libomptarget combines them: the entry's count moves
 * once, and each copy the clauses ask for is made once.
 */
interface Group {
  readonly entry: MapEntry;
  readonly specs: MapSpec[];
  /** Whether this construct made the entry (its count went from 0 to 1). */
  readonly created: boolean;
}

/** The distinct ranges of `views`, first of each kept: two clauses naming one range copy it once. */
function distinct(views: readonly HostView[]): HostView[] {
  const seen = new Set<string>();
  return views.filter((view) => {
    const key = `${view.byteOffset}:${view.byteLength}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/**
 * The clauses' indices, larger ranges first (a stable order otherwise): a section then finds
 * the range of its array that another clause of the construct maps, whichever is written first.
 */
function largestFirst(specs: readonly MapSpec[]): number[] {
  return specs.map((_, index) => index).sort((a, b) => specs[b]!.view.byteLength - specs[a]!.view.byteLength);
}

/** The mapping `spec`'s range lies in; an extension of a mapping is INVALID_ARGUMENT naming the clause too. */
function lookupFor(table: MappingTable, spec: MapSpec, device: number): Presence | undefined {
  try {
    return table.lookup(spec.view, spec.name);
  } catch (error) {
    if (error instanceof OffloadError && error.code === 'INVALID_ARGUMENT')
      throw errors.invalidArgument(`${clauseName(spec)}: ${error.message}`, device);
    throw error;
  }
}

/** Takes a thunk: the line is only built when OFFLOAD_INFO is on (this is the hot path). */
export function logMapping(info: InfoLog, device: Device, text: () => string): void {
  if (info.enabled) info.mapping(device.id, text());
}

function describe(entry: MapEntry, buffer: Buffer | undefined, offset = 0): string {
  const host = `HstPtrBegin=${hostAddress({ buffer: entry.host, byteOffset: entry.begin + offset } as HostView)}`;
  const address = buffer === undefined ? undefined : deviceAddress(buffer);
  const target = address === undefined ? '' : ` TgtPtrBegin=0x${(address + offset).toString(16)}`;
  return `${host}${target} Size=${entry.end - entry.begin - offset} RefCount=${entry.refCount}${entry.name === undefined ? '' : ` Name=${entry.name}`}`;
}

/**
 * Enters a construct's clauses, combined per entry (see Group), whatever their order: each
 * entry's count moves once; an entry this construct makes is copied to for every `to`/`tofrom`
 * range its clauses name, one already present only for `always`, each range once. A `present`
 * clause fails unless its range was present before the construct. Sections of one array are
 * entered largest first, so a section finds the larger range another clause maps. A
 * zero-length section makes no entry: it is found inside one, or is nothing. On failure
 * nothing stays entered.
 */
export async function enterClauses(
  info: InfoLog,
  device: Device,
  table: MappingTable,
  queue: Queue,
  specs: readonly MapSpec[],
): Promise<Entered[]> {
  const entered: Entered[] = specs.map((spec) => ({ spec, entry: undefined, offset: 0 }));
  const groups = new Map<MapEntry, Group>();
  try {
    for (const index of largestFirst(specs)) {
      const spec = specs[index]!;
      const found = lookupFor(table, spec, device.id);
      if (spec.view.byteLength === 0) {
        // A zero-length section makes no mapping and moves no count (libomptarget).
        if (found && !groups.get(found.entry)?.created) entered[index] = { spec, ...found };
        else if (spec.present) throw notPresent(spec, device.id);
        continue;
      }
      let group = found ? groups.get(found.entry) : undefined;
      if (group?.created && spec.present) throw notPresent(spec, device.id);
      if (group === undefined) {
        if (found) {
          found.entry.refCount++;
          group = { entry: found.entry, specs: [], created: false };
        } else {
          if (spec.present) throw notPresent(spec, device.id);
          group = { entry: await allocate(device, table, spec), specs: [], created: true };
        }
        groups.set(group.entry, group);
      }
      group.specs.push(spec);
      entered[index] = { spec, entry: group.entry, offset: spec.view.byteOffset - group.entry.begin };
    }
  } catch (error) {
    for (const group of groups.values()) await undo(info, device, table, group);
    throw error;
  }
  for (const group of groups.values()) {
    const buffer = group.entry.ready ?? (await group.entry.buffer);
    const toCopy = distinct(
      group.specs.filter((spec) => copiesTo(spec.type) && (group.created || spec.always)).map((spec) => spec.view),
    );
    logMapping(info, device, () => {
      const state = group.created ? 'creating map entry' : 'mapping exists';
      const counted = group.created ? '' : ' (incremented)';
      const copy =
        toCopy.length === 0 ? 'no copy in' : `copy in ${toCopy.length === 1 ? 'once' : `${toCopy.length} ranges`}`;
      return `${state} ${describe(group.entry, buffer)}${counted}; ${clauseList(group.specs)}: ${copy}`;
    });
    for (const view of toCopy)
      copyRange(info, 'to', device, queue, buffer, view.byteOffset - group.entry.begin, view, group.entry.name);
  }
  return entered;
}

/** A new entry for `spec`'s range: its device copy allocated, in the table with count 1. */
async function allocate(device: Device, table: MappingTable, spec: MapSpec): Promise<MapEntry> {
  const allocation = device.alloc(spec.view.byteLength);
  allocation.catch(() => {}); // observed below, through the entry
  const entry = table.add(spec.view, allocation, spec.name);
  try {
    entry.ready = await allocation;
  } catch (error) {
    table.remove(entry);
    throw error;
  }
  return entry;
}

/** Takes back what entering `group` did: its count, or the entry it made. */
async function undo(info: InfoLog, device: Device, table: MappingTable, group: Group): Promise<void> {
  if (!group.created) {
    group.entry.refCount = Math.max(0, group.entry.refCount - 1);
    return;
  }
  table.remove(group.entry);
  await group.entry.ready?.free().catch(dropped('target data', 'releasing a mapping after a failure'));
  logMapping(
    info,
    device,
    () => `removing map entry ${describe(group.entry, group.entry.ready)} (the construct failed)`,
  );
}

/** A group's clauses as OFFLOAD_INFO names them: `map.alloc, map.tofrom(x)`. */
function clauseList(specs: readonly MapSpec[]): string {
  return specs.map((spec) => `${clauseName(spec)}${spec.name === undefined ? '' : `(${spec.name})`}`).join(', ');
}

/** A map clause's copy, logged in libomptarget's words (the host side first when copying to the device). */
export function copyRange(
  info: InfoLog,
  direction: 'to' | 'from',
  device: Device,
  queue: Queue,
  buffer: Buffer,
  offset: number,
  view: HostView,
  name: string | undefined,
): void {
  logMapping(info, device, () => {
    const host = `HstPtr=${hostAddress(view)}`;
    const target = `TgtPtr=0x${((deviceAddress(buffer) ?? 0) + offset).toString(16)}`;
    const what = `Size=${view.byteLength}${name === undefined ? '' : ` Name=${name}`}`;
    return direction === 'to'
      ? `copying data from host to device ${host} ${target} ${what}`
      : `copying data from device to host ${target} ${host} ${what}`;
  });
  if (direction === 'to') queue.write(buffer, bytesOf(view), { offset });
  else queue.read(buffer, bytesOf(view), { offset });
}

/**
 * Leaves a construct's clauses, combined per entry as they are found now: each entry's count
 * moves once (to zero when any clause says `delete`); at zero every `from`/`tofrom` range its
 * clauses name is copied back (that range only, never the rest of the entry) and the entry
 * goes; above zero only `always` ranges are. A range no longer (fully) present is skipped
 * quietly (OpenMP 5.1, 2.21.7.1), unless its clause says `present`: NOT_FOUND. Every entry
 * still leaves when a clause fails; the first error is thrown.
 */
export async function exitClauses(
  info: InfoLog,
  device: Device,
  table: MappingTable,
  queue: Queue,
  specs: readonly { spec: MapSpec; type: MapType }[],
): Promise<void> {
  let failure: unknown;
  const groups = new Map<MapEntry, { spec: MapSpec; type: MapType }[]>();
  for (const clause of specs) {
    const { spec } = clause;
    let found;
    try {
      found = table.lookup(spec.view, spec.name);
    } catch {
      found = undefined; // overlaps a mapping without lying inside it: not fully present
    }
    if (!found || spec.view.byteLength === 0) {
      if (spec.present && !found) failure ??= notPresent(spec, device.id);
      else if (!found)
        logMapping(
          info,
          device,
          () => `${describeRange(spec.view, spec.name)} is not present at exit; ${clauseName(spec)} skipped`,
        );
      continue;
    }
    const group = groups.get(found.entry);
    if (group) group.push(clause);
    else groups.set(found.entry, [clause]);
  }
  for (const [entry, clauses] of groups) {
    try {
      await leave(info, device, queue, table, entry, clauses);
    } catch (error) {
      failure ??= error;
    }
  }
  // eslint-disable-next-line @typescript-eslint/only-throw-error -- the first clause's error, as it came
  if (failure !== undefined) throw failure;
}

/** One entry's exit: the count once, the copies back once per range, the entry freed at zero. */
async function leave(
  info: InfoLog,
  device: Device,
  queue: Queue,
  table: MappingTable,
  entry: MapEntry,
  clauses: readonly { spec: MapSpec; type: MapType }[],
): Promise<void> {
  const buffer = entry.ready ?? (await entry.buffer);
  const deletes = clauses.some(({ type }) => type === 'delete');
  entry.refCount = deletes ? 0 : Math.max(0, entry.refCount - 1);
  const gone = entry.refCount === 0;
  const back = distinct(
    clauses.filter(({ spec, type }) => copiesFrom(type) && (gone || spec.always)).map(({ spec }) => spec.view),
  );
  logMapping(info, device, () => {
    const state = gone
      ? `removing map entry ${describe(entry, buffer)}`
      : `mapping exists ${describe(entry, buffer)} (decremented)`;
    const copy =
      back.length === 0 ? 'no copy back' : `copy back ${back.length === 1 ? 'once' : `${back.length} ranges`}`;
    return `${state}; ${clauseList(clauses.map(({ spec, type }) => (type === spec.type ? spec : { ...spec, type })))}: ${copy}`;
  });
  for (const view of back)
    copyRange(info, 'from', device, queue, buffer, view.byteOffset - entry.begin, view, entry.name);
  if (!gone) return;
  table.remove(entry);
  await buffer.free();
}
