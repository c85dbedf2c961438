/**
 * Finding a WebGPU adapter through the npm package `webgpu` (Dawn, the engine inside Chrome, on
 * Vulkan, Metal or D3D12). The Dawn instance is made once per process (its start is the slow
 * part, ~0.1-0.3 s); each runtime gets an adapter of its own, since an adapter makes one device.
 */
import { parseBytes } from '../../units.js';

/** Which adapters the WebGPU plugin takes. */
export interface WebGpuOptions {
  /**
   * Also take a software adapter (Mesa's lavapipe, SwiftShader): it runs the real WebGPU path on
   * the CPU, for tests and machines without a GPU. Default: OFFLOAD_WEBGPU=fallback.
   */
  fallback?: boolean;
  /**
   * The device memory budget: bytes all buffers together may hold (WebGPU does not say how much
   * memory a GPU has). Default: OFFLOAD_WEBGPU_MEMORY, or four of the largest buffer a kernel binds.
   */
  memoryBytes?: number;
}

export type AdapterSearch = { adapter: GPUAdapter } | { reason: string };

let instance: Promise<GPU | string> | undefined;

/** The Dawn instance, or why there is none. */
function gpuInstance(): Promise<GPU | string> {
  instance ??= import('webgpu').then(
    ({ create, globals }) => {
      // The GPUBufferUsage, GPUMapMode, ... constants the WebGPU API expects as globals.
      for (const [name, value] of Object.entries(globals)) (globalThis as Record<string, unknown>)[name] ??= value;
      return create([]);
    },
    (error: Error) => `the npm package 'webgpu' (Dawn) cannot be loaded: ${error.message}`,
  );
  return instance;
}

/** Options from OFFLOAD_WEBGPU: `off` (or `0`) turns the plugin off, `fallback` takes software adapters. */
export function webgpuOptionsFromEnv(value = process.env.OFFLOAD_WEBGPU, memory = process.env.OFFLOAD_WEBGPU_MEMORY): WebGpuOptions | false {
  const setting = (value ?? '').trim().toLowerCase();
  if (setting === 'off' || setting === '0' || setting === 'false') return false;
  const options: WebGpuOptions = { fallback: setting === 'fallback' };
  if (memory !== undefined && memory !== '') options.memoryBytes = parseBytes(memory, 'OFFLOAD_WEBGPU_MEMORY');
  return options;
}

/** An adapter the options accept, or the reason there is none (for `offload devices`). */
export async function findAdapter(options: WebGpuOptions): Promise<AdapterSearch> {
  const gpu = await gpuInstance();
  if (typeof gpu === 'string') return { reason: gpu };
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' }).catch(() => null);
  if (!adapter) {
    return {
      reason:
        'no WebGPU adapter: Dawn found no Vulkan, Metal or D3D12 driver it accepts (without a GPU, Mesa 25 ' +
        "lavapipe from Debian's bookworm-backports mesa-vulkan-drivers provides a software one)",
    };
  }
  const info = adapter.info;
  if (isFallback(adapter) && !options.fallback) {
    return {
      reason: `the only WebGPU adapter is a software one (${info.description || info.architecture || info.vendor}); OFFLOAD_WEBGPU=fallback or Offload.init({ webgpu: { fallback: true } }) uses it`,
    };
  }
  return { adapter };
}

export function isFallback(adapter: GPUAdapter): boolean {
  return (adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean }).isFallbackAdapter === true;
}

/** Why the last runtime made in this process has no WebGPU device; shown by `offload devices`. */
let lastReason: string | undefined;

export function noteUnavailable(reason: string | undefined): void {
  lastReason = reason;
}

/** Why the WebGPU plugin has no device in the last runtime made, if it has none. */
export function webgpuUnavailable(): string | undefined {
  return lastReason;
}
