/**
 * OFFLOAD_INFO: one line per image load, copy and launch, in the spirit of LIBOMPTARGET_INFO,
 * written to stderr. Off unless the variable is set to something other than empty, 0, false, off or no.
 */
import { flagSet } from './debug.js';
import { formatBytes, type Environment } from '../units.js';
import { DeviceCounters } from './device-counters.js';
import { environment, writeStderr } from '../platform.js';

export type InfoSink = (line: string) => void;

const hex = (value: number | undefined): string =>
  value === undefined ? '?' : `0x${value.toString(16).padStart(8, '0')}`;

export function infoEnabled(env: Environment = environment()): boolean {
  return flagSet(env.OFFLOAD_INFO);
}

/** Where a copy's device side is: a device id, a device address and an offset. */
export interface DeviceSpan {
  device: number;
  address: number | undefined;
  offset: number;
}

export class InfoLog {
  /** Every allocation, copy and launch told to the log is counted here, printed or not (runtime.metrics()). */
  readonly counters = new DeviceCounters();

  constructor(
    readonly enabled: boolean,
    private readonly sink: InfoSink = (line) => writeStderr(`${line}\n`),
  ) {}

  private line(device: number, text: string): void {
    this.sink(`offload: device ${device} info: ${text}`);
  }

  imageLoaded(device: number, bundle: string, format: string, bytes: number, kernels: number, ms: number): void {
    if (!this.enabled) return;
    this.line(
      device,
      `loaded image of '${bundle}' (${format}, ${formatBytes(bytes)}, ${kernels} kernels) in ${ms.toFixed(2)} ms`,
    );
  }

  imageUnloaded(device: number, bundle: string): void {
    if (!this.enabled) return;
    this.line(device, `unloaded image of '${bundle}'`);
  }

  /** Whether launches are timed from enqueue: for OFFLOAD_INFO's lines, or once metrics are asked for. */
  get timed(): boolean {
    return this.enabled || this.counters.timed;
  }

  alloc(device: number, kind: string, bytes: number, address: number | undefined): void {
    this.counters.allocated(device, bytes);
    if (!this.enabled) return;
    this.line(device, `allocated ${bytes} bytes of ${kind} memory at ${hex(address)}`);
  }

  free(device: number, bytes: number, address: number | undefined): void {
    this.counters.freed(device, bytes);
    if (!this.enabled) return;
    this.line(device, `freed ${bytes} bytes at ${hex(address)}`);
  }

  copyToDevice(queue: number, dst: DeviceSpan, bytes: number): void {
    this.counters.copied(dst.device, 'in', bytes);
    if (!this.enabled) return;
    this.line(
      dst.device,
      `copying ${bytes} bytes from host to device, TgtPtr=${hex(dst.address)}+${dst.offset} (queue ${queue})`,
    );
  }

  copyFromDevice(queue: number, src: DeviceSpan, bytes: number): void {
    this.counters.copied(src.device, 'out', bytes);
    if (!this.enabled) return;
    this.line(
      src.device,
      `copying ${bytes} bytes from device to host, TgtPtr=${hex(src.address)}+${src.offset} (queue ${queue})`,
    );
  }

  copyDeviceToDevice(queue: number, src: DeviceSpan, dst: DeviceSpan, bytes: number): void {
    this.counters.copied(src.device, 'out', bytes);
    this.counters.copied(dst.device, 'in', bytes);
    if (!this.enabled) return;
    this.line(
      src.device,
      `copying ${bytes} bytes from device ${src.device} ${hex(src.address)}+${src.offset} to device ${dst.device} ${hex(dst.address)}+${dst.offset} (queue ${queue})`,
    );
  }

  /** A mapping decision (entering, existing, copying, removing), as LIBOMPTARGET_INFO prints them. */
  mapping(device: number, text: string): void {
    if (!this.enabled) return;
    this.line(device, `mapping: ${text}`);
  }

  /** A spread's split: each chunk a device takes, each device's share and time, a device lost. */
  /** The grid `device.suggestGrid` chose, and why. */
  suggestedGrid(device: number, text: string): void {
    if (!this.enabled) return;
    this.line(device, text);
  }

  spread(device: number, text: string): void {
    if (!this.enabled) return;
    this.line(device, `spread: ${text}`);
  }

  /** `where`: where the launch ran, when the device says ('on the calling thread', 'on the workers'). */
  launch(
    device: number,
    queue: number,
    kernel: string,
    teams: number,
    threads: number,
    ms: number,
    failed: boolean,
    where?: string,
  ): void {
    if (!this.enabled) return;
    const outcome = failed ? 'failed' : 'completed';
    const place = where === undefined ? '' : `, ran ${where}`;
    this.line(
      device,
      `launch of kernel ${kernel} with ${teams} teams and ${threads} threads ${outcome} ${ms.toFixed(3)} ms after enqueue (queue ${queue}${place})`,
    );
  }
}
