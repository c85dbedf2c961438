/// <reference types="@webgpu/types" preserve="true" />
/**
 * The WebGPU device: GPU buffers as allocations, wgsl images as loaded kernels, and the memory
 * operations and launches its queues run (queue.ts orders them). WebGPU has one queue per
 * device and runs its work in submission order; each operation here is submitted and awaited
 * as a whole, so a queue's promise means "done on the GPU".
 *
 * WebGPU copies move 4-byte words at 4-byte offsets; byte-exact writes, reads and copies at any
 * offset are made of aligned ones (reading the partial edge words first when writing).
 */
import { OffloadError, asOffloadError, errors } from '../../errors.js';
import type {
  Allocation,
  DeviceImage,
  DeviceInfo,
  Grid,
  LaunchArg,
  LoadedImage,
  MemoryInfo,
  MemoryKind,
  PluginDevice,
  PluginQueue,
} from '../interface.js';
import { FAULT_ELEMENT_TYPES, FAULT_KINDS, FAULT_WORDS } from '../../image/manifest.js';
import { patternChunk } from '../fill-pattern.js';
import { isFallback } from './adapter.js';
import { loadWgslImage, type WgslKernel } from './kernels.js';
import { WebGpuQueue } from './queue.js';

/** The adapter limits a kernel's launch and memory depend on, asked of the device at their maximum. */
const LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxStorageBuffersPerShaderStage',
  'maxUniformBufferBindingSize',
  'maxComputeWorkgroupsPerDimension',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeWorkgroupStorageSize',
  'minStorageBufferOffsetAlignment',
  'minUniformBufferOffsetAlignment',
] as const;

/** Workgroup size a kernel's pipeline is first made with, at load (to check it compiles). */
const DEFAULT_THREADS = 64;

export class WebGpuAllocation implements Allocation {
  constructor(
    readonly bytes: number,
    readonly buffer: GPUBuffer,
  ) {}
  get kind(): MemoryKind {
    return 'device';
  }
}

const align4Down = (n: number): number => n - (n % 4);
const align4Up = (n: number): number => Math.ceil(n / 4) * 4;

/** The GPU device of one adapter, requested on first use and shared by every context of it. */
class SharedGpu {
  private gpu: Promise<GPUDevice> | undefined;
  lostError: OffloadError | undefined;
  closing = false;
  /** Bound for a pointer one past the end of its buffer (WebGPU binds no empty ranges). */
  scratch: GPUBuffer | undefined;
  /** Live buffers and contexts, over every context (diagnostics). */
  buffers = 0;
  contexts = 0;
  /** Bytes of every context's buffers together, held under `budget`. */
  bytes = 0;

  constructor(
    private readonly adapter: GPUAdapter,
    private readonly limits: Record<string, number>,
    readonly budget: number,
    /** Loop iterations an invocation of a translated kernel may run (WebGpuOptions.loopBudget). */
    readonly loopBudget: number,
  ) {}

  device(): Promise<GPUDevice> {
    if (this.lostError) return Promise.reject(this.lostError);
    this.gpu ??= this.adapter.requestDevice({ label: 'offload-ts', requiredLimits: this.limits }).then(
      (gpu) => {
        void gpu.lost.then((lost) => {
          if (!this.closing)
            this.lostError ??= errors.deviceLost(`the WebGPU device was lost (${lost.reason}): ${lost.message}`);
        });
        this.scratch = gpu.createBuffer({ label: 'one past the end', size: 16, usage: GPUBufferUsage.STORAGE });
        return gpu;
      },
      (error: unknown) => {
        throw (this.lostError ??= asOffloadError(error, 'the WebGPU adapter gave no device', { code: 'DEVICE_LOST' }));
      },
    );
    return this.gpu;
  }

  async close(): Promise<void> {
    this.closing = true;
    this.lostError ??= errors.deviceLost('the WebGPU device was shut down');
    const gpu = await this.gpu?.catch(() => undefined); // no device to destroy; its error is lostError already
    gpu?.destroy();
  }
}

/**
 * One context of a WebGPU device: its own buffers (a kernel binds only the buffers passed to it,
 * so it reaches no other context's), on the GPU device every context shares.
 */
