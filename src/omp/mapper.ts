/**
 * OpenMP target-data semantics over the public device API: what `__tgt_target_data_begin`,
 * `_update` and `_end` do in libomptarget, for TypeScript arrays.
 *
 * Entering a range that is absent allocates its device copy (refcount 1) and copies it for
 * `to`/`tofrom`; entering a present range only bumps the refcount (and copies for `always`).
 * Leaving decrements (`delete`: to zero); at zero the range is copied back for `from`/`tofrom`
 * and its device copy freed; above zero only `always` copies back. All copies of one call go on
 * one queue, in order, and the call resolves when they are done.
 */
import { errors, OffloadError } from '../errors.js';
import type { Device } from '../api/device.js';
import type { Kernel } from '../api/kernel.js';
import { Buffer, DevicePointer } from '../api/buffer.js';
import type { Event, LaunchGrid as Grid, KernelArgument, Queue } from '../api/queue.js';
import type { InfoLog } from '../runtime/info-log.js';
import { dropped } from '../runtime/debug.js';
import type { Tracer } from '../runtime/trace.js';
import {
  checkArgumentCount,
  checkScalar,
  deviceAddress,
  hasFailed,
  isReusable,
  launchResolving,
  programParams,
  type PointerResolver,
} from '../api/internal.js';
import {
  ENTER_TYPES,
  entersMapping,
  isMapSpec,
  isOwnClause,
  servedByPresent,
  type HostView,
  type MapSpec,
  type MapType,
} from './map.js';
import { describeRange, hostAddress, MappingTable, type MapEntry, type Presence } from './table.js';

/** An argument of `runtime.target`: a kernel argument, or a map clause for a pointer. */
export type TargetArgument = KernelArgument | MapSpec;

const EXIT_TYPES: readonly MapType[] = ['from', 'tofrom', 'release', 'delete'];

/** How a clause that entered a region leaves it when the region ends. */
function exitTypeOf(type: MapType): MapType {
  return type === 'to' || type === 'alloc' ? 'release' : type;
}

const copiesTo = (type: MapType): boolean => type === 'to' || type === 'tofrom';
const copiesFrom = (type: MapType): boolean => type === 'from' || type === 'tofrom';

