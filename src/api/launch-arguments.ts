/**
 * What a launch takes (its grid and its arguments) and their lowering: the kernel and grid
 * checked against the device and lowered (with the kernel's cache of its last plain grid), the
 * arguments checked against the kernel's parameters and lowered into its slots.
 */
import { asOffloadError, errors, type OffloadError } from '../errors.js';
import { MAX_MILLISECONDS } from '../units.js';
import type { Grid as PluginGrid } from '../plugins/interface.js';
import type { LoweredArg } from './launch-scratch.js';
import { Buffer, DevicePointer } from './buffer.js';
import {
  checkArgumentCount,
  checkInteger,
  checkOptions,
  checkRange,
  checkScalar,
  checkSize,
  describe,
  isOptionsObject,
  scalarProblem,
} from './checks.js';
import type { Device } from './device.js';
import { type GridSize, lowerGrid } from './grid.js';
import { Kernel } from './kernel.js';

export interface Grid {
  /**
   * Number of teams (at least 1), or teams along [x, y, z] (each within `device.info.maxTeamDims`,
   * their product within `maxTeams`). A kernel reads its place with teamId(d) and numTeams(d).
   */
  teams: GridSize;
  /**
   * Threads per team; default 1. A number is clamped to `device.info.maxThreadsPerTeam`, as
   * OpenMP's thread_limit; dimensions [x, y, z] are taken as given or refused (within
   * `maxThreadDims`, their product within `maxThreadsPerTeam`). The threads of a team share its
   * team memory and meet at barrier().
   */
  threads?: GridSize;
  /**
   * Bytes of scratch memory per team, shared by its threads (teamMemory() in a kernel); default
   * 0; at most `device.info.maxTeamMemoryBytes`. Its contents start undefined and end with the team.
   */
  teamMemoryBytes?: number;
  /**
   * Time limit in milliseconds: a launch still running after it fails with TIMEOUT, naming the
   * kernel and the limit, and the device stops it and goes on (on the host device the workers
   * running it are replaced). Counted from when the launch begins to run, not while it waits
   * for a worker. Default: OFFLOAD_LAUNCH_TIMEOUT, or none.
   */
  timeoutMs?: number;
}

/**
 * The grid of a per-item kernel's launch (its first parameter is `i: item`): the items, and the
 * device picks the teams (`device.suggestGrid` says which).
 */
export interface ItemsGrid {
  /** Number of items (1 to 2^31 - 1), or items along [x, y] or [x, y, z] (their product too). */
  items: GridSize;
  /** As Grid.timeoutMs. */
  timeoutMs?: number;
}

/** What `queue.launch` takes: teams for a kernel written for teams, items for a per-item one. */
export type LaunchGrid = Grid | ItemsGrid;

/** The longest time limit a launch takes (about 24 days, what a Node timer can wait). */
export const MAX_TIMEOUT_MS = MAX_MILLISECONDS;

/** A kernel argument: a number (i32, f32, f64), a bigint (i64), a Buffer or a DevicePointer (ptr). */
export type KernelArgument = number | bigint | Buffer | DevicePointer;

/** @internal What a resolving launch (Queue.launchResolving) asks for the pointer an argument stands for. */
export interface PointerResolver {
  /**
   * For a pointer argument: the pointer it stands for; undefined when it stands for one the
   * launch cannot take (the launch then does nothing); a Buffer, a DevicePointer or any other
   * value as it is (the launch checks it as usual).
   */
  pointerFor(value: unknown): unknown;
}

/** `value` as a Buffer of `target`'s runtime that is not freed (`name` says which argument it is). */
export function checkedBuffer(target: Device, value: unknown, name: string): Buffer {
  if (!(value instanceof Buffer))
    throw errors.invalidArgument(`${name} must be a Buffer, got ${describe(value)}`, target.id);
  if (value.device.context !== target.context) {
    throw errors.invalidBuffer(`${name} belongs to another runtime`, target.id);
  }
  if (value.freed) throw errors.invalidBuffer(`${name} (${value.describe()}) was freed`, target.id);
  return value;
}

/** Why pointer argument `index` of a launch of `kernel` is refused (launch found that it is). */
function pointerArgumentError(target: Device, kernel: Kernel, index: number, value: unknown): OffloadError {
  const device = target.id;
  const param = kernel.params[index]!;
  const position = `launch of '${kernel.name}': argument ${index} '${param.name}'`;
  try {
    const pointer = value instanceof DevicePointer;
    const buffer = checkedBuffer(target, pointer ? value.buffer : value, `${position} (ptr)`);
    if (buffer.device !== target) {
      return errors.invalidBuffer(
        `${position} is a ${buffer.describe()}, but the kernel runs on device ${device}`,
        device,
      );
    }
    const offset = pointer ? checkSize(value.byteOffset, `${position}: the pointer's offset`, device) : 0;
    checkRange(offset, 0, buffer.byteLength, `${position}: pointer into ${buffer.describe()}`, device);
  } catch (error) {
    return asOffloadError(error, position);
  }
  return asOffloadError(new Error('the launch refused it, but no check of it fails'), `checking ${position}`, {
    device,
  });
}

/**
 * The kernel and grid of a launch checked (the kernel is this device's, its library still
 * registered, the grid within the device's limits) and the grid lowered, with its time limit.
 * A plain grid (numbers only) equal to the kernel's last one gets the same lowered grid again.
 */
