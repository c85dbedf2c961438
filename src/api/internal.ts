/**
 * The api's internal surface: what the layers built on the api (`omp` and `proxy`) need of it
 * beyond the public API, in one place. Each function reads or calls a member the published types
 * hide (`@internal`, so `stripInternal` leaves it out of the .d.ts); the argument checks are the
 * ones the api's own methods make.
 *
 * Nothing outside `src/api/` reads a hidden member of an api class any other way
 * (test/internal-surface.test.ts checks every file), and only `omp` and `proxy` import this
 * module (.dependency-cruiser.json, run by `npm run lint`). A new need is a new function here,
 * named for what it gives, not a reach into a class.
 */
import { isLaunchParam, isPerItem } from '../image/manifest.js';
import type { PluginDevice, PluginEvent, PluginQueue } from '../plugins/interface.js';
import type { DeviceBuffer } from './buffer.js';
import type { Device } from './device.js';
import type { Kernel } from './kernel.js';
import { LaunchEvent } from './event.js';
import { Event, type LaunchGrid as Grid, type PointerResolver, type Queue } from './queue.js';
import type { Runtime } from './runtime.js';

export { checkArgumentCount, checkScalar, describe } from './checks.js';
export type { PointerResolver } from './queue.js';

/** A buffer's address on its device, where the device has addresses (OFFLOAD_INFO's TgtPtr; a proxy's peer grants). */
export function deviceAddress(buffer: DeviceBuffer): number | undefined {
  return buffer.allocation.address;
}

/** How a message names a buffer ("buffer of 64 bytes on device 0"). */
export function describeBuffer(buffer: DeviceBuffer): string {
  return buffer.describe();
}

/** Keeps a buffer's memory alive until `done` settles (a free waits for it). */
export function useBuffer(buffer: DeviceBuffer, done: Promise<unknown>): void {
  buffer.use(done);
}

/** A direct view of a buffer's bytes, where its device's memory is host memory (PluginDevice.hostView); undefined otherwise. */
export function directView(buffer: DeviceBuffer, offset: number, bytes: number): Uint8Array | undefined {
  return buffer.directView(offset, bytes);
}

/** The plugin's device under a Device (what it reports of itself: `lost`, `census`). */
export function pluginDevice(device: Device): PluginDevice {
  return device.plugin;
}

/** The plugin's queue under a Queue. */
export function pluginQueue(queue: Queue): PluginQueue {
  return queue.plugin;
}

/** The parameters a program passes to `kernel`: all but the ones its launch adds (a per-item kernel's item counts, a checked build's pointer lengths). */
export function programParams(kernel: Kernel): Kernel['params'] {
  return kernel.ownParams === kernel.params.length ? kernel.params : kernel.params.slice(0, kernel.ownParams);
}

/**
 * Of a kernel's parameters (a Kernel's, or a library entry's): those the program passes (not the
 * item counts and pointer lengths a launch adds), and whether it is a per-item kernel.
 */
export function programSignature<P extends { name: string; type: string }>(
  params: readonly P[],
): { params: P[]; perItem: boolean } {
  return { params: params.filter((param) => !isLaunchParam(param.name)), perItem: isPerItem(params) };
}

/** The device whose queue made `event`. */
export function eventDevice(event: Event): Device {
  return event.device;
}

/** Whether `event` is a launch that has already completed without failing (an inline run): known with no promise. */
export function completedNow(event: Event): boolean {
  return event instanceof LaunchEvent && event.completed;
}

/** The plugin's event under an Event (a timed event's `timing`). */
export function pluginEvent(event: Event): PluginEvent {
  return event.plugin;
}

/** A queue's id within its runtime (or context): what OFFLOAD_INFO and print records call it. */
export function queueId(queue: Queue): number {
  return queue.id;
}

/**
 * An event of `queue` that completes when `until` settles, and fails (failing the queue from
 * there, as any failed operation does) if it rejects; `queue.wait()` of it stops the queue until then.
 */
export function eventWhen(queue: Queue, until: Promise<void>): Event {
  return new Event({ done: until, queue: queue.plugin, query: () => false }, queue.device);
}

/**
 * Whether a queue is free for a new, independent piece of work: nothing pending, no failure
 * waiting for a finish(), not destroyed (the mapper's present-map launches).
 */
export function isReusable(queue: Queue): boolean {
  return queue.reusable;
}

/** Whether an operation of the queue failed since its last finish() (its failure then sticks to the queue). */
export function hasFailed(queue: Queue): boolean {
  return queue.failed;
}

/**
 * A launch whose pointer arguments may also be values `resolver` turns into pointers; undefined,
 * having done nothing, when the launch cannot go ahead as given. The caller may take the event's
 * `done` and nothing else, before its next call (Queue.launchResolving says why).
 */
export function launchResolving(
  queue: Queue,
  kernel: Kernel,
  grid: Grid,
  args: readonly unknown[],
  resolver: PointerResolver,
): Event | undefined {
  return queue.launchResolving(kernel, grid, args, resolver);
}

/** Contexts made from a runtime and not shut down (a proxy's stats). */
export function contextCount(runtime: Runtime): number {
  return runtime.contextCount;
}

/** Queues a runtime and its contexts hold on to, those with work pending (a proxy's stats). */
export function queuesHeld(runtime: Runtime): number {
  return runtime.queuesHeld;
}
