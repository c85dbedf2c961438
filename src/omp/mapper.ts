/**
 * OpenMP target-data semantics over the public device API: what `__tgt_target_data_begin`,
 * `_update` and `_end` do in libomptarget, for TypeScript arrays, and OpenMP `target`.
 *
 * The mapper keeps each device's mapping table and queues and runs each construct: all copies of
 * one call go on one queue, in order, and the call resolves when they are done. What entering and
 * leaving a clause counts and copies is enter-exit.ts's.
 */
import { errors } from '../errors.js';
import type { Device } from '../api/device.js';
import type { Kernel } from '../api/kernel.js';
import type { Event, LaunchGrid as Grid, KernelArgument, Queue } from '../api/queue.js';
import type { InfoLog } from '../runtime/info-log.js';
import { dropped } from '../runtime/debug.js';
import type { Tracer } from '../runtime/trace.js';
import {
  checkArgumentCount,
  checkScalar,
  hasFailed,
  isReusable,
  launchResolving,
  programParams,
} from '../api/internal.js';
import { ENTER_TYPES, entersMapping, isMapSpec, type HostView, type MapSpec, type MapType } from './map.js';
import { describeRange, MappingTable } from './table.js';
import { checkSpecs, clauseName, EXIT_TYPES } from './clause-checks.js';
import { copyRange, enterClauses, exitClauses, logMapping } from './enter-exit.js';
import { PresentPointers } from './present-pointers.js';

/** An argument of `runtime.target`: a kernel argument, or a map clause for a pointer. */
export type TargetArgument = KernelArgument | MapSpec;

/** How a clause that entered a region leaves it when the region ends. */
function exitTypeOf(type: MapType): MapType {
  return type === 'to' || type === 'alloc' ? 'release' : type;
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

  enterData(device: Device, maps: unknown): Promise<void> {
    const specs = checkSpecs(maps, 'enterData', ENTER_TYPES, device.id);
    return this.traced(device, 'enterData', specs, () =>
      this.onQueue(
        device,
        async (queue) => void (await enterClauses(this.info, device, this.table(device), queue, specs)),
      ),
    );
  }

  exitData(device: Device, maps: unknown): Promise<void> {
    const specs = checkSpecs(maps, 'exitData', EXIT_TYPES, device.id);
    return this.traced(device, 'exitData', specs, () =>
      this.onQueue(device, (queue) =>
        exitClauses(
          this.info,
          device,
          this.table(device),
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
            logMapping(this.info, device, () => `${describeRange(view, undefined)} is not present; ${clause} skipped`);
            continue;
          }
          if (view.byteLength === 0) continue;
          const buffer = found.entry.ready ?? (await found.entry.buffer);
          copyRange(this.info, toDevice ? 'to' : 'from', device, queue, buffer, found.offset, view, found.entry.name);
        }
      }
    });
  }

  async targetData<T>(device: Device, maps: unknown, body: () => Promise<T> | T): Promise<T> {
    const specs = checkSpecs(maps, 'targetData', ENTER_TYPES, device.id);
    if (typeof body !== 'function') throw errors.invalidArgument('targetData: the body must be a function', device.id);
    await this.traced(device, 'targetData enter', specs, () =>
      this.onQueue(
        device,
        async (queue) => void (await enterClauses(this.info, device, this.table(device), queue, specs)),
      ),
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
      this.onQueue(device, (queue) => exitClauses(this.info, device, this.table(device), queue, exits)),
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
        const table = this.table(device);
        const entered = await enterClauses(this.info, device, table, queue, specs);
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
            await exitClauses(this.info, device, table, queue, exits);
            throw errors.invalidArgument(
              `target of '${kernel.name}': ${clauseName(spec)} of ${describeRange(spec.view, spec.name)} is a zero-length section inside no mapping, so it has no device address; map the array around it first, or pass a Buffer`,
              device.id,
            );
          }
          const buffer = entry.ready ?? (await entry.buffer);
          lowered.push(offset === 0 ? buffer : buffer.at(offset));
        }
        queue.launch(kernel, grid, lowered);
        await exitClauses(this.info, device, table, queue, exits);
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
