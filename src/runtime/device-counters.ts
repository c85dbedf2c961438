/**
 * What a runtime counts of its own devices' work, for `runtime.metrics()` (the same figures a
 * proxy serves at /metrics): launches by outcome and their time, bytes copied in and out, device
 * memory held. The info log (info-log.ts) is told of every allocation, copy and launch and counts
 * them here, whether OFFLOAD_INFO prints them or not: an addition each. A launch is timed
 * (enqueue to completion) only once `timed` is set, which the first `runtime.metrics()` call
 * does, so that a program that never asks pays no clock reads on its launch path.
 */

/** One device's figures. */
export interface DeviceMetrics {
  device: number;
  name: string;
  /** False once the device is lost. */
  up: boolean;
  /** Launches completed (`ok`) and failed (a trap, a time limit, a lost device). */
  launches: { ok: number; failed: number };
  /** Seconds launches took from enqueue to completion, counted from the first `runtime.metrics()` call on. */
  kernelSeconds: number;
  /** Launches counted in `kernelSeconds`. */
  timedLaunches: number;
  /** Bytes copied to the device (writes, fills excluded; device-to-device copies count on both ends). */
  bytesIn: number;
  /** Bytes copied from the device. */
  bytesOut: number;
  /** Device memory this runtime's buffers hold now, and the device's size. */
  memoryHeldBytes: number;
  memoryLimitBytes: number;
  /** Operations enqueued on the device's queues and not completed yet. */
  queueDepth: number;
}

/** What `runtime.metrics()` returns. */
export interface RuntimeMetrics {
  /** When it was read, in milliseconds since the epoch. */
  time: number;
  devices: DeviceMetrics[];
}

interface Counts {
  ok: number;
  failed: number;
  kernelSeconds: number;
  timedLaunches: number;
  bytesIn: number;
  bytesOut: number;
  held: number;
}

export class DeviceCounters {
  /** Whether launches are timed (see the header). */
  timed = false;
  private readonly devices: Counts[] = [];

  of(device: number): Counts {
    let counts = this.devices[device];
    if (!counts) {
      counts = { ok: 0, failed: 0, kernelSeconds: 0, timedLaunches: 0, bytesIn: 0, bytesOut: 0, held: 0 };
      this.devices[device] = counts;
    }
    return counts;
  }

  copied(device: number, direction: 'in' | 'out', bytes: number): void {
    const counts = this.of(device);
    if (direction === 'in') counts.bytesIn += bytes;
    else counts.bytesOut += bytes;
  }

  allocated(device: number, bytes: number): void {
    this.of(device).held += bytes;
  }

  freed(device: number, bytes: number): void {
    this.of(device).held -= bytes;
  }

  /** A launch settled; `ms`: its time from enqueue, when it was timed. */
  launched(device: number, failed: boolean, ms: number | undefined): void {
    const counts = this.of(device);
    if (failed) counts.failed++;
    else counts.ok++;
    if (ms !== undefined) {
      counts.kernelSeconds += ms / 1000;
      counts.timedLaunches++;
    }
  }
}
