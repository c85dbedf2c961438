/**
 * A WebGPU device's queue: in order, with sticky failures (SerialPluginQueue). Copies to and from
 * other devices go through host memory: in place when the other device's memory is host
 * addressable (the host device), through a staging array and that device's queue otherwise.
 */
import {
  forEachRow,
  type Allocation,
  type Grid,
  type LaunchArg,
  type LaunchSettled,
  type LoadedKernel,
  type PluginDevice,
  type Rect,
  settleWhen,
} from '../interface.js';
import { SerialPluginQueue } from '../serial-queue.js';
import type { WebGpuAllocation, WebGpuDevice } from './device.js';
import type { WgslKernel } from './kernels.js';

const bufferOf = (alloc: Allocation): GPUBuffer => (alloc as WebGpuAllocation).buffer;

export class WebGpuQueue extends SerialPluginQueue {
  constructor(private readonly device: WebGpuDevice) {
    super(device);
  }

  submit(dst: Allocation, dstOffset: number, src: Uint8Array): Promise<void> {
    return this.serial.enqueue(() => this.device.write(bufferOf(dst), dstOffset, src));
  }

  retrieve(dst: Uint8Array, src: Allocation, srcOffset: number): Promise<void> {
    return this.serial.enqueue(() => this.device.read(bufferOf(src), srcOffset, dst));
  }

  fill(dst: Allocation, offset: number, bytes: number, pattern: Uint8Array): Promise<void> {
    return this.serial.enqueue(() => this.device.fill(bufferOf(dst), offset, bytes, pattern));
  }

  /** Row by row: each row is one write, read or copy of the device (they keep byte-exact edges). */
  submitRect(dst: Allocation, src: Uint8Array, rect: Rect): Promise<void> {
    return this.serial.enqueue(() =>
      this.rows(rect, (srcAt, dstAt) =>
        this.device.write(bufferOf(dst), dstAt, src.subarray(srcAt, srcAt + rect.width)),
      ),
    );
  }

  retrieveRect(dst: Uint8Array, src: Allocation, rect: Rect): Promise<void> {
    return this.serial.enqueue(() =>
      this.rows(rect, (srcAt, dstAt) =>
        this.device.read(bufferOf(src), srcAt, dst.subarray(dstAt, dstAt + rect.width)),
      ),
    );
  }

  copyRect(dst: Allocation, src: Allocation, rect: Rect): Promise<void> {
    return this.serial.enqueue(() =>
      this.rows(rect, (srcAt, dstAt) => this.device.copy(bufferOf(src), srcAt, bufferOf(dst), dstAt, rect.width)),
    );
  }

  private async rows(rect: Rect, row: (srcAt: number, dstAt: number) => Promise<void>): Promise<void> {
    const starts: [number, number][] = [];
    forEachRow(rect, (srcAt, dstAt) => starts.push([srcAt, dstAt]));
    for (const [srcAt, dstAt] of starts) await row(srcAt, dstAt);
  }

  exchange(
    srcDevice: PluginDevice,
    src: Allocation,
    srcOffset: number,
    dstDevice: PluginDevice,
    dst: Allocation,
    dstOffset: number,
    bytes: number,
  ): Promise<void> {
    return this.serial.enqueue(async () => {
      if (srcDevice === this.device && dstDevice === this.device) {
        return this.device.copy(bufferOf(src), srcOffset, bufferOf(dst), dstOffset, bytes);
      }
      if (srcDevice === this.device) {
        if (dstDevice.hostView)
          return this.device.read(bufferOf(src), srcOffset, dstDevice.hostView(dst, dstOffset, bytes));
        const staged = new Uint8Array(bytes);
        await this.device.read(bufferOf(src), srcOffset, staged);
        return this.peers.of(dstDevice).submit(dst, dstOffset, staged);
      }
      if (srcDevice.hostView)
        return this.device.write(bufferOf(dst), dstOffset, srcDevice.hostView(src, srcOffset, bytes));
      const staged = new Uint8Array(bytes);
      await this.peers.of(srcDevice).retrieve(staged, src, srcOffset);
      return this.device.write(bufferOf(dst), dstOffset, staged);
    });
  }

  launch(kernel: LoadedKernel, grid: Grid, args: readonly LaunchArg[], settled: LaunchSettled): void {
    // It runs in its turn, and `args` is only lent for this call: a copy of each.
    const kept = args.map((arg) => ({ ...arg }));
    settleWhen(
      this.serial.enqueue(() => this.device.launch(kernel as WgslKernel, grid, kept)),
      settled,
    );
  }
}
