/// <reference types="@webgpu/types" preserve="true" />
/**
 * A wgsl image on a WebGPU device: the shader module (compiled when the image loads, so that
 * shader errors surface there with the compiler's line numbers) and, per kernel, its bind group
 * layout and one compute pipeline per workgroup size used.
 */
import { asOffloadError, errors } from '../../errors.js';
import type { WgslKernelInfo } from '../../image/manifest.js';
import type { DeviceImage, Dims, LoadedImage, LoadedKernel } from '../interface.js';

export class WgslKernel implements LoadedKernel {
  readonly format = 'wgsl';
  /** WGSL images keep no static data in device memory (module-scope storage is per dispatch). */
  readonly staticBytes = 0;
  readonly name: string;
  readonly params: readonly { name: string; type: 'ptr' | 'i32' | 'f32' }[];
  readonly layout: GPUBindGroupLayout;
  /** Group 1's layout: the fault word, for an entry point that uses it (WgslKernelInfo.fault). */
  readonly faultLayout: GPUBindGroupLayout | undefined;
  private readonly pipelineLayout: GPUPipelineLayout;
  /** Pipelines by workgroup size and team memory, made on first use. */
  private readonly pipelines = new Map<string, Promise<GPUComputePipeline>>();

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
        ? [
            {
              binding: param.binding,
              visibility: GPUShaderStage.COMPUTE,
              buffer: { type: param.readOnly ? 'read-only-storage' : 'storage' },
            },
          ]
        : [],
    );
    if (info.uniform)
      entries.push({ binding: info.uniform.binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'uniform' } });
    this.layout = device.createBindGroupLayout({ label: `${info.name} arguments`, entries });
    this.faultLayout = info.fault
      ? device.createBindGroupLayout({
          label: `${info.name} fault word`,
          entries: [{ binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'storage' } }],
        })
      : undefined;
    this.pipelineLayout = device.createPipelineLayout({
      label: info.name,
      bindGroupLayouts: this.faultLayout ? [this.layout, this.faultLayout] : [this.layout],
    });
  }

  /**
   * The workgroup size a launch with threads `threads` (x, y, z) runs with: fixed sizes stay,
   * override constants take the launch's threads along their axis.
   * @throws OffloadError INVALID_ARGUMENT for threads along y or z given to a kernel whose
   *   workgroup size names only x.
   */
  workgroupSize(threads: Dims): Dims {
    const declared = this.info.workgroupSize;
    if (!Array.isArray(declared)) {
      if (typeof declared === 'number') return [declared, 1, 1];
      if (threads[1] !== 1 || threads[2] !== 1) {
        throw errors.invalidArgument(
          `${this.deviceId}: kernel '${this.name}' has a one-dimensional @workgroup_size(${declared}); launch it with threads as a number, ` +
            `or declare @workgroup_size(x, y, z) with an override constant per axis`,
        );
      }
      return [threads[0], 1, 1];
    }
    return [0, 1, 2].map((axis) => {
      const size = declared[axis] ?? 1;
      return typeof size === 'number' ? size : threads[axis]!;
    }) as Dims;
  }

  /**
   * The pipeline for teams of `threads` threads (x, y, z) with `teamMemoryBytes` of team memory:
   * the override constants of the workgroup size set to the threads along their axes, and the
   * team memory's (docs/wgsl-abi.md) to its bytes when there are any.
   */
  pipeline(threads: Dims, teamMemoryBytes = 0): Promise<GPUComputePipeline> {
    const size = this.workgroupSize(threads);
    const teamMemory = this.info.teamMemory !== undefined && teamMemoryBytes > 0 ? teamMemoryBytes : 0;
    const key = `${size.join('x')}:${teamMemory}`;
    let pipeline = this.pipelines.get(key);
    if (!pipeline) {
      const constants: Record<string, number> = {};
      const declared = this.info.workgroupSize;
      (Array.isArray(declared) ? declared : [declared]).forEach((name, axis) => {
        if (typeof name === 'string') constants[name] = size[axis]!;
      });
      if (teamMemory > 0) constants[this.info.teamMemory!] = teamMemory;
      const shown = `workgroup size ${size.join(' x ')}${teamMemory > 0 ? ` and ${teamMemory} bytes of team memory` : ''}`;
      pipeline = this.device
        .createComputePipelineAsync({
          label: `${this.name} (${shown})`,
          layout: this.pipelineLayout,
          compute: {
            module: this.module,
            entryPoint: this.name,
            ...(Object.keys(constants).length > 0 ? { constants } : {}),
          },
        })
        .catch((error: unknown) => {
          this.pipelines.delete(key);
          throw asOffloadError(error, `${this.deviceId}: kernel '${this.name}' cannot be compiled for ${shown}`, {
            code: 'INCOMPATIBLE_IMAGE',
          });
        });
      this.pipelines.set(key, pipeline);
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
export async function loadWgslImage(
  device: GPUDevice,
  image: DeviceImage,
  defaultThreads: number,
  deviceId: string,
): Promise<WgslImage> {
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
    if (
      !entry ||
      entry.params.length !== info.params.length ||
      entry.params.some((param, i) => param.type !== info.params[i]!.type)
    ) {
      throw errors.incompatibleImage(`WGSL kernel '${info.name}' does not match the bundle's entry for it`);
    }
    loaded.set(info.name, new WgslKernel(device, module, info, deviceId));
  }
  // Every pipeline is made once here, so that entry point and layout errors surface at load time.
  await Promise.all([...loaded.values()].map((kernel) => kernel.pipeline([defaultThreads, 1, 1])));
  return new WgslImage(loaded);
}
