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
 * slow one finish together. A device holds `chunksInFlight` chunks at once (default 2), each on
 * a queue of its own, so that one chunk's copies and round trip overlap another's launch; its
 * throughput is its units over the time it had any chunk in flight. Each argument says how its
 * data follows a chunk:
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
import type { Buffer } from '../api/buffer.js';
import { describe, programSignature } from '../api/internal.js';
import { Device } from '../api/device.js';
import { Kernel } from '../api/kernel.js';
import { Library } from '../api/library.js';
import type { Grid, KernelArgument, LaunchGrid } from '../api/queue.js';
import { asOffloadError, errors, OffloadError } from '../errors.js';
import type { ParamType } from '../image/manifest.js';
import { dropped } from '../runtime/debug.js';
import type { InfoLog } from '../runtime/info-log.js';
import { performance } from '../platform.js';
import {
  checkPositive,
  MAX_ITEMS,
  planArguments,
  section,
  type Chunk,
  type Plan,
  type SpreadArgument,
} from './spread-arguments.js';
import { ChunkQueue, isLoss, Worker, type Lane } from './spread-queue.js';

export { spread, type Chunk, type SpreadArgument } from './spread-arguments.js';

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

/**
 * Chunks a device holds at once: with two, the next chunk's sections travel while one runs, so a
 * proxy is not idle for each chunk's round trip and copies.
 */
const DEFAULT_IN_FLIGHT = 2;
const MAX_IN_FLIGHT = 8;

/** Options of `runtime.spread`. */
export interface SpreadOptions {
  /** The smallest chunk, in units; default 1/64 of an equal share (at least 1). */
  minChunk?: number;
  /** The largest chunk, in units; default each device's `maxTeams` for teams, 2^31 - 1 for items. */
  maxChunk?: number;
  /** Called as each chunk's results are in the host arrays (progress). */
  onChunk?: (chunk: Chunk, device: Device) => void;
  /** Chunks each device holds at once, each on a queue of its own (1 to 8; default 2). */
  chunksInFlight?: number;
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
  /** Chunks it had in flight that another device re-ran (at most `chunksInFlight`). */
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

function deviceName(device: Device): string {
  return `device ${device.id} (${device.info.name})`;
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
  return { library, name, ...programSignature(params) };
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
  const inFlight =
    options.chunksInFlight === undefined
      ? DEFAULT_IN_FLIGHT
      : checkPositive(options.chunksInFlight, 'spread: options.chunksInFlight');
  if (inFlight > MAX_IN_FLIGHT)
    throw errors.invalidArgument(`spread: options.chunksInFlight ${inFlight} is more than ${MAX_IN_FLIGHT}`);
  if (options.onChunk !== undefined && typeof options.onChunk !== 'function')
    throw errors.invalidArgument(`spread: options.onChunk must be a function, got ${describe(options.onChunk)}`);

  const start = performance.now();
  const workers = list.map((device) => new Worker(device, inFlight));
  const queue = new ChunkQueue(units, minChunk, maxChunk, unit);
  let failure: unknown;
  const info = host.info;

  // Each lane puts back its own chunk as its own operations fail: another lane's chunk may still
  // have completed (and then it must not run twice).
  const lose = (worker: Worker, lane: Lane | undefined, error: OffloadError): void => {
    worker.lost ??= error;
    const chunk = lane?.current;
    if (chunk) {
      queue.putBack(chunk);
      worker.rerun++;
      info.spread(
        worker.device.id,
        `lost (${error.message}); ${unit}s [${chunk.first}, ${chunk.first + chunk.count}) go back to the queue`,
      );
      lane.current = undefined;
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
        if (isLoss(error, worker.device)) lose(worker, undefined, error as OffloadError);
        else failure ??= error;
      }
      worker.setupMs = performance.now() - began;
    }),
  );
  const setupSeconds = (performance.now() - start) / 1000;

  const work = async (worker: Worker, lane: Lane): Promise<void> => {
    while (failure === undefined && !worker.lost) {
      const chunk = queue.take(worker, workers);
      if (chunk === undefined) return;
      if (chunk === 'wait') {
        await queue.waitForChange;
        continue;
      }
      lane.current = chunk;
      info.spread(
        worker.device.id,
        `'${target.name}' ${unit}s [${chunk.first}, ${chunk.first + chunk.count}) of ${units}`,
      );
      const began = performance.now();
      try {
        await runChunk(worker, lane, chunk, plans, checked);
      } catch (error) {
        if (isLoss(error, worker.device)) {
          lose(worker, lane, error as OffloadError);
          return;
        }
        failure ??= error;
        lane.current = undefined;
        queue.notify();
        return;
      }
      worker.completed(chunk.count, began, performance.now());
      lane.current = undefined;
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
    if (failure === undefined)
      await Promise.all(
        workers.filter((worker) => !worker.lost).flatMap((worker) => worker.lanes.map((lane) => work(worker, lane))),
      );
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
  for (const lane of worker.lanes) lane.queue = device.queue();
  const queue = worker.lanes[0]!.queue!;
  for (const [index, plan] of plans.entries()) {
    if (plan.kind !== 'broadcast') continue;
    const buffer = await device.alloc(Math.max(1, plan.bytes.byteLength));
    worker.buffers.set(index, buffer);
    if (plan.copyIn && plan.bytes.byteLength > 0) queue.write(buffer, plan.bytes);
  }
  await queue.finish();
}

/** A part's buffer on the worker's device, at least `bytes` long. */
async function partBuffer(worker: Worker, lane: Lane, index: number, bytes: number, whole: number): Promise<Buffer> {
  const held = lane.buffers.get(index);
  if (held && held.byteLength >= bytes) return held;
  if (held) {
    lane.buffers.delete(index);
    await held.free();
  }
  // Room for a chunk twice as large, so that a device whose chunks grow reallocates rarely.
  const buffer = await worker.device.alloc(Math.max(1, Math.min(whole, bytes * 2)));
  lane.buffers.set(index, buffer);
  return buffer;
}

async function runChunk(worker: Worker, lane: Lane, chunk: Chunk, plans: readonly Plan[], range: Range): Promise<void> {
  const queue = lane.queue!;
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
        const buffer = await partBuffer(worker, lane, index, bytes.byteLength, plan.view.byteLength);
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
    if (plan.kind === 'part' && plan.copyOut) queue.read(lane.buffers.get(index)!, reads[r++]!.staging);
  }
  await queue.finish();
  for (const { staging, into } of reads) if (staging !== into) into.set(staging);
}

async function tearDown(worker: Worker): Promise<void> {
  const buffers = [...worker.buffers.values(), ...worker.lanes.flatMap((lane) => [...lane.buffers.values()])];
  for (const buffer of buffers)
    await buffer.free().catch(dropped('spread', `freeing a buffer of device ${worker.device.id}`));
  worker.buffers.clear();
  for (const lane of worker.lanes) {
    lane.buffers.clear();
    await lane.queue?.destroy().catch(dropped('spread', `destroying a queue of device ${worker.device.id}`));
  }
}
