/**
 * A launch's grid as the program gives it (`{ teams, threads, teamMemoryBytes }`, each size a
 * number or up to three dimensions) checked against the device's limits and lowered to the
 * plugins' Grid, whose `teams` and `threads` stay the totals every plugin already used.
 */
import { errors } from '../errors.js';
import type { DeviceInfo, Dims, Grid as PluginGrid } from '../plugins/interface.js';
import { checkInteger, describe } from './checks.js';

/** A size of a grid: a number (one dimension) or [x], [x, y] or [x, y, z]. */
export type GridSize = number | readonly [number] | readonly [number, number] | readonly [number, number, number];

const AXES = ['x', 'y', 'z'] as const;
const MAX_INT = 2 ** 31 - 1;

/** `size` as three dimensions, each checked to be an integer in 1..2^31-1. */
function dimsOf(size: unknown, what: string, device: number): Dims {
  if (!Array.isArray(size)) {
    const n = checkInteger(size, what, 1, MAX_INT, device);
    return [n, 1, 1];
  }
  if (size.length < 1 || size.length > 3) {
    throw errors.invalidArgument(
      `${what} must be a number or 1 to 3 dimensions [x, y, z], got ${describe(size)}`,
      device,
    );
  }
  const dims: Dims = [1, 1, 1];
  size.forEach(
    (value: unknown, axis) =>
      (dims[axis] = checkInteger(value, `${what}[${axis}] (${AXES[axis]})`, 1, MAX_INT, device)),
  );
  return dims;
}

/** x * y * z, refused past 2^31 - 1 (a device's ids are i32). */
function total(dims: Dims, what: string, device: number): number {
  const product = dims[0] * dims[1] * dims[2];
  if (product > MAX_INT)
    throw errors.invalidArgument(`${what} ${dims.join(' x ')} is ${product}, more than 2^31 - 1`, device);
  return product;
}

/** The first axis on which `dims` exceeds the device's `limit`, as a message part naming it, or undefined. */
function overLimit(dims: Dims, info: DeviceInfo, limit: 'maxTeamDims' | 'maxThreadDims'): string | undefined {
  const limits = info[limit];
  const axis = dims.findIndex((value, i) => value > limits[i]!);
  if (axis < 0) return undefined;
  const named = info.limitNames?.[limit];
  return `${AXES[axis]} = ${dims[axis]} is more than ${limits[axis]} (${limit}${named ? `, the adapter's ${named}` : ''})`;
}

/** `limit` with the hardware limit behind it, for messages. */
function limitName(info: DeviceInfo, limit: 'maxTeams' | 'maxThreadsPerTeam' | 'maxTeamMemoryBytes'): string {
  const named = info.limitNames?.[limit];
  return `${limit} ${info[limit]}${named ? `, the adapter's ${named}` : ''}`;
}

const isCount = (value: unknown): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_INT;

/**
 * The grid most launches give, plain numbers within every limit, lowered without a check that
 * builds a message (each of lowerGrid's names its field for its error: seven strings a launch);
 * undefined for any other grid, which lowerGrid then checks and reports in full.
 */
function lowerPlainGrid(shape: Record<string, unknown>, info: DeviceInfo): PluginGrid | undefined {
  const { teams, threads = 1, teamMemoryBytes = 0 } = shape;
  if (!isCount(teams) || teams > info.maxTeams || teams > info.maxTeamDims[0]) return undefined;
  if (!isCount(threads)) return undefined;
  const clamped = Math.min(threads, info.maxThreadsPerTeam);
  if (clamped > info.maxThreadDims[0]) return undefined;
  if (
    typeof teamMemoryBytes !== 'number' ||
    !Number.isInteger(teamMemoryBytes) ||
    teamMemoryBytes < 0 ||
    teamMemoryBytes > MAX_INT ||
    teamMemoryBytes > info.maxTeamMemoryBytes
  )
    return undefined;
  return {
    teams,
    threads: clamped,
    teamDims: [teams, 1, 1],
    threadDims: [clamped, 1, 1],
    teamMemoryBytes,
    timeoutMs: undefined,
  };
}

/**
 * Checks the teams, threads and team memory of a launch of `kernel` on a device with `info`.
 * A number of threads is clamped to `info.maxThreadsPerTeam` (OpenMP's thread_limit: a kernel
 * reads numThreads()); dimensions are taken as given or refused, since a kernel written for
 * a 3-D block depends on its shape.
 */
export function lowerGrid(
  shape: Record<string, unknown>,
  kernel: string,
  info: DeviceInfo,
  device: number,
): PluginGrid {
  const quick = lowerPlainGrid(shape, info);
  if (quick !== undefined) return quick;
  const what = `launch of '${kernel}': grid`;
  const teamDims = dimsOf(shape.teams, `${what}.teams`, device);
  const teams = total(teamDims, `${what}.teams`, device);
  const tooWide = overLimit(teamDims, info, 'maxTeamDims');
  if ((!Array.isArray(shape.teams) && teams > info.maxTeams) || tooWide !== undefined) {
    const reason = tooWide ?? `is more than device ${device} runs in one launch (${limitName(info, 'maxTeams')})`;
    throw errors.invalidArgument(
      `${what}.teams ${teamDims.slice(0, Array.isArray(shape.teams) ? shape.teams.length : 1).join(' x ')}: ${reason}`,
      device,
    );
  }
  let threadDims = dimsOf(shape.threads ?? 1, `${what}.threads`, device);
  if (!Array.isArray(shape.threads)) threadDims = [Math.min(threadDims[0], info.maxThreadsPerTeam), 1, 1];
  const threads = total(threadDims, `${what}.threads`, device);
  const tooWideThreads = overLimit(threadDims, info, 'maxThreadDims');
  if (threads > info.maxThreadsPerTeam || tooWideThreads !== undefined) {
    const reason =
      tooWideThreads ??
      `${threads} threads are more than a team of device ${device} has (${limitName(info, 'maxThreadsPerTeam')})`;
    throw errors.invalidArgument(`${what}.threads ${threadDims.join(' x ')}: ${reason}`, device);
  }
  const teamMemoryBytes = checkInteger(shape.teamMemoryBytes ?? 0, `${what}.teamMemoryBytes`, 0, MAX_INT, device);
  if (teamMemoryBytes > info.maxTeamMemoryBytes) {
    throw errors.invalidArgument(
      `${what}.teamMemoryBytes ${teamMemoryBytes} is more than device ${device} gives a team (${limitName(info, 'maxTeamMemoryBytes')})`,
      device,
    );
  }
  return { teams, threads, teamDims, threadDims, teamMemoryBytes, timeoutMs: undefined };
}
