/**
 * Per-item launches: a kernel written for one item (`i: item` first; docs/kernels.md) launched
 * with `{ items }`. The build gave such a kernel three trailing i32 parameters, the item counts
 * along x, y and z, and a body that runs the items of its invocation; a launch here becomes an
 * ordinary one, a grid the device suits plus those counts as arguments, so that no plugin, proxy
 * or wire message knows about items: behind a proxy the grid is chosen for the proxy's device.
 */
import { errors } from '../errors.js';
import type { DeviceInfo, Dims } from '../plugins/interface.js';
import { isPerItem, type ImageFormat } from '../image/manifest.js';
import { describe, checkInteger } from './checks.js';
import type { GridSize } from './grid.js';

const MAX_ITEMS = 2 ** 31 - 1;
const AXES = ['x', 'y', 'z'] as const;

/** Threads per team a per-item launch takes on a GPU (one item per invocation). */
export const GPU_ITEM_THREADS = 64;
/**
 * Teams per compute unit a per-item launch takes on the host device: each team runs one
 * contiguous block of the items, and more blocks than workers even out items of unequal cost
 * (mandelbrot's rows) while each block stays long enough that a team's start costs nothing.
 */
export const HOST_TEAMS_PER_UNIT = 16;

/** `items` as three dimensions, each an integer in 1..2^31-1 and their product too; what failed named. */
export function itemDims(items: unknown, what: string, device?: number): Dims {
  const hint = `(write { items: n } or { items: [x, y] } / [x, y, z], each from 1 to 2^31 - 1)`;
  let dims: Dims;
  if (Array.isArray(items)) {
    if (items.length < 1 || items.length > 3)
      throw errors.invalidArgument(
        `${what} must be a number or 1 to 3 dimensions, got ${items.length} ${hint}`,
        device,
      );
    dims = [1, 1, 1];
    items.forEach((value: unknown, axis) => {
      dims[axis] = checkCount(value, `${what}[${axis}] (${AXES[axis]})`, hint, device);
    });
  } else {
    dims = [checkCount(items, what, hint, device), 1, 1];
  }
  const total = dims[0] * dims[1] * dims[2];
  if (total > MAX_ITEMS)
    throw errors.invalidArgument(
      `${what} ${dims.join(' x ')} is ${total} items, more than 2^31 - 1 (item ids are i32): split the range over several launches`,
      device,
    );
  return dims;
}

function checkCount(value: unknown, what: string, hint: string, device: number | undefined): number {
  if (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_ITEMS) return value;
  const why =
    value === 0
      ? 'is 0: a launch runs at least one item; skip the launch for an empty range'
      : `must be an integer from 1 to 2^31 - 1, got ${describe(value)}`;
  throw errors.invalidArgument(`${what} ${why} ${hint}`, device);
}

/** The teams and threads a device would run `total` items with. */
export interface SuggestedGrid {
  teams: number | [number, number, number];
  threads: number;
}

/**
 * The grid a device runs `dims` items of a per-item kernel with (liboffload's
 * olCalculateOptimalOccupancy): on a device that runs wasm, HOST_TEAMS_PER_UNIT teams per compute
 * unit, one thread each, a contiguous block of items per team; on one that runs WGSL,
 * GPU_ITEM_THREADS threads per team and enough teams for one invocation per item, along y too
 * when x would exceed the device's teams per dimension.
 */
export function itemsGrid(
  dims: Dims,
  format: ImageFormat,
  info: DeviceInfo,
  what: string,
  device?: number,
): SuggestedGrid {
  const total = dims[0] * dims[1] * dims[2];
  if (format === 'wasm') {
    const teams = Math.max(
      1,
      Math.min(total, HOST_TEAMS_PER_UNIT * info.computeUnits, info.maxTeams, info.maxTeamDims[0]),
    );
    return { teams, threads: 1 };
  }
  const threads = Math.min(GPU_ITEM_THREADS, info.maxThreadsPerTeam, info.maxThreadDims[0]);
  const groups = Math.ceil(total / threads);
  const x = Math.min(groups, info.maxTeamDims[0]);
  const y = Math.ceil(groups / x);
  if (y > info.maxTeamDims[1])
    throw errors.invalidArgument(
      `${what}: ${total} items need ${groups} teams of ${threads}, more than device ${device} dispatches (${info.maxTeamDims[0]} x ${info.maxTeamDims[1]}): split the range over several launches`,
      device,
    );
  return { teams: y === 1 ? x : [x, y, 1], threads };
}