export class WebGpuDevice implements PluginDevice {
  readonly info: DeviceInfo;
  private readonly limits: Record<(typeof LIMITS)[number], number>;
  private readonly shared: SharedGpu;
  /** The largest buffer: what a kernel can bind whole (so no kernel sees only part of one). */
  private readonly largestBuffer: number;
  /** Live buffers of this context, destroyed when it ends. */
  private readonly allocations = new Set<WebGpuAllocation>();
  private closedError: OffloadError | undefined;

  constructor(
    private readonly adapter: GPUAdapter,
    /** For a context: the device whose GPU it shares. */
    parent?: WebGpuDevice,
    /** The memory budget of a new device (WebGpuOptions.memoryBytes); a context shares its parent's. */
    memoryBytes?: number,
    /** Its loop budget (WebGpuOptions.loopBudget); a context shares its parent's. */
    loopBudget = DEFAULT_LOOP_BUDGET,
  ) {
    const limits = adapter.limits as unknown as Record<string, number>;
    this.limits = Object.fromEntries(LIMITS.map((name) => [name, limits[name]])) as WebGpuDevice['limits'];
    this.largestBuffer = align4Down(Math.min(this.limits.maxBufferSize, this.limits.maxStorageBufferBindingSize));
    this.shared =
      parent?.shared ?? new SharedGpu(adapter, this.limits, memoryBytes ?? 4 * this.largestBuffer, loopBudget);
    this.shared.contexts++;
    const info = adapter.info;
    const description =
      info.description || [info.vendor, info.architecture, info.device].filter(Boolean).join(' ') || 'WebGPU adapter';
    this.info = {
      name: `${description} (WebGPU${isFallback(adapter) ? ', software' : ''})`,
      kind: 'gpu',
      vendor: info.vendor || 'unknown',
      plugin: 'webgpu',
      // WebGPU does not tell how much memory a device has: this is the budget all buffers share.
      memoryBytes: this.shared.budget,
      maxThreadsPerTeam: Math.min(this.limits.maxComputeInvocationsPerWorkgroup, this.limits.maxComputeWorkgroupSizeX),
      // A dispatch has up to maxComputeWorkgroupsPerDimension workgroups along each of x, y and z.
      maxTeams: this.limits.maxComputeWorkgroupsPerDimension,
      maxTeamDims: [
        this.limits.maxComputeWorkgroupsPerDimension,
        this.limits.maxComputeWorkgroupsPerDimension,
        this.limits.maxComputeWorkgroupsPerDimension,
      ],
      maxThreadDims: [
        this.limits.maxComputeWorkgroupSizeX,
        this.limits.maxComputeWorkgroupSizeY,
        this.limits.maxComputeWorkgroupSizeZ,
      ],
      maxTeamMemoryBytes: this.limits.maxComputeWorkgroupStorageSize,
      // Nor how many compute units it has.
      computeUnits: 1,
      imageFormats: ['wgsl'],
      memoryKinds: ['device'],
      location: 'local',
      // WebGPU cannot stop a dispatch short of losing the device.
      launchTimeouts: false,
      // WGSL has no printf: a WebGPU kernel cannot print.
      kernelPrint: false,
      // Nor can a dispatch wait for the host.
      hostCalls: false,
      capabilities: {
        i64: false, // WGSL has no 64-bit integers
        f64: false, // nor f64
        traps: false, // out-of-bounds accesses are clamped, not caught
        concurrentQueues: false, // one GPU queue: queues' work runs one after another
        atomics: true, // atomic<i32>, atomic<u32> in storage buffers
        mappedMemory: false, // GPU buffers are mapped only for staging, never as live views
        maxTeamMemoryBytes: this.limits.maxComputeWorkgroupStorageSize,
      },
      limits: { ...this.limits },
      limitNames: {
        maxTeams: 'maxComputeWorkgroupsPerDimension',
        maxTeamDims: 'maxComputeWorkgroupsPerDimension',
        maxThreadDims: 'maxComputeWorkgroupSize{X,Y,Z}',
        maxTeamMemoryBytes: 'maxComputeWorkgroupStorageSize',
        maxThreadsPerTeam:
          this.limits.maxComputeInvocationsPerWorkgroup <= this.limits.maxComputeWorkgroupSizeX
            ? 'maxComputeInvocationsPerWorkgroup'
            : 'maxComputeWorkgroupSizeX',
      },
    };
  }

  /** Another context of this device: the same GPU, buffers of its own. */
  context(): WebGpuDevice {
    this.check();
    return new WebGpuDevice(this.adapter, this);
  }