function bytesOf(view: HostView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function checkSpecs(value: unknown, what: string, allowed: readonly MapType[], device: number): MapSpec[] {
  const list = Array.isArray(value) ? value : [value];
  return list.map((spec: unknown, index) => {
    if (!isMapSpec(spec))
      throw errors.invalidArgument(
        `${what}: element ${index} must be a map clause (map.to(x), ...), got ${spec === null ? 'null' : typeof spec}`,
        device,
      );
    if (!allowed.includes(spec.type))
      throw errors.invalidArgument(
        `${what}: map.${spec.type} is not allowed here (use ${allowed.map((t) => `map.${t}`).join(', ')})`,
        device,
      );
    return spec;
  });
}

/** A clause applied on entry: its entry and where its range starts in it (none for a zero-length section found nowhere). */
interface Entered {
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

/** How a clause is written, for errors and OFFLOAD_INFO: `map.present.to`. */
function clauseName(spec: MapSpec): string {
  return `map.${spec.always ? 'always.' : ''}${spec.present ? 'present.' : ''}${spec.type}`;
}

function notPresent(spec: MapSpec, device: number, what = clauseName(spec)): Error {
  return errors.notFound(
    `${what}: ${describeRange(spec.view, spec.name)} is not present on device ${device}; map it first (enterData or an enclosing targetData), or drop 'present'`,
    device,
  );
}

/** What the mapper keeps for one device. */
interface DeviceMaps {
  readonly table: MappingTable;
  /** Idle queues: each call takes one, so calls neither wait for nor fail each other. */
  readonly idle: Queue[];
  /** The queues of present-map `target` calls (see target and freePresentQueue). */
  present: Queue[];
  /** Resolves their present clauses. */
  readonly pointers: PresentPointers;
}

/**
 * The device pointer of a present clause that asks for no copy, for a present-map launch
 * (Queue.launchResolving); undefined for any other clause, which sends the call down the
 * general path; any other value as it is.
 */
class PresentPointers implements PointerResolver {
  /**
   * The last two clauses resolved and their pointers, while no entry was removed: `map.*` hands
   * out the same clause while a loop names the same array, so a call of a loop finds its two or
   * three clauses here by identity.
   */
  private clause0: unknown;
  private pointer0: unknown;
  private clause1: unknown;
  private pointer1: unknown;
  private removals = 0;

  constructor(private readonly table: MappingTable) {}

  pointerFor(value: unknown): unknown {
    // Small enough for V8 to inline into the launch's checks; resolve is not.
    if (this.removals === this.table.removals) {
      if (value === this.clause0) return this.pointer0;
      if (value === this.clause1) return this.pointer1;
    }
    return this.resolve(value);
  }

  private resolve(value: unknown): unknown {
    if (this.removals !== this.table.removals) {
      this.removals = this.table.removals;
      this.clause0 = this.clause1 = this.pointer0 = this.pointer1 = undefined;
    }
    // Clauses first: the usual argument here, found in one `instanceof` step.
    const own = isOwnClause(value);
    if (!own && (value instanceof Buffer || value instanceof DevicePointer || !isMapSpec(value))) return value;
    const found = servedByPresent(value) ? this.table.lookup(value.view, value.name) : undefined;
    const buffer = found?.entry.ready;
    if (!buffer) return undefined;
    const pointer = found.offset === 0 ? buffer : buffer.at(found.offset);
    if (own) {
      // Only this package's clauses: they are frozen, so a clause cannot change under the memo.
      this.clause1 = this.clause0;
      this.pointer1 = this.pointer0;
      this.clause0 = value;
      this.pointer0 = pointer;
    }
    return pointer;
  }
}

export class Mapper {
  private readonly devices = new Map<Device, DeviceMaps>();
  /**
   * The device of the last present-map `target` call, the queue it launched on and its maps'
   * resolver: a loop of calls on one device goes straight to that queue while it is free.
   */
  private lastDevice: Device | undefined;
  private lastQueue: Queue | undefined;
  private lastPointers: PresentPointers | undefined;

  constructor(
    private readonly info: InfoLog,
    private readonly tracer: Tracer | undefined,
    /**
     * The runtime's check of a `target` call's device and kernel (Runtime.checkTarget): throws
     * unless the device is one of the runtime's and the kernel one of the device's.
     */
    private readonly checkTarget: (device: unknown, kernel: unknown) => void,
  ) {}

  private mapsOf(device: Device): DeviceMaps {
    let maps = this.devices.get(device);
    if (!maps) {
      const table = new MappingTable(device.id);
      this.devices.set(device, (maps = { table, idle: [], present: [], pointers: new PresentPointers(table) }));
    }
    return maps;
  }

  table(device: Device): MappingTable {
    return this.mapsOf(device).table;
  }

  /** Runs `body` on a queue of `device`; resolves once everything it enqueued has completed. */
  private async onQueue<T>(device: Device, body: (queue: Queue) => Promise<T>): Promise<T> {
    const idle = this.mapsOf(device).idle;
    const queue = idle.pop() ?? device.queue();
    let reusable = false;
    try {
      const result = await body(queue);
      await queue.finish();
      reusable = true;
      return result;
    } finally {
      if (reusable) idle.push(queue);
      else void queue.destroy();
    }
  }

  /** Takes a thunk: the line is only built when OFFLOAD_INFO is on (this is the hot path). */
  private log(device: Device, text: () => string): void {
    if (this.info.enabled) this.info.mapping(device.id, text());
  }

  private describe(entry: MapEntry, buffer: Buffer | undefined, offset = 0): string {
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
  private async enter(device: Device, queue: Queue, specs: readonly MapSpec[]): Promise<Entered[]> {
    const table = this.table(device);
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
            group = { entry: await this.allocate(device, table, spec), specs: [], created: true };
          }
          groups.set(group.entry, group);
        }
        group.specs.push(spec);
        entered[index] = { spec, entry: group.entry, offset: spec.view.byteOffset - group.entry.begin };
      }
    } catch (error) {
      for (const group of groups.values()) await this.undo(device, table, group);
      throw error;
    }
    for (const group of groups.values()) {
      const buffer = group.entry.ready ?? (await group.entry.buffer);
      const toCopy = distinct(
        group.specs.filter((spec) => copiesTo(spec.type) && (group.created || spec.always)).map((spec) => spec.view),
      );
      this.log(device, () => {
        const state = group.created ? 'creating map entry' : 'mapping exists';
        const counted = group.created ? '' : ' (incremented)';
        const copy =
          toCopy.length === 0 ? 'no copy in' : `copy in ${toCopy.length === 1 ? 'once' : `${toCopy.length} ranges`}`;
        return `${state} ${this.describe(group.entry, buffer)}${counted}; ${this.clauses(group.specs)}: ${copy}`;
      });
      for (const view of toCopy)
        this.copy('to', device, queue, buffer, view.byteOffset - group.entry.begin, view, group.entry.name);
    }
    return entered;
  }

  /** A new entry for `spec`'s range: its device copy allocated, in the table with count 1. */
  private async allocate(device: Device, table: MappingTable, spec: MapSpec): Promise<MapEntry> {
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
  private async undo(device: Device, table: MappingTable, group: Group): Promise<void> {
    if (!group.created) {
      group.entry.refCount = Math.max(0, group.entry.refCount - 1);
      return;
    }
    table.remove(group.entry);
    await group.entry.ready?.free().catch(dropped('target data', 'releasing a mapping after a failure'));
    this.log(
      device,
      () => `removing map entry ${this.describe(group.entry, group.entry.ready)} (the construct failed)`,
    );
  }

  /** A group's clauses as OFFLOAD_INFO names them: `map.alloc, map.tofrom(x)`. */
  private clauses(specs: readonly MapSpec[]): string {
    return specs.map((spec) => `${clauseName(spec)}${spec.name === undefined ? '' : `(${spec.name})`}`).join(', ');
  }

  /** A map clause's copy, logged in libomptarget's words (the host side first when copying to the device). */
  private copy(
    direction: 'to' | 'from',
    device: Device,
    queue: Queue,
    buffer: Buffer,
    offset: number,
    view: HostView,
    name: string | undefined,
  ): void {
    this.log(device, () => {
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
  private async exit(device: Device, queue: Queue, specs: readonly { spec: MapSpec; type: MapType }[]): Promise<void> {
    const table = this.table(device);
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
          this.log(
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
        await this.leave(device, queue, table, entry, clauses);
      } catch (error) {
        failure ??= error;
      }
    }
    // eslint-disable-next-line @typescript-eslint/only-throw-error -- the first clause's error, as it came
    if (failure !== undefined) throw failure;
  }

  /** One entry's exit: the count once, the copies back once per range, the entry freed at zero. */
  private async leave(
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
    this.log(device, () => {
      const state = gone
        ? `removing map entry ${this.describe(entry, buffer)}`
        : `mapping exists ${this.describe(entry, buffer)} (decremented)`;
      const copy =
        back.length === 0 ? 'no copy back' : `copy back ${back.length === 1 ? 'once' : `${back.length} ranges`}`;
      return `${state}; ${this.clauses(clauses.map(({ spec, type }) => (type === spec.type ? spec : { ...spec, type })))}: ${copy}`;
    });
    for (const view of back) this.copy('from', device, queue, buffer, view.byteOffset - entry.begin, view, entry.name);
    if (!gone) return;
    table.remove(entry);
    await buffer.free();
  }

  enterData(device: Device, maps: unknown): Promise<void> {
    const specs = checkSpecs(maps, 'enterData', ENTER_TYPES, device.id);
    return this.traced(device, 'enterData', specs, () =>
      this.onQueue(device, async (queue) => void (await this.enter(device, queue, specs))),
    );
  }

  exitData(device: Device, maps: unknown): Promise<void> {
    const specs = checkSpecs(maps, 'exitData', EXIT_TYPES, device.id);
    return this.traced(device, 'exitData', specs, () =>
      this.onQueue(device, (queue) =>
        this.exit(
          device,
          queue,
          specs.map((spec) => ({ spec, type: spec.type })),
        ),
      ),
    );
  }

  /**
   * `target update`: copies each listed range to or from its mapping. A range that is not
   * (fully) present is skipped (OpenMP 5.1, 2.21.7.1), unless `present` is set: NOT_FOUND.
   */
  update(
    device: Device,
    motion: { to?: HostView | HostView[]; from?: HostView | HostView[]; present?: boolean },
  ): Promise<void> {
    const list = (value: HostView | HostView[] | undefined, what: string): HostView[] => {
      const views = value === undefined ? [] : Array.isArray(value) ? value : [value];
      for (const [index, view] of views.entries()) {
        if (!ArrayBuffer.isView(view))
          throw errors.invalidArgument(`update: ${what}[${index}] must be a TypedArray or DataView`, device.id);
      }
      return views;
    };
    if (typeof motion !== 'object' || motion === null)
      throw errors.invalidArgument('update: expected { to?: views, from?: views, present?: boolean }', device.id);
    if (motion.present !== undefined && typeof motion.present !== 'boolean')
      throw errors.invalidArgument(`update: present must be a boolean, got ${typeof motion.present}`, device.id);
    const to = list(motion.to, 'to');
    const from = list(motion.from, 'from');
    const present = motion.present === true;
    const table = this.table(device);
    return this.onQueue(device, async (queue) => {
      for (const [views, toDevice] of [
        [to, true],
        [from, false],
      ] as const) {
        for (const view of views) {
          let found;
          try {
            found = table.lookup(view, undefined);
          } catch {
            found = undefined; // overlaps a mapping without lying inside it: not fully present
          }
          const clause = `update ${toDevice ? 'to' : 'from'}${present ? '(present)' : ''}`;
          if (!found) {
            if (present)
              throw errors.notFound(
                `${clause}: ${describeRange(view, undefined)} is not present on device ${device.id}; map it first, or drop present`,
                device.id,
              );
            this.log(device, () => `${describeRange(view, undefined)} is not present; ${clause} skipped`);
            continue;
          }
          if (view.byteLength === 0) continue;
          const buffer = found.entry.ready ?? (await found.entry.buffer);
          this.copy(toDevice ? 'to' : 'from', device, queue, buffer, found.offset, view, found.entry.name);
        }
      }
    });
  }

  async targetData<T>(device: Device, maps: unknown, body: () => Promise<T> | T): Promise<T> {
    const specs = checkSpecs(maps, 'targetData', ENTER_TYPES, device.id);
    if (typeof body !== 'function') throw errors.invalidArgument('targetData: the body must be a function', device.id);
    await this.traced(device, 'targetData enter', specs, () =>
      this.onQueue(device, async (queue) => void (await this.enter(device, queue, specs))),
    );
    let result: T;
    try {
      result = await body();
    } catch (error) {
      // The maps are released even when the body throws; its error is the one reported.
      await this.leaveRegion(device, specs).catch(dropped('target data', 'releasing a mapping after a failure'));
      throw error;
    }
    await this.leaveRegion(device, specs);
    return result;
  }

  private leaveRegion(device: Device, specs: readonly MapSpec[]): Promise<void> {
    const exits = [...specs].reverse().map((spec) => ({ spec, type: exitTypeOf(spec.type) }));
    return this.traced(device, 'targetData exit', specs, () =>
      this.onQueue(device, (queue) => this.exit(device, queue, exits)),
    );
  }

  /**
   * OpenMP `target` (see Runtime.target). Never throws: an error is the promise's rejection.
   *
   * A call whose map clauses all name present mappings and ask for no copy (no `always`) is its
   * launch: entering and leaving such clauses only counts a reference up and down again, which
   * nothing can observe in between. The clauses are resolved while the launch checks its
   * arguments (PresentPointers), on a free queue of the device's own for these calls
   * (freePresentQueue), whose event is the call's: no promise or reaction of its own, and, for a
   * launch that runs inline, not even an event (the queue renews the last one). Any other
   * call, and a call made while OFFLOAD_INFO or a trace is on (they want each clause's lines and
   * a span), takes the general path (targetMapping), which checks and reports.
   *
   * Only the usual case is written here, small enough for V8 to inline into the caller's loop;
   * the rest is in methods of their own. The general path makes the runtime's checks of the
   * device and kernel (checkTarget); the present-map path needs none of its own: it finds maps
   * only for the runtime's devices (they are made after those checks), and its launch declines a
   * kernel that is not the device's, or a device that is lost or shut down.
   */
  target(device: Device, kernel: Kernel, grid: Grid, args: readonly TargetArgument[]): Promise<void> {
    const queue = this.lastDevice === device ? this.lastQueue : undefined;
    const event =
      queue !== undefined && isReusable(queue)
        ? launchResolving(queue, kernel, grid, args, this.lastPointers!)
        : this.presentLaunch(device, kernel, grid, args);
    return event === undefined ? this.targetMapping(device, kernel, grid, args) : event.done;
  }

  /**
   * A present-map launch on a free queue of `device`, when its calls may take that path (it has
   * maps, and neither OFFLOAD_INFO nor a trace is on); remembers the device, the queue and the
   * resolver for the next call. Undefined when the call must take the general path.
   */
  private presentLaunch(
    device: Device,
    kernel: Kernel,
    grid: Grid,
    args: readonly TargetArgument[],
  ): Event | undefined {
    const maps = this.devices.get(device);
    if (maps === undefined || this.tracer || this.info.enabled) return undefined;
    const queue = this.freePresentQueue(device, maps);
    if (queue === undefined) return undefined;
    this.lastDevice = device;
    this.lastQueue = queue;
    this.lastPointers = maps.pointers;
    return launchResolving(queue, kernel, grid, args, maps.pointers);
  }

  /**
   * A free queue for a present-map launch. A queue is free when its last launch has settled
   * without failing (Queue.reusable), so concurrent calls neither wait for nor fail each other.
   * A queue whose launch failed keeps that failure (it sticks until a finish(), and the call's
   * promise has reported it): it is destroyed. Undefined when no queue can be made (a lost
   * device): the general path reports that.
   */
  private freePresentQueue(device: Device, maps: DeviceMaps): Queue | undefined {
    const queues = maps.present;
    for (const queue of queues) if (isReusable(queue)) return queue;
    let queue: Queue;
    try {
      queue = device.queue();
    } catch {
      return undefined;
    }
    for (const failed of queues.filter(hasFailed)) void failed.destroy();
    maps.present = [...queues.filter((q) => !hasFailed(q)), queue];
    return queue;
  }

  /**
   * `target` entering and leaving its clauses around the launch. A method of its own: its
   * closures capture the call's arguments, and V8 makes the context they share on entry to the
   * function that creates them, which a present-map call should not pay for.
   */
  private targetMapping(device: Device, kernel: Kernel, grid: Grid, args: readonly TargetArgument[]): Promise<void> {
    let specs: MapSpec[];
    try {
      this.checkTarget(device, kernel);
      if (!Array.isArray(args)) throw errors.invalidArgument('target: args must be an array', device.id);
      specs = args.filter(isMapSpec);
      for (const spec of specs) {
        if (!entersMapping(spec.type))
          throw errors.invalidArgument(
            `target: map.${spec.type} cannot map a kernel argument (use to, from, tofrom or alloc)`,
            device.id,
          );
      }
      checkTargetArguments(kernel, args, device.id);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.traced(device, `target ${kernel.name}`, specs, () =>
      this.onQueue(device, async (queue) => {
        const entered = await this.enter(device, queue, specs);
        const exits = [...entered].reverse().map(({ spec }) => ({ spec, type: exitTypeOf(spec.type) }));
        let next = 0;
        const lowered: KernelArgument[] = [];
        for (const arg of args) {
          if (!isMapSpec(arg)) {
            lowered.push(arg);
            continue;
          }
          const { spec, entry, offset } = entered[next++]!;
          if (entry === undefined) {
            await this.exit(device, queue, exits);
            throw errors.invalidArgument(
              `target of '${kernel.name}': ${clauseName(spec)} of ${describeRange(spec.view, spec.name)} is a zero-length section inside no mapping, so it has no device address; map the array around it first, or pass a Buffer`,
              device.id,
            );
          }
          const buffer = entry.ready ?? (await entry.buffer);
          lowered.push(offset === 0 ? buffer : buffer.at(offset));
        }
        queue.launch(kernel, grid, lowered);
        await this.exit(device, queue, exits);
      }),
    );
  }

  /** Runs `run` as a span of the device's mapping track; without a trace, just runs it (a hot path). */
  private async traced(
    device: Device,
    what: string,
    specs: readonly MapSpec[],
    run: () => Promise<void>,
  ): Promise<void> {
    if (!this.tracer) return run();
    const clauses = specs
      .map(
        (s) =>
          `${s.always ? 'always ' : ''}${s.present ? 'present ' : ''}${s.type}${s.name === undefined ? '' : `(${s.name})`}`,
      )
      .join(', ');
    const bytes = specs.reduce((sum, s) => sum + s.view.byteLength, 0);
    const span = this.tracer.begin(device.id, 'mapping', what, { clauses, bytes }, device.info.name);
    try {
      await run();
    } finally {
      span.end();
    }
  }
}

/**
 * The kernel's parameters against a `target` call's arguments, before anything is mapped: a
 * wrong count, a map clause for a scalar, a number for a pointer or a scalar out of its type's
 * range fails here, having allocated and copied nothing (on a remote device: sent nothing).
 * Buffers and pointers are checked by the launch itself, as for `queue.launch`.
 */
function checkTargetArguments(kernel: Kernel, args: readonly TargetArgument[], device: number): void {
  // The program's own parameters: a per-item or checked kernel's last ones (item counts, pointer
  // lengths) are the launch's to pass.
  const params = programParams(kernel);
  checkArgumentCount(`target of '${kernel.name}'`, params, args.length, device);
  params.forEach((param, index) => {
    const arg = args[index];
    const position = `target of '${kernel.name}': argument ${index}`;
    if (param.type === 'ptr') {
      if (isMapSpec(arg) || (typeof arg === 'object' && arg !== null)) return;
      throw errors.invalidArgument(
        `${position} '${param.name}' (ptr) must be a map clause, a Buffer or a DevicePointer, got ${typeof arg === 'number' ? arg : typeof arg}`,
        device,
      );
    }
    if (isMapSpec(arg))
      throw errors.invalidArgument(
        `${position} '${param.name}' (${param.type}) is a scalar; a map clause maps only pointer (usize) parameters`,
        device,
      );
    checkScalar(arg, param, position, device);
  });
}