/** `grid.items` of a launch of `kernel`, lowered: the grid and the arguments with the item counts appended. */
export function lowerItemsLaunch(
  kernel: { name: string; params: readonly { name: string; type: string }[]; loaded: { format: ImageFormat } },
  grid: Record<string, unknown>,
  args: readonly unknown[],
  info: DeviceInfo,
  device: number,
): { grid: { teams: GridSize; threads: number; timeoutMs?: unknown }; args: unknown[] } {
  const what = `launch of '${kernel.name}': grid.items`;
  if (!isPerItem(kernel.params))
    throw errors.invalidArgument(
      `launch of '${kernel.name}': grid.items launches a per-item kernel (one whose first parameter is 'i: item'), and '${kernel.name}' is not one: launch it with { teams, threads }, or write it as 'export function ${kernel.name}(i: item, ...)'`,
      device,
    );
  for (const field of ['teams', 'threads', 'teamMemoryBytes'] as const) {
    if (grid[field] !== undefined)
      throw errors.invalidArgument(
        `launch of '${kernel.name}': grid.${field} with grid.items: the device picks the teams of a per-item launch; give { items } alone (team memory and barriers need an explicit { teams, threads } launch of a kernel written for teams)`,
        device,
      );
  }
  const dims = itemDims(grid.items, what, device);
  const suggested = itemsGrid(dims, kernel.loaded.format, info, what, device);
  const lowered: { teams: GridSize; threads: number; timeoutMs?: unknown } = {
    teams: suggested.teams,
    threads: suggested.threads,
  };
  if (grid.timeoutMs !== undefined) lowered.timeoutMs = grid.timeoutMs;
  return { grid: lowered, args: [...args, ...dims] };
}

/**
 * The grid and arguments of a launch of a kernel with parameters the launch passes (item counts,
 * pointer lengths; Kernel.ownParams), given the program's: `{ items }` lowered to a grid, and
 * the arguments completed (lengths as 0 here, set from the pointers once checked, by
 * setPointerLengths). Arguments already complete (a proxy's, or a program's own) stay as given.
 */
export function completeLaunch(
  kernel: {
    name: string;
    params: readonly { name: string; type: string }[];
    loaded: { format: ImageFormat };
    perItem: boolean;
    ownParams: number;
    pointerLengths: readonly (readonly [number, number])[];
  },
  grid: Record<string, unknown>,
  args: readonly unknown[],
  info: DeviceInfo,
  device: number,
): { grid: Record<string, unknown>; args: readonly unknown[] } {
  if (grid.items !== undefined) {
    const lowered = lowerItemsLaunch(kernel, grid, args, info, device);
    const counts = lowered.args.slice(args.length);
    if (args.length !== kernel.ownParams) return { grid: lowered.grid, args: lowered.args };
    return { grid: lowered.grid, args: [...args, ...kernel.pointerLengths.map(() => 0), ...counts] };
  }
  if (!Array.isArray(args) || args.length !== kernel.ownParams || kernel.ownParams === kernel.params.length)
    return { grid, args };
  if (kernel.perItem) throw teamsLaunchOfPerItem(kernel, device);
  return { grid, args: [...args, ...kernel.pointerLengths.map(() => 0)] };
}

/** Sets each pointer length of a checked kernel's lowered arguments to the bytes of its pointer's buffer from the pointer. */
export function setPointerLengths(
  slots: readonly { value?: number | bigint; buffer?: { byteLength: number }; offset?: number }[],
  lengths: readonly (readonly [number, number])[],
): void {
  for (const [length, pointer] of lengths) {
    const slot = slots[pointer]!;
    slots[length]!.value = Math.min(MAX_ITEMS, (slot.buffer?.byteLength ?? 0) - (slot.offset ?? 0));
  }
}

/** Why a per-item kernel cannot take a `{ teams }` launch with only its own arguments. */
export function teamsLaunchOfPerItem(kernel: { name: string; params: readonly { name: string }[] }, device: number) {
  const own = kernel.params.slice(0, -3).map((param) => param.name);
  return errors.invalidArgument(
    `launch of '${kernel.name}': it is a per-item kernel (its first parameter is 'i: item'), which runs over items, not teams: ` +
      `launch it with { items: n } (or [x, y] / [x, y, z]) and the arguments [${own.join(', ')}]`,
    device,
  );
}

/** `checkInteger` for suggestGrid's teamMemoryBytes. */
export function checkTeamMemory(value: unknown, what: string, info: DeviceInfo, device: number): number {
  const bytes = checkInteger(value ?? 0, what, 0, MAX_ITEMS, device);
  if (bytes > info.maxTeamMemoryBytes)
    throw errors.invalidArgument(
      `${what} ${bytes} is more than device ${device} gives a team (maxTeamMemoryBytes ${info.maxTeamMemoryBytes})`,
      device,
    );
  return bytes;
}
