/// <reference types="@webgpu/types" preserve="true" />
/**
 * A wgsl image on a WebGPU device: the shader module (compiled when the image loads, so that
 * shader errors surface there with the compiler's line numbers) and, per kernel, its bind group
 * layout and one compute pipeline per workgroup size used.
 */
import { errors } from '../../errors.js';
import type { WgslKernelInfo } from '../../image/manifest.js';
import type { DeviceImage, LoadedImage, LoadedKernel } from '../interface.js';

export class WgslKernel implements LoadedKernel {
  readonly name: string;
  readonly params: readonly { name: string; type: 'ptr' | 'i32' | 'f32' }[];
  readonly layout: GPUBindGroupLayout;
  private readonly pipelineLayout: GPUPipelineLayout;
  /** Pipelines by workgroup size, made on first use. */
  private readonly pipelines = new Map<number, Promise<GPUComputePipeline>>();

  constructor(
    private readonly device: GPUDevice,
    private readonly module: GPUShaderModule,
    readonly info: WgslKernelInfo,
    private readonly deviceId: string,
  ) {
    this.name = info.name;
    this.params = info.params.map(({ name, type }) => ({ name, type }));
    const entries: GPUBindGroupLayoutEntry[] = info.params.flatMap((param) =>
      param.type === 'ptr'
        ? [{ binding: param.binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: param.readOnly ? 'read-only-storage' : 'storage' } }]
        : [],
    );
    if (info.uniform) entries.push({ binding: info.uniform.binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'uniform' } });
    this.layout = device.createBindGroupLayout({ label: `${info.name} arguments`, entries });
    this.pipelineLayout = device.createPipelineLayout({ label: info.name, bindGroupLayouts: [this.layout] });
  }

  /** The workgroup size a launch of `threads` threads per team runs with. */
  workgroupSize(threads: number): number {
    return typeof this.info.workgroupSize === 'number' ? this.info.workgroupSize : threads;
  }

  /** The pipeline for teams of `threads` threads (the override constant set to it, if the kernel has one). */
  pipeline(threads: number): Promise<GPUComputePipeline> {
    const size = this.workgroupSize(threads);
    let pipeline = this.pipelines.get(size);
    if (!pipeline) {
      const constants = typeof this.info.workgroupSize === 'string' ? { [this.info.workgroupSize]: size } : undefined;
      pipeline = this.device
        .createComputePipelineAsync({
          label: `${this.name} (workgroup size ${size})`,
          layout: this.pipelineLayout,
          compute: { module: this.module, entryPoint: this.name, ...(constants ? { constants } : {}) },
        })
        .catch((error: Error) => {
          this.pipelines.delete(size);
          throw errors.incompatibleImage(`${this.deviceId}: kernel '${this.name}' cannot be compiled for workgroup size ${size}: ${error.message}`);
        });
      this.pipelines.set(size, pipeline);
    }
    return pipeline;
  }
}

export class WgslImage implements LoadedImage {
  constructor(readonly kernels: ReadonlyMap<string, WgslKernel>) {}
}

/**
 * Compiles `image` on `device`.
 * @throws OffloadError INCOMPATIBLE_IMAGE with the compiler's messages (`file:line:column: error: ...`),
 *   or when a kernel's pipeline cannot be made (checked with the default workgroup size).
 */
export async function loadWgslImage(device: GPUDevice, image: DeviceImage, defaultThreads: number, deviceId: string): Promise<WgslImage> {
  const kernels = image.info.kernels ?? [];
  const file = image.info.source ?? `${image.name}.wgsl`;
  const code = new TextDecoder().decode(image.bytes);
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ label: file, code });
  const [compilation, validation] = await Promise.all([module.getCompilationInfo(), device.popErrorScope()]);
  const failed = compilation.messages.filter((message) => message.type === 'error');
  if (failed.length > 0) {
    const lines = compilation.messages.map((m) => `${file}:${m.lineNum}:${m.linePos}: ${m.type}: ${m.message}`);
    throw errors.incompatibleImage(`WGSL compilation failed:\n${lines.join('\n')}`);
  }
  if (validation) throw errors.incompatibleImage(`WGSL shader module rejected: ${validation.message}`);
  const loaded = new Map<string, WgslKernel>();
  for (const info of kernels) {
    const entry = image.entries.find((candidate) => candidate.name === info.name);
    if (!entry || entry.params.length !== info.params.length || entry.params.some((param, i) => param.type !== info.params[i].type)) {
      throw errors.incompatibleImage(`WGSL kernel '${info.name}' does not match the bundle's entry for it`);
    }
    loaded.set(info.name, new WgslKernel(device, module, info, deviceId));
  }
  // Every pipeline is made once here, so that entry point and layout errors surface at load time.
  await Promise.all([...loaded.values()].map((kernel) => kernel.pipeline(defaultThreads)));
  return new WgslImage(loaded);
}
