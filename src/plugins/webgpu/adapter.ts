/// <reference types="@webgpu/types" preserve="true" />
/**
 * Finding a WebGPU adapter through the npm package `webgpu` (Dawn, the engine inside Chrome, on
 * Vulkan, Metal or D3D12). The Dawn instance is made once per process (its start is the slow
 * part, ~0.1-0.3 s); each runtime gets an adapter of its own, since an adapter makes one device.
 */
import { readdir, stat } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { errors } from '../../errors.js';
import { debugLog, dropped } from '../../runtime/debug.js';
import { parseBytes } from '../../units.js';
import type { WebGpuOptions } from './options.js';

export type { WebGpuOptions } from './options.js';

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

const WEBGPU_SETTINGS = {
  on: ['', 'on', '1', 'true', 'yes'],
  off: ['off', '0', 'false', 'no'],
  fallback: ['fallback'],
};

/**
 * Options from OFFLOAD_WEBGPU: unset or `on` takes a hardware adapter, `off` (or `0`) turns the
 * plugin off, `fallback` also takes software adapters; anything else is INVALID_ARGUMENT.
 */
export function webgpuOptionsFromEnv(
  value = process.env.OFFLOAD_WEBGPU,
  memory = process.env.OFFLOAD_WEBGPU_MEMORY,
): WebGpuOptions | false {
  const setting = (value ?? '').trim().toLowerCase();
  if (WEBGPU_SETTINGS.off.includes(setting)) return false;
  if (!WEBGPU_SETTINGS.on.includes(setting) && !WEBGPU_SETTINGS.fallback.includes(setting)) {
    throw errors.invalidArgument(`OFFLOAD_WEBGPU must be on, off or fallback (or unset: on), got '${value}'`);
  }
  const options: WebGpuOptions = { fallback: setting === 'fallback' };
  if (memory !== undefined && memory !== '') options.memoryBytes = parseBytes(memory, 'OFFLOAD_WEBGPU_MEMORY');
  return options;
}

/** An adapter the options accept, or the reason there is none (for `offload devices`). */
export async function findAdapter(options: WebGpuOptions): Promise<AdapterSearch> {
  // Dawn costs 0.1-0.3 s to start and, on a software adapter, writes lines of its own to stderr
  // that no JavaScript can catch; where no GPU can be there, a program that did not ask for a
  // software adapter does not start it.
  if (!options.fallback) {
    const absent = await noGpuDeviceNode();
    if (absent) {
      debugLog('webgpu', `Dawn not started: ${absent}`);
      return { reason: absent };
    }
  }
  const started = performance.now();
  const gpu = await gpuInstance();
  if (typeof gpu === 'string') return { reason: gpu };
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' }).catch((error: unknown) => {
    dropped('webgpu', 'asking Dawn for an adapter')(error); // no adapter: said below
    return null;
  });
  if (!adapter) {
    return {
      reason:
        'no WebGPU adapter: Dawn found no Vulkan, Metal or D3D12 driver it accepts (without a GPU, Mesa 25 ' +
        "lavapipe from Debian's bookworm-backports mesa-vulkan-drivers provides a software one)",
    };
  }
  const info = adapter.info;
  debugLog(
    'webgpu',
    () =>
      `Dawn started and found ${info.description || info.vendor} (${isFallback(adapter) ? 'software' : 'hardware'}) in ${(performance.now() - started).toFixed(0)} ms`,
  );
  if (isFallback(adapter) && !options.fallback) {
    return {
      reason: `the only WebGPU adapter is a software one (${info.description || info.architecture || info.vendor}); OFFLOAD_WEBGPU=fallback or Offload.init({ webgpu: { fallback: true } }) uses it`,
    };
  }
  return { adapter };
}

/**
 * On Linux, a hardware GPU reaches Vulkan only through a device node: a DRM render node, an
 * NVIDIA node, or WSL's /dev/dxg. Without one, the reason there is no hardware adapter (found
 * with a directory listing instead of Dawn); elsewhere (Metal, D3D12) undefined.
 */
export async function noGpuDeviceNode(platform = process.platform, dev = '/dev'): Promise<string | undefined> {
  if (platform !== 'linux') return undefined;
  const dri = await readdir(`${dev}/dri`).catch(() => [] as string[]); // no such directory: the answer sought
  if (dri.some((name) => name.startsWith('renderD'))) return undefined;
  for (const node of ['nvidia0', 'nvidiactl', 'dxg']) {
    if (
      await stat(`${dev}/${node}`).then(
        () => true,
        () => false,
      )
    )
      return undefined;
  }
  return `no GPU device node (${dev}/dri/renderD*, ${dev}/nvidia0, ${dev}/dxg): this machine shows no GPU to Vulkan; OFFLOAD_WEBGPU=fallback or { webgpu: { fallback: true } } takes a software adapter (lavapipe)`;
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
