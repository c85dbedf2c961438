/** `runtime.metrics()`: the figures of runtime/device-counters.ts, with each device's state and queue depth. */
import type { DeviceMetrics, RuntimeMetrics } from '../runtime/device-counters.js';
import type { RuntimeContext } from './context.js';
import type { Device } from './device.js';
import { Queue } from './queue.js';

export function runtimeMetrics(context: RuntimeContext, devices: readonly Device[]): RuntimeMetrics {
  const { counters } = context.info;
  // From now on launches are timed (a program that never asks reads no clock per launch).
  counters.timed = true;
  const depth = new Map<number, number>();
  for (const queue of context.busy)
    if (queue instanceof Queue) depth.set(queue.device.id, (depth.get(queue.device.id) ?? 0) + queue.depth);
  return {
    time: Date.now(),
    devices: devices.map((device): DeviceMetrics => {
      const counts = counters.of(device.id);
      return {
        device: device.id,
        name: device.info.name,
        up: device.plugin.lost === undefined,
        launches: { ok: counts.ok, failed: counts.failed },
        kernelSeconds: counts.kernelSeconds,
        timedLaunches: counts.timedLaunches,
        bytesIn: counts.bytesIn,
        bytesOut: counts.bytesOut,
        memoryHeldBytes: counts.held,
        memoryLimitBytes: device.info.memoryBytes,
        queueDepth: depth.get(device.id) ?? 0,
      };
    }),
  };
}