export function launchGrid(target: Device, kernel: Kernel, grid: LaunchGrid): PluginGrid {
  const device = target.id;
  if (!(kernel instanceof Kernel))
    throw errors.invalidArgument(`launch: kernel must be a Kernel, got ${describe(kernel)}`, device);
  if (kernel.device !== target) {
    throw errors.invalidArgument(
      `launch: kernel '${kernel.name}' was loaded for device ${kernel.device.id}, not for this queue's device ${device}`,
      device,
    );
  }
  const library = kernel.library.record;
  if (library.unregistered)
    throw errors.invalidArgument(
      `launch: the library '${library.name}' of kernel '${kernel.name}' was unregistered`,
      device,
    );
  const shape = isOptionsObject(grid) ? grid : checkOptions(grid, `launch of '${kernel.name}': grid`);
  // Each field read once: a getter answering differently the second time must not split the check from the cache.
  const { teams, threads, teamMemoryBytes, timeoutMs } = shape;
  const cache = kernel.scratch;
  if (
    cache.grid !== undefined &&
    teams === cache.teams &&
    threads === cache.threads &&
    teamMemoryBytes === cache.teamMemoryBytes &&
    timeoutMs === cache.timeoutMs
  )
    return cache.grid;
  const lowered = lowerLaunchGrid(target, kernel, { teams, threads, teamMemoryBytes, timeoutMs });
  if (typeof teams === 'number' && (threads === undefined || typeof threads === 'number')) {
    Object.freeze(lowered.teamDims);
    Object.freeze(lowered.threadDims);
    cache.grid = Object.freeze(lowered);
    cache.teams = teams;
    cache.threads = threads;
    cache.teamMemoryBytes = teamMemoryBytes;
    cache.timeoutMs = timeoutMs;
  }
  return lowered;
}

function lowerLaunchGrid(target: Device, kernel: Kernel, shape: Record<string, unknown>): PluginGrid {
  const device = target.id;
  const info = target.info;
  const lowered = lowerGrid(shape, kernel.name, info, device);
  const limit = shape.timeoutMs;
  if (limit !== undefined) {
    // Named only when refused (a proxy gives every launch its limit: this is a hot path there).
    lowered.timeoutMs =
      typeof limit === 'number' && Number.isInteger(limit) && limit >= 1 && limit <= MAX_TIMEOUT_MS
        ? limit
        : checkInteger(limit, `launch of '${kernel.name}': grid.timeoutMs`, 1, MAX_TIMEOUT_MS, device);
    if (!info.launchTimeouts) {
      throw errors.unsupported(
        `launch of '${kernel.name}': device ${device} (${info.name}) cannot stop a running launch, so it takes no grid.timeoutMs`,
        device,
      );
    }
  } else if (info.launchTimeouts) {
    // The runtime's default (OFFLOAD_LAUNCH_TIMEOUT) applies where a device can honour it.
    lowered.timeoutMs = target.context.launchTimeoutMs;
  }
  return lowered;
}

/**
 * @internal
 * A launch's arguments checked against `kernel`'s parameters and lowered into `slots`.
 * Checked first and described only on failure: a launch builds no message (the messages of
 * four arguments were a fifth of an inline launch's 1.6 us).
 */
export function launchArgs(
  target: Device,
  kernel: Kernel,
  args: readonly KernelArgument[],
  slots: LoweredArg[],
  resolver: PointerResolver | undefined,
): boolean {
  const device = target.id;
  if (!Array.isArray(args))
    throw errors.invalidArgument(`launch of '${kernel.name}': args must be an array, got ${describe(args)}`, device);
  const params = kernel.params;
  if (args.length !== params.length) checkArgumentCount(`launch of '${kernel.name}'`, params, args.length, device);
  for (let index = 0; index < params.length; index++) {
    const param = params[index]!;
    const given: unknown = args[index];
    const slot = slots[index]!;
    if (slot.type === 'ptr') {
      let value = given;
      if (resolver !== undefined) {
        value = resolver.pointerFor(given);
        if (value === undefined) return false;
      }
      // Buffer first: `instanceof` walks an object's prototypes until it finds the class, so
      // a Buffer answers at the first step, anything else only at the end of its chain.
      let buffer = value;
      let offset: unknown = 0;
      if (!(value instanceof Buffer) && value instanceof DevicePointer) {
        buffer = value.buffer;
        offset = value.byteOffset;
      }
      if (
        !(buffer instanceof Buffer) ||
        buffer.device !== target ||
        buffer.freed ||
        typeof offset !== 'number' ||
        !Number.isSafeInteger(offset) ||
        offset < 0 ||
        offset > buffer.byteLength // a pointer may point one past the end (as in C), never further
      )
        throw pointerArgumentError(target, kernel, index, value);
      slot.alloc = buffer.allocation;
      slot.offset = offset;
      slot.buffer = buffer;
      continue;
    }
    // checkScalar throws, naming the argument, only for a value scalarProblem refused (a
    // resolving launch declines instead, without building the message).
    if (scalarProblem(given, param.type) !== undefined) {
      if (resolver !== undefined) return false;
      checkScalar(given, param, `launch of '${kernel.name}': argument ${index}`, device);
    }
    slot.value = given as number | bigint;
  }
  return true;
}
