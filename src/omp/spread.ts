/**
 * One data-parallel launch spread over several devices (`runtime.spread`): scheduling over the
 * public API, nothing of the mapping table.
 *
 * The launch's range, teams of a team kernel or items of a per-item kernel (one dimension), is
 * cut into chunks: a chunk of teams is launched as `{ teams: count }`, one of items as
 * `{ items: count }` (the device picks its grid), the kernel's item 0 being the chunk's first.
 * A device that is ready takes the next chunk from one work queue, sized from its measured
 * throughput on its earlier chunks (guided self-scheduling weighted by throughput: a device
 * takes half of its share of what is left, never less than `minChunk`), so a fast device and a
 * slow one finish together. Each argument says how its data follows a chunk:
 *
 * - a plain number or bigint: the same for every chunk;
 * - `spread.first`, `spread.count`, `spread.span(per, length)` or a function of the chunk: a
 *   scalar computed for each chunk (a bigint where the kernel's parameter is i64);
 * - `map.to(x)` / `map.alloc(x)`: broadcast, read-only: copied whole to each device once, before
 *   the first chunk, shared by its chunks;
 * - `spread.part(map.to|from|tofrom|alloc(x), per)`: partitioned: the chunk [first, first+count)
 *   touches elements [first*per, (first+count)*per) of x, copied in before its launch and back
 *   after it, and the kernel gets a pointer to that section.
 *
 * A chunk's inputs stay on the host until the chunk has completed and its results are back, so a
 * chunk whose device is lost (DEVICE_LOST: a proxy killed, a rank dead, a heartbeat missed) is
 * put back in the queue and re-run by another device. A section copied back in place
 * (`tofrom`) lands in a staging copy first and is set into the host array only once the whole
 * read has arrived, so a device lost half-way through a read never leaves the host section
 * half-written for the re-run. Any other failure (a trap, a time limit) fails the spread.
 */
import { Buffer, DevicePointer } from '../api/buffer.js';
import { describe, pluginDevice } from '../api/internal.js';
import { Device } from '../api/device.js';
import { Kernel } from '../api/kernel.js';
import { Library } from '../api/library.js';
import type { Grid, KernelArgument, LaunchGrid, Queue } from '../api/queue.js';
import { asOffloadError, errors, OffloadError } from '../errors.js';
import { isLaunchParam, isPerItem, type ParamType } from '../image/manifest.js';
import { dropped } from '../runtime/debug.js';
import type { InfoLog } from '../runtime/info-log.js';
import { isMapSpec, type HostView, type MapSpec } from './map.js';
import { performance } from '../platform.js';

/** A chunk of a spread's range: units [first, first + count) (teams or items, as the range's). */
export interface Chunk {
  readonly first: number;
  readonly count: number;
}

/** The range of a spread: teams of a team kernel, or items of a per-item kernel. */
export type SpreadRange = SpreadTeams | SpreadItems;

/** A range of teams, with the grid settings each chunk's launch keeps. */
export interface SpreadTeams {
  /** Teams in all (one dimension); each chunk launches its share of them as `{ teams: count }`. */
  teams: number;
  /** Threads per team, as in a Grid. */
  threads?: Grid['threads'];
  teamMemoryBytes?: number;
  /** Time limit of each chunk's launch. */
  timeoutMs?: number;
}

/**
 * A range of items of a per-item kernel (`i: item` first), one dimension: each chunk's launch is
 * `{ items: count }`, its `i` from 0, so a kernel that needs the item's place in the whole range
 * takes `spread.first` as an argument; a partitioned array's section starts at the chunk's first.
 */
export interface SpreadItems {
  /** Items in all, 1 to 2^31 - 1. */
  items: number;
  /** Time limit of each chunk's launch. */
  timeoutMs?: number;
}

/** Which kernel a spread launches: a Kernel (of any device; its library and name are used on each), or a library and a name. */
export type SpreadKernel = Kernel | { library: Library; name: string };

/** The most items a range has (item ids are i32). */
const MAX_ITEMS = 2 ** 31 - 1;

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

