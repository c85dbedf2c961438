/**
 * A WebGPU device's queue: in order, with sticky failures (SerialPluginQueue). Copies to and from
 * other devices go through host memory: in place when the other device's memory is host
 * addressable (the host device), through a staging array and that device's queue otherwise.
 */
import type { Allocation, Grid, LaunchArg, LoadedKernel, PluginDevice } from '../interface.js';
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
        if (dstDevice.hostView) return this.device.read(bufferOf(src), srcOffset, dstDevice.hostView(dst, dstOffset, bytes));
        const staged = new Uint8Array(bytes);
        await this.device.read(bufferOf(src), srcOffset, staged);
        return this.peers.of(dstDevice).submit(dst, dstOffset, staged);
      }
      if (srcDevice.hostView) return this.device.write(bufferOf(dst), dstOffset, srcDevice.hostView(src, srcOffset, bytes));
      const staged = new Uint8Array(bytes);
      await this.peers.of(srcDevice).retrieve(staged, src, srcOffset);
      return this.device.write(bufferOf(dst), dstOffset, staged);
    });
  }

  launch(kernel: LoadedKernel, grid: Grid, args: readonly LaunchArg[]): Promise<void> {
    return this.serial.enqueue(() => this.device.launch(kernel as WgslKernel, grid, args));
  }
}