  get lost(): OffloadError | undefined {
    return this.closedError ?? this.shared.lostError;
  }

  /** The GPU device, requested on first use (so that listing devices makes none). */
  private device(): Promise<GPUDevice> {
    if (this.closedError) return Promise.reject(this.closedError);
    return this.shared.device();
  }

  private check(): void {
    const lost = this.lost;
    if (lost) throw lost;
  }

  async loadImage(image: DeviceImage): Promise<LoadedImage> {
    this.check();
    if (image.info.format !== 'wgsl')
      throw errors.incompatibleImage(`a WebGPU device runs wgsl images, not ${image.info.format}`);
    return loadWgslImage(await this.device(), image, Math.min(DEFAULT_THREADS, this.info.maxThreadsPerTeam), 'webgpu');
  }

  async unloadImage(): Promise<void> {
    // Pipelines and shader modules have no destroy(); they go with the last reference.
  }

  async alloc(bytes: number, kind: MemoryKind): Promise<Allocation> {
    this.check();
    if (kind !== 'device') throw errors.unsupported(`a WebGPU device has no ${kind} memory`);
    if (bytes > this.largestBuffer) {
      throw errors.outOfMemory(
        `${bytes} bytes is more than one buffer of this WebGPU device holds: ${this.largestBuffer} bytes, what a kernel can ` +
          `bind (the adapter's maxStorageBufferBindingSize ${this.limits.maxStorageBufferBindingSize}, maxBufferSize ${this.limits.maxBufferSize})`,
      );
    }
    const size = Math.max(4, align4Up(bytes));
    if (this.shared.bytes + size > this.shared.budget) {
      throw errors.outOfMemory(
        `${bytes} bytes more would take this WebGPU device's buffers past its memory budget: ${this.shared.bytes} of ` +
          `${this.shared.budget} bytes are allocated (OFFLOAD_WEBGPU_MEMORY or Offload.init({ webgpu: { memoryBytes } }) sets the budget)`,
      );
    }
    // Counted before the await, so that concurrent allocations cannot all pass the check.
    this.shared.bytes += size;
    let buffer: GPUBuffer;
    try {
      const gpu = await this.device();
      buffer = await scoped(gpu, `allocating ${bytes} bytes`, () =>
        gpu.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST }),
      );
    } catch (error) {
      this.shared.bytes -= size;
      throw error;
    }
    const allocation = new WebGpuAllocation(bytes, buffer);
    this.allocations.add(allocation);
    this.shared.buffers++;
    return allocation;
  }

  async free(alloc: Allocation): Promise<void> {
    // Work already submitted that uses the buffer completes first (WebGPU defers the destroy).
    const allocation = alloc as WebGpuAllocation;
    if (this.allocations.delete(allocation)) {
      this.shared.buffers--;
      this.shared.bytes -= allocation.buffer.size;
    }
    allocation.buffer.destroy();
  }

  census(): Record<string, number> {
    return { contexts: this.shared.contexts, buffers: this.shared.buffers, bytes: this.shared.bytes };
  }

  /** The budget's free bytes (WebGPU says nothing of the GPU's own); one buffer holds at most largestBuffer. */
  async memoryInfo(): Promise<MemoryInfo> {
    this.check();
    const freeBytes = Math.max(0, this.shared.budget - this.shared.bytes);
    return {
      totalBytes: this.shared.budget,
      freeBytes,
      largestFreeBlockBytes: Math.min(freeBytes, this.largestBuffer),
    };
  }

  /** Fills `bytes` bytes of `dst` at `offset` with `pattern`, a staged chunk at a time (zeros: cleared on the GPU where aligned). */
  async fill(dst: GPUBuffer, offset: number, bytes: number, pattern: Uint8Array): Promise<void> {
    if (bytes === 0) return;
    if (pattern.every((byte) => byte === 0) && offset % 4 === 0 && bytes % 4 === 0) {
      const gpu = await this.device();
      await scoped(gpu, `clearing ${bytes} bytes`, () => {
        const encoder = gpu.createCommandEncoder();
        encoder.clearBuffer(dst, offset, bytes);
        gpu.queue.submit([encoder.finish()]);
      });
      return this.settled(gpu);
    }
    const chunk = patternChunk(pattern, bytes);
    for (let done = 0; done < bytes; done += chunk.byteLength) {
      await this.write(dst, offset + done, chunk.subarray(0, Math.min(chunk.byteLength, bytes - done)));
    }
  }

  createQueue(): PluginQueue {
    return new WebGpuQueue(this);
  }

  /** Host to device, `src` at `offset` of `dst`, done when the GPU has it. */
  async write(dst: GPUBuffer, offset: number, src: Uint8Array): Promise<void> {
    if (src.byteLength === 0) return;
    const gpu = await this.device();
    const start = align4Down(offset);
    const end = align4Up(offset + src.byteLength);
    let data = src;
    if (start !== offset || end !== offset + src.byteLength) {
      // Keep the bytes of the edge words that lie outside the range.
      data = new Uint8Array(end - start);
      await this.read(dst, start, data.subarray(0, 4));
      await this.read(dst, end - 4, data.subarray(end - start - 4));
      data.set(src, offset - start);
    } else if (typeof SharedArrayBuffer !== 'undefined' && src.buffer instanceof SharedArrayBuffer) {
      // Dawn takes views of ArrayBuffers only: a SharedArrayBuffer (the host device's memory)
      // crashes the process (seen with webgpu 0.6.2), so shared bytes are copied first.
      data = src.slice();
    }
    await scoped(gpu, `writing ${src.byteLength} bytes`, () =>
      gpu.queue.writeBuffer(dst, start, data as Uint8Array<ArrayBuffer>),
    );
    await this.settled(gpu);
  }

  /** Device to host: `dst.byteLength` bytes of `src` at `offset` into `dst`. */
  async read(src: GPUBuffer, offset: number, dst: Uint8Array): Promise<void> {
    if (dst.byteLength === 0) return;
    const gpu = await this.device();
    const start = align4Down(offset);
    const size = align4Up(offset + dst.byteLength) - start;
    const staging = gpu.createBuffer({
      label: 'read staging',
      size,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    try {
      await scoped(gpu, `reading ${dst.byteLength} bytes`, () => {
        const encoder = gpu.createCommandEncoder();
        encoder.copyBufferToBuffer(src, start, staging, 0, size);
        gpu.queue.submit([encoder.finish()]);
      });
      await staging.mapAsync(GPUMapMode.READ).catch((error: unknown) => {
        throw this.lost ?? asOffloadError(error, 'reading from the WebGPU device failed', { code: 'DEVICE_LOST' });
      });
      dst.set(new Uint8Array(staging.getMappedRange(), offset - start, dst.byteLength));
    } finally {
      staging.destroy();
    }
  }

  /** Device to device within this device. */
  async copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): Promise<void> {
    if (bytes === 0) return;
    if (srcOffset % 4 !== 0 || dstOffset % 4 !== 0 || bytes % 4 !== 0) {
      const staged = new Uint8Array(bytes);
      await this.read(src, srcOffset, staged);
      return this.write(dst, dstOffset, staged);
    }
    const gpu = await this.device();
    await scoped(gpu, `copying ${bytes} bytes`, () => {
      const encoder = gpu.createCommandEncoder();
      encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes);
      gpu.queue.submit([encoder.finish()]);
    });
    await this.settled(gpu);
  }

  /**
   * Runs `kernel` with `grid.teamDims` workgroups of its workgroup size (from `grid.threadDims`):
   * pointers become storage buffer bindings at their offsets, scalars fill the uniform buffer.
   * @throws OffloadError INVALID_ARGUMENT for a pointer offset WebGPU cannot bind.
   */
  async launch(kernel: WgslKernel, grid: Grid, args: readonly LaunchArg[]): Promise<void> {
    const gpu = await this.device();
    const pipeline = await kernel.pipeline(grid.threadDims, grid.teamMemoryBytes);
    const entries: GPUBindGroupEntry[] = [];
    const { uniform } = kernel.info;
    const scalars = uniform ? new DataView(new ArrayBuffer(Math.ceil(uniform.bytes / 16) * 16)) : undefined;
    checkAliasing(kernel, args);
    kernel.info.params.forEach((param, index) => {
      const arg = args[index]!;
      if (param.type === 'ptr' && arg.type === 'ptr') {
        entries.push({
          binding: param.binding,
          resource: this.binding(kernel, param.name, arg.alloc as WebGpuAllocation, arg.offset),
        });
      } else if (param.type === 'i32' && arg.type === 'i32') {
        scalars!.setUint32(param.offset, arg.value >>> 0, true);
      } else if (param.type === 'f32' && arg.type === 'f32') {
        scalars!.setFloat32(param.offset, arg.value, true);
      }
    });
    let uniformBuffer: GPUBuffer | undefined;
    if (uniform && scalars) {
      uniformBuffer = gpu.createBuffer({
        label: `${kernel.name} scalars`,
        size: scalars.byteLength,
        usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
      });
      gpu.queue.writeBuffer(uniformBuffer, 0, new Uint8Array(scalars.buffer));
      entries.push({ binding: uniform.binding, resource: { buffer: uniformBuffer } });
    }
    const fault = kernel.faultLayout ? this.faultWord(gpu) : undefined;
    try {
      await scoped(gpu, `launch of '${kernel.name}'`, () => {
        const bindGroup = gpu.createBindGroup({ layout: kernel.layout, entries });
        const encoder = gpu.createCommandEncoder();
        const pass = encoder.beginComputePass();
        pass.setPipeline(pipeline);
        pass.setBindGroup(0, bindGroup);
        if (fault) {
          const faultEntries = [{ binding: 0, resource: { buffer: fault.word } }];
          pass.setBindGroup(1, gpu.createBindGroup({ layout: kernel.faultLayout!, entries: faultEntries }));
        }
        pass.dispatchWorkgroups(grid.teamDims[0], grid.teamDims[1], grid.teamDims[2]);
        pass.end();
        if (fault) encoder.copyBufferToBuffer(fault.word, 0, fault.readback, 0, FAULT_BYTES);
        gpu.queue.submit([encoder.finish()]);
      });
      await this.settled(gpu);
      if (fault) {
        await fault.readback.mapAsync(GPUMapMode.READ);
        const words = new Uint32Array(fault.readback.getMappedRange().slice(0));
        fault.readback.unmap();
        if (words[FAULT_WORDS.count] !== 0) throw faultError(kernel, words);
      }
    } finally {
      uniformBuffer?.destroy();
      fault?.word.destroy();
      fault?.readback.destroy();
    }
  }

  /** A launch's fault word (FAULT_WORDS), zeroed, with the loop budget; and where the device reads it back. */
  private faultWord(gpu: GPUDevice): { word: GPUBuffer; readback: GPUBuffer } {
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
    const word = gpu.createBuffer({ label: 'fault word', size: FAULT_BYTES, usage });
    const initial = new Uint32Array(FAULT_BYTES / 4);
    initial[FAULT_WORDS.budget] = this.shared.loopBudget;
    gpu.queue.writeBuffer(word, 0, initial);
    const readback = gpu.createBuffer({
      label: 'fault word read back',
      size: FAULT_BYTES,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    return { word, readback };
  }

  /** The storage binding of a pointer: from its offset to the end of the buffer, as far as a binding reaches. */
  private binding(kernel: WgslKernel, name: string, alloc: WebGpuAllocation, offset: number): GPUBufferBinding {
    const alignment = this.limits.minStorageBufferOffsetAlignment;
    if (offset % alignment !== 0) {
      throw errors.invalidArgument(
        `launch of '${kernel.name}': pointer '${name}' is at offset ${offset} of its buffer; a WebGPU device binds buffers at ` +
          `multiples of the adapter's minStorageBufferOffsetAlignment (${alignment})`,
      );
    }
    // Buffers are never larger than a binding reaches (largestBuffer), so this is the whole rest.
    const size = alloc.buffer.size - offset;
    if (size <= 0) return { buffer: this.shared.scratch! };
    return { buffer: alloc.buffer, offset, size };
  }

  /** Waits until the GPU has done everything submitted so far. */
  private async settled(gpu: GPUDevice): Promise<void> {
    await gpu.queue.onSubmittedWorkDone();
    this.check();
  }

  /**
   * Ends this context (its buffers are destroyed; later operations reject with DEVICE_LOST). The
   * device's first context also destroys the GPU device.
   */
  async close(owner: boolean): Promise<void> {
    if (this.closedError) return;
    this.closedError = errors.deviceLost(
      owner ? 'the WebGPU device was shut down' : 'the context of this WebGPU device was destroyed',
    );
    this.shared.contexts--;
    for (const allocation of this.allocations) {
      this.shared.bytes -= allocation.buffer.size;
      allocation.buffer.destroy();
    }
    this.shared.buffers -= this.allocations.size;
    this.allocations.clear();
    if (owner) await this.shared.close();
  }

  /** Destroys the GPU device as a driver reset would (tests of DEVICE_LOST). @internal */
  async simulateLoss(): Promise<void> {
    (await this.device()).destroy();
  }
}

/**
 * WebGPU refuses a dispatch that binds a buffer as writable storage and binds it again: said
 * here with the parameters' names (WebGPU's message names no argument).
 */
function checkAliasing(kernel: WgslKernel, args: readonly LaunchArg[]): void {
  const seen = new Map<GPUBuffer, { name: string; writable: boolean }>();
  kernel.info.params.forEach((param, index) => {
    const arg = args[index];
    if (param.type !== 'ptr' || arg?.type !== 'ptr') return;
    const buffer = (arg.alloc as WebGpuAllocation).buffer;
    const earlier = seen.get(buffer);
    if (earlier && (earlier.writable || !param.readOnly)) {
      throw errors.invalidArgument(
        `launch of '${kernel.name}': pointers '${earlier.name}' and '${param.name}' are into the same buffer, and one of them is ` +
          `writable (read_write): a WebGPU device cannot bind a buffer it writes twice in one launch; pass separate buffers`,
      );
    }
    seen.set(buffer, { name: param.name, writable: (earlier?.writable ?? false) || !param.readOnly });
  });
}

/**
 * Runs `body` (synchronous WebGPU calls) inside error scopes and turns what they catch into an
 * OffloadError naming `what`: validation errors are INVALID_ARGUMENT, out-of-memory errors
 * OUT_OF_MEMORY, internal errors UNSUPPORTED. Scopes are pushed and popped with no await between,
 * so concurrent operations never see each other's scopes.
 */
async function scoped<T>(gpu: GPUDevice, what: string, body: () => T): Promise<T> {
  gpu.pushErrorScope('internal');
  gpu.pushErrorScope('out-of-memory');
  gpu.pushErrorScope('validation');
  let result: { value: T } | { error: unknown };
  try {
    result = { value: body() };
  } catch (error) {
    result = { error };
  }
  // The scopes are popped whatever body() did, and an error they report wins over body()'s.
  const [validation, memory, internal] = await Promise.all([
    gpu.popErrorScope(),
    gpu.popErrorScope(),
    gpu.popErrorScope(),
  ]);
  if (memory) throw errors.outOfMemory(`${what}: the WebGPU device is out of memory: ${memory.message}`);
  if (validation) throw errors.invalidArgument(`${what}: WebGPU refused it: ${validation.message.trim()}`);
  if (internal) throw errors.unsupported(`${what}: WebGPU internal error: ${internal.message}`);
  if ('error' in result) throw result.error;
  return result.value;
}

/** The fault word's bytes (FAULT_WORDS: eight u32). */
const FAULT_BYTES = 32;
/** Loop iterations an invocation may run by default (WebGpuOptions.loopBudget). */
export const DEFAULT_LOOP_BUDGET = 2 ** 26;

/**
 * What a translated kernel recorded in its fault word: an index outside its buffer in a checked
 * build (KERNEL_TRAP, worded as the host device words it), or loops past their budget (TIMEOUT).
 */
function faultError(kernel: WgslKernel, words: Uint32Array): OffloadError {
  if (words[FAULT_WORDS.kind] === FAULT_KINDS.bounds) {
    const param = kernel.info.params[words[FAULT_WORDS.param]!]?.name ?? `#${words[FAULT_WORDS.param]}`;
    const type = FAULT_ELEMENT_TYPES[words[FAULT_WORDS.elementType]!] ?? '?';
    return errors.kernelTrap(
      `kernel '${kernel.name}': parameter '${param}' (ptr<${type}>): index ${words[FAULT_WORDS.index]} is outside its buffer of ${words[FAULT_WORDS.elements]} elements (offload build --checked)`,
    );
  }
  return errors.timeout(
    `launch of '${kernel.name}': an invocation ran past its budget of ${words[FAULT_WORDS.elements]} loop iterations and stopped ` +
      `(a GPU cannot stop a dispatch, so translated kernels count their loops); raise the budget with ` +
      `OFFLOAD_WEBGPU_LOOP_BUDGET or Offload.init({ webgpu: { loopBudget } })`,
  );
}