/** Options of `runtime.spread`. */
export interface SpreadOptions {
  /** The smallest chunk, in units; default 1/64 of an equal share (at least 1). */
  minChunk?: number;
  /** The largest chunk, in units; default each device's `maxTeams` for teams, 2^31 - 1 for items. */
  maxChunk?: number;
  /** Called as each chunk's results are in the host arrays (progress). */
  onChunk?: (chunk: Chunk, device: Device) => void;
}

/** What one device did in a spread. */
export interface SpreadShare {
  device: number;
  name: string;
  /** Units (teams or items) it completed, and their fraction of the range. */
  units: number;
  fraction: number;
  chunks: number;
  /** Its broadcast copies (before the first chunk), and its chunks' time, copies included. */
  setupSeconds: number;
  busySeconds: number;
}

/** A device the spread lost, and what it said. */
export interface SpreadLoss {
  device: number;
  name: string;
  error: OffloadError;
  /** Chunks it had taken that another device re-ran (0 or 1). */
  rerun: number;
}

export interface SpreadResult {
  /** From the call to the last result back on the host. */
  seconds: number;
  /** Until every device had its broadcast copies (the chunks start then). */
  setupSeconds: number;
  shares: SpreadShare[];
  /** Devices lost on the way; their chunks ran elsewhere. */
  lost: SpreadLoss[];
}

/** What the spread needs of its runtime. */
export interface SpreadHost {
  devices: readonly Device[];
  info: InfoLog;
  checkOpen(): void;
}

type Plan =
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

function checkPositive(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
    throw errors.invalidArgument(`${what} must be a positive integer, got ${describe(value)}`);
  return value;
}

function deviceName(device: Device): string {
  return `device ${device.id} (${device.info.name})`;
}

