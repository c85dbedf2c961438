/**
 * What a kernel's launches reuse, so that a launch that runs at once (inline on the host
 * device) allocates nothing but its Event: the lowered arguments, lent to the plugin
 * for the length of its `launch` call, and the lowered grid of the last plain grid given.
 */
import type { Allocation, Grid as PluginGrid, LaunchArg } from '../plugins/interface.js';
import type { ParamInfo } from '../image/manifest.js';
import type { Buffer } from './buffer.js';

/** A pointer argument as the plugin takes it, with the Buffer it points into (kept in use while the launch runs). */
export interface LoweredPointer {
  readonly type: 'ptr';
  alloc: Allocation;
  offset: number;
  buffer: Buffer | undefined;
}

export interface LoweredScalar {
  readonly type: 'i32' | 'f32' | 'f64' | 'i64';
  value: number | bigint;
}

export type LoweredArg = LoweredPointer | LoweredScalar;

/** Stands in for a pointer slot's allocation until the first launch fills it. */
const NO_ALLOCATION: Allocation = Object.freeze({ bytes: 0, kind: 'device' as const });

/** Lowered argument slots for `params`, one object per parameter, its shape fixed by the parameter's type. */
export function loweredSlots(params: readonly ParamInfo[]): LoweredArg[] {
  return params.map((param): LoweredArg =>
    param.type === 'ptr'
      ? { type: 'ptr', alloc: NO_ALLOCATION, offset: 0, buffer: undefined }
      : { type: param.type, value: param.type === 'i64' ? 0n : 0 },
  );
}

/** The plugin's view of lowered arguments (a pointer's Buffer is the runtime's, not the plugin's). */
export const asLaunchArgs = (args: readonly LoweredArg[]): readonly LaunchArg[] => args as readonly LaunchArg[];

export class LaunchScratch {
  /** The argument slots, lent to one plugin call at a time; a launch made while they are lent gets its own. */
  readonly args: LoweredArg[];
  lent = false;
  /** The last plain grid given (numbers only), as given, and what it lowered to (immutable: plugins may keep it). */
  teams: unknown = undefined;
  threads: unknown = undefined;
  teamMemoryBytes: unknown = undefined;
  timeoutMs: unknown = undefined;
  grid: PluginGrid | undefined = undefined;

  constructor(private readonly params: readonly ParamInfo[]) {
    this.args = loweredSlots(params);
  }

  /** Slots for a launch: the kernel's own unless lent, else new ones (a launch from a print listener). */
  take(): LoweredArg[] {
    if (this.lent) return loweredSlots(this.params);
    this.lent = true;
    return this.args;
  }

  /** Gives back what `take` gave (new slots are dropped). */
  give(args: LoweredArg[]): void {
    if (args === this.args) this.lent = false;
  }
}