function bytesOf(view: HostView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function elementBytes(view: HostView): number {
  return (view as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1;
}

function checkDevices(host: SpreadHost, devices: unknown): Device[] {
  if (!Array.isArray(devices))
    throw errors.invalidArgument(
      `spread: devices must be an array of this runtime's devices, got ${describe(devices)}`,
    );
  if (devices.length === 0)
    throw errors.invalidArgument('spread: the device list is empty; give at least one device (runtime.devices)');
  const seen = new Set<Device>();
  return devices.map((device: unknown, index) => {
    if (!(device instanceof Device))
      throw errors.invalidArgument(`spread: devices[${index}] must be a Device, got ${describe(device)}`);
    if (!host.devices.includes(device))
      throw errors.invalidArgument(
        `spread: devices[${index}], ${deviceName(device)}, belongs to another runtime (or context); spread over this runtime's devices`,
        device.id,
      );
    if (seen.has(device))
      throw errors.invalidArgument(`spread: devices[${index}], ${deviceName(device)}, is listed twice`, device.id);
    seen.add(device);
    return device;
  });
}

interface Target {
  library: Library;
  name: string;
  /** The parameters the program passes (not the item counts and lengths a launch adds). */
  params: readonly { type: ParamType }[];
  perItem: boolean;
}

function target(library: Library, name: string, params: readonly { name: string; type: ParamType }[]): Target {
  return { library, name, params: params.filter((param) => !isLaunchParam(param.name)), perItem: isPerItem(params) };
}

function checkKernel(kernel: unknown): Target {
  if (kernel instanceof Kernel) return target(kernel.library, kernel.name, kernel.params);
  const spec = kernel as { library?: unknown; name?: unknown } | null;
  if (typeof spec !== 'object' || spec === null || !(spec.library instanceof Library) || typeof spec.name !== 'string')
    throw errors.invalidArgument(
      `spread: the kernel must be a Kernel or { library, name } (a Library of runtime.register() and a kernel name), got ${describe(kernel)}`,
    );
  const entry = spec.library.kernels.find((candidate) => candidate.name === spec.name);
  if (!entry)
    throw errors.notFound(
      `spread: library '${spec.library.name}' has no kernel '${spec.name}' (it has: ${spec.library.kernels.map((k) => k.name).join(', ') || 'none'})`,
    );
  return target(spec.library, spec.name, entry.params);
}

/** A spread's range, checked against its kernel. */
interface Range {
  unit: 'team' | 'item';
  units: number;
  threads?: SpreadTeams['threads'];
  teamMemoryBytes?: number;
  timeoutMs?: number;
}

function checkRange(range: unknown, kernel: Target): Range {
  if (typeof range !== 'object' || range === null || Array.isArray(range))
    throw errors.invalidArgument(`spread: the range must be { teams: n } or { items: n }, got ${describe(range)}`);
  const given = range as Record<string, unknown>;
  if (kernel.perItem) {
    if (given.items === undefined)
      throw errors.invalidArgument(
        `spread: '${kernel.name}' is a per-item kernel (its first parameter is 'i: item'): give the range as { items: n }, not ${describe(range)}`,
      );
    for (const field of ['teams', 'threads', 'teamMemoryBytes'])
      if (given[field] !== undefined)
        throw errors.invalidArgument(
          `spread: range.${field} with range.items: each device picks the grid of its chunks of items; give { items: n } alone`,
        );
    if (Array.isArray(given.items))
      throw errors.invalidArgument(
        `spread: range.items must be one number: a spread cuts one dimension; launch [x, y] items as x * y and compute the coordinates from i + spread.first`,
      );
    const items = checkPositive(given.items, 'spread: range.items');
    if (items > MAX_ITEMS)
      throw errors.invalidArgument(`spread: range.items ${items} is more than 2^31 - 1 (item ids are i32)`);
    return { unit: 'item', units: items, timeoutMs: given.timeoutMs as number | undefined };
  }
  if (given.items !== undefined)
    throw errors.invalidArgument(
      `spread: range.items needs a per-item kernel (one whose first parameter is 'i: item'), and '${kernel.name}' is written for teams: give { teams: n }`,
    );
  if (typeof given.teams !== 'number')
    throw errors.invalidArgument(
      `spread: range.teams must be a number of teams (one dimension), got ${describe(given.teams)}`,
    );
  const teams = range as SpreadTeams;
  return {
    unit: 'team',
    units: checkPositive(teams.teams, 'spread: range.teams'),
    threads: teams.threads,
    teamMemoryBytes: teams.teamMemoryBytes,
    timeoutMs: teams.timeoutMs,
  };
}

/** The plan of each argument, checked against the kernel's parameters and the range. */
function planArguments(
  args: unknown,
  params: readonly { type: ParamType }[],
  kernel: string,
  { units, unit }: Range,
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
function section(plan: Extract<Plan, { kind: 'part' }>, chunk: Chunk): Uint8Array {
  const length = plan.view.byteLength / plan.elementBytes;
  const start = Math.min(length, chunk.first * plan.per) * plan.elementBytes;
  const end = Math.min(length, (chunk.first + chunk.count) * plan.per) * plan.elementBytes;
  return new Uint8Array(plan.view.buffer, plan.view.byteOffset + start, end - start);
}

/** A device's state in a spread. */
class Worker {
  kernel: Kernel | undefined;
  queue: Queue | undefined;
  /** By argument index: broadcast buffers, and each part's buffer (grown as chunks grow). */
  readonly buffers = new Map<number, Buffer>();
  units = 0;
  chunks = 0;
  setupMs = 0;
  busyMs = 0;
  lost: OffloadError | undefined;
  /** The chunk it is running, if any. */
  current: Chunk | undefined;
  rerun = 0;

  constructor(readonly device: Device) {}

  /** Units a millisecond, from its chunks so far; undefined before its first. */
  get rate(): number | undefined {
    return this.chunks === 0 || this.busyMs <= 0 ? undefined : this.units / this.busyMs;
  }
}

function isLoss(error: unknown, device: Device): boolean {
  return error instanceof OffloadError && error.code === 'DEVICE_LOST' && pluginDevice(device).lost !== undefined;
}

/** The work queue: the range not yet handed out, and chunks put back by lost devices. */
class ChunkQueue {
  private cursor = 0;
  private readonly returned: Chunk[] = [];
  private wake: (() => void) | undefined;
  private changed: Promise<void>;

  constructor(
    readonly units: number,
    private readonly minChunk: number,
    private readonly maxChunk: number | undefined,
    private readonly unit: 'team' | 'item',
  ) {
    this.changed = this.renew();
  }

  private renew(): Promise<void> {
    return new Promise((resolve) => (this.wake = resolve));
  }

  /** Wakes workers waiting for chunks a lost device may put back. */
  notify(): void {
    this.wake?.();
    this.changed = this.renew();
  }

  get waitForChange(): Promise<void> {
    return this.changed;
  }

  /** The next chunk for `worker`; 'wait' while others still run chunks that may come back; undefined when all is done. */
  take(worker: Worker, workers: readonly Worker[]): Chunk | 'wait' | undefined {
    const size = this.size(worker, workers);
    const back = this.returned.shift();
    if (back) {
      if (back.count <= size) return back;
      this.returned.unshift({ first: back.first + size, count: back.count - size });
      return { first: back.first, count: size };
    }
    if (this.cursor < this.units) {
      const count = Math.min(size, this.units - this.cursor);
      const chunk = { first: this.cursor, count };
      this.cursor += count;
      return chunk;
    }
    return workers.some((other) => other.current !== undefined) ? 'wait' : undefined;
  }

  /** A lost device's chunk, to be run again. */
  putBack(chunk: Chunk): void {
    this.returned.push(chunk);
  }

  private size(worker: Worker, workers: readonly Worker[]): number {
    const live = workers.filter((other) => !other.lost);
    const left = this.units - this.cursor + this.returned.reduce((sum, chunk) => sum + chunk.count, 0);
    const limit = Math.min(this.maxChunk ?? Infinity, this.unit === 'team' ? worker.device.info.maxTeams : MAX_ITEMS);
    const rate = worker.rate;
    let size: number;
    if (rate === undefined) {
      // A probe: a sixteenth of an equal share, to measure the device on.
      size = Math.ceil(this.units / (live.length * 16));
    } else {
      const measured = live.map((other) => other.rate).filter((r): r is number => r !== undefined);
      const typical = measured.reduce((sum, r) => sum + r, 0) / measured.length;
      const total = live.reduce((sum, other) => sum + (other.rate ?? typical), 0);
      size = Math.ceil((left * (rate / total)) / 2);
    }
    return Math.max(1, Math.min(limit, Math.max(this.minChunk, size)));
  }
}

/**
 * Runs `kernel` over `range` on `devices`, chunk by chunk, and resolves once every chunk's results
 * are in the host arrays; see the module's header.
 */
export async function runSpread(
  host: SpreadHost,
  devices: readonly Device[],
  kernel: SpreadKernel,
  range: SpreadRange,
  args: readonly SpreadArgument[],
  options: SpreadOptions = {},
): Promise<SpreadResult> {
  host.checkOpen();
  const list = checkDevices(host, devices);
  const target = checkKernel(kernel);
  const checked = checkRange(range, target);
  const { units, unit } = checked;
  const plans = planArguments(args, target.params, target.name, checked);
  if (typeof options !== 'object' || options === null)
    throw errors.invalidArgument(`spread: options must be an object, got ${describe(options)}`);
  const minChunk =
    options.minChunk === undefined
      ? Math.max(1, Math.floor(units / (list.length * 64)))
      : checkPositive(options.minChunk, 'spread: options.minChunk');
  const maxChunk =
    options.maxChunk === undefined ? undefined : checkPositive(options.maxChunk, 'spread: options.maxChunk');
  if (options.onChunk !== undefined && typeof options.onChunk !== 'function')
    throw errors.invalidArgument(`spread: options.onChunk must be a function, got ${describe(options.onChunk)}`);

  const start = performance.now();
  const workers = list.map((device) => new Worker(device));
  const queue = new ChunkQueue(units, minChunk, maxChunk, unit);
  let failure: unknown;
  const info = host.info;

  const lose = (worker: Worker, error: OffloadError): void => {
    worker.lost = error;
    if (worker.current) {
      queue.putBack(worker.current);
      worker.rerun++;
      info.spread(
        worker.device.id,
        `lost (${error.message}); ${unit}s [${worker.current.first}, ${worker.current.first + worker.current.count}) go back to the queue`,
      );
      worker.current = undefined;
    } else info.spread(worker.device.id, `lost (${error.message})`);
    queue.notify();
  };

  // Every device loads the kernel and gets the broadcast arrays first, all at once.
  await Promise.all(
    workers.map(async (worker) => {
      const began = performance.now();
      try {
        await setUp(worker, target, plans);
      } catch (error) {
        if (isLoss(error, worker.device)) lose(worker, error as OffloadError);
        else failure ??= error;
      }
      worker.setupMs = performance.now() - began;
    }),
  );
  const setupSeconds = (performance.now() - start) / 1000;

  const work = async (worker: Worker): Promise<void> => {
    while (failure === undefined && !worker.lost) {
      const chunk = queue.take(worker, workers);
      if (chunk === undefined) return;
      if (chunk === 'wait') {
        await queue.waitForChange;
        continue;
      }
      worker.current = chunk;
      info.spread(
        worker.device.id,
        `'${target.name}' ${unit}s [${chunk.first}, ${chunk.first + chunk.count}) of ${units}`,
      );
      const began = performance.now();
      try {
        await runChunk(worker, chunk, plans, checked);
      } catch (error) {
        if (isLoss(error, worker.device)) {
          lose(worker, error as OffloadError);
          return;
        }
        failure ??= error;
        worker.current = undefined;
        queue.notify();
        return;
      }
      worker.busyMs += performance.now() - began;
      worker.units += chunk.count;
      worker.chunks++;
      worker.current = undefined;
      queue.notify();
      try {
        options.onChunk?.(chunk, worker.device);
      } catch (error) {
        // The program's callback: its throw fails the spread once the chunks in flight are in.
        failure ??= new OffloadError('INVALID_ARGUMENT', `spread: options.onChunk threw: ${String(error)}`, {
          cause: error,
        });
        queue.notify();
      }
    }
  };
  try {
    if (failure === undefined) await Promise.all(workers.filter((worker) => !worker.lost).map(work));
  } finally {
    await Promise.all(workers.map(tearDown));
  }
  if (failure !== undefined) throw asOffloadError(failure, `spread of '${target.name}'`);
  const lost = workers.filter((worker) => worker.lost);
  if (lost.length === workers.length)
    throw errors.deviceLost(
      `spread of '${target.name}': every device was lost (${lost.map((w) => `${deviceName(w.device)}: ${w.lost!.message}`).join('; ')})`,
    );
  const seconds = (performance.now() - start) / 1000;
  const shares = workers.map((worker) => ({
    device: worker.device.id,
    name: worker.device.info.name,
    units: worker.units,
    fraction: worker.units / units,
    chunks: worker.chunks,
    setupSeconds: worker.setupMs / 1000,
    busySeconds: worker.busyMs / 1000,
  }));
  if (info.enabled) {
    for (const share of shares)
      info.spread(
        share.device,
        `'${target.name}' did ${share.units} of ${units} ${unit}s (${(share.fraction * 100).toFixed(1)}%) in ${share.chunks} chunks, ` +
          `busy ${(share.busySeconds * 1000).toFixed(1)} ms after ${(share.setupSeconds * 1000).toFixed(1)} ms of broadcast copies; the spread took ${(seconds * 1000).toFixed(1)} ms`,
      );
  }
  return {
    seconds,
    setupSeconds,
    shares,
    lost: lost.map((worker) => ({
      device: worker.device.id,
      name: worker.device.info.name,
      error: worker.lost!,
      rerun: worker.rerun,
    })),
  };
}

/** Loads the kernel on the worker's device and copies the broadcast arrays there. */
async function setUp(worker: Worker, target: Target, plans: readonly Plan[]): Promise<void> {
  const device = worker.device;
  worker.kernel = await device.kernel(target.library, target.name);
  const queue = (worker.queue = device.queue());
  for (const [index, plan] of plans.entries()) {
    if (plan.kind !== 'broadcast') continue;
    const buffer = await device.alloc(Math.max(1, plan.bytes.byteLength));
    worker.buffers.set(index, buffer);
    if (plan.copyIn && plan.bytes.byteLength > 0) queue.write(buffer, plan.bytes);
  }
  await queue.finish();
}

/** A part's buffer on the worker's device, at least `bytes` long. */
async function partBuffer(worker: Worker, index: number, bytes: number, whole: number): Promise<Buffer> {
  const held = worker.buffers.get(index);
  if (held && held.byteLength >= bytes) return held;
  if (held) {
    worker.buffers.delete(index);
    await held.free();
  }
  // Room for a chunk twice as large, so that a device whose chunks grow reallocates rarely.
  const buffer = await worker.device.alloc(Math.max(1, Math.min(whole, bytes * 2)));
  worker.buffers.set(index, buffer);
  return buffer;
}

async function runChunk(worker: Worker, chunk: Chunk, plans: readonly Plan[], range: Range): Promise<void> {
  const queue = worker.queue!;
  const args: KernelArgument[] = [];
  const reads: { staging: Uint8Array; into: Uint8Array }[] = [];
  for (const [index, plan] of plans.entries()) {
    switch (plan.kind) {
      case 'scalar':
        args.push(plan.value);
        break;
      case 'chunk': {
        let value: unknown;
        try {
          value = plan.of(chunk);
        } catch (error) {
          throw new OffloadError(
            'INVALID_ARGUMENT',
            `spread: argument ${index} (${plan.text}) threw for ${range.unit}s [${chunk.first}, ${chunk.first + chunk.count}): ${error instanceof Error ? error.message : String(error)}`,
            { cause: error },
          );
        }
        if (typeof value !== 'number' && typeof value !== 'bigint')
          throw errors.invalidArgument(
            `spread: argument ${index} (${plan.text}) must give a number or a bigint, gave ${describe(value)}`,
          );
        args.push(plan.i64 && typeof value === 'number' ? BigInt(value) : value);
        break;
      }
      case 'broadcast':
        args.push(worker.buffers.get(index)!);
        break;
      case 'part': {
        const bytes = section(plan, chunk);
        const buffer = await partBuffer(worker, index, bytes.byteLength, plan.view.byteLength);
        if (plan.copyIn) queue.write(buffer, bytes);
        if (plan.copyOut) reads.push({ staging: plan.inPlace ? new Uint8Array(bytes.byteLength) : bytes, into: bytes });
        args.push(buffer);
        break;
      }
    }
  }
  let launchGrid: LaunchGrid;
  if (range.unit === 'item') {
    launchGrid = { items: chunk.count };
    if (range.timeoutMs !== undefined) launchGrid.timeoutMs = range.timeoutMs;
  } else {
    const grid: Grid = (launchGrid = { teams: chunk.count });
    if (range.threads !== undefined) grid.threads = range.threads;
    if (range.teamMemoryBytes !== undefined) grid.teamMemoryBytes = range.teamMemoryBytes;
    if (range.timeoutMs !== undefined) grid.timeoutMs = range.timeoutMs;
  }
  queue.launch(worker.kernel!, launchGrid, args);
  let r = 0;
  for (const [index, plan] of plans.entries()) {
    if (plan.kind === 'part' && plan.copyOut) queue.read(worker.buffers.get(index)!, reads[r++]!.staging);
  }
  await queue.finish();
  for (const { staging, into } of reads) if (staging !== into) into.set(staging);
}

async function tearDown(worker: Worker): Promise<void> {
  for (const buffer of worker.buffers.values())
    await buffer.free().catch(dropped('spread', `freeing a buffer of device ${worker.device.id}`));
  worker.buffers.clear();
  await worker.queue?.destroy().catch(dropped('spread', `destroying the queue of device ${worker.device.id}`));
}
