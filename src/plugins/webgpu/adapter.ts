/// <reference types="@webgpu/types" preserve="true" />
/**
 * Finding a WebGPU adapter: in Node through the npm package `webgpu` (Dawn, the engine inside
 * Chrome, on Vulkan, Metal or D3D12), in a page through `navigator.gpu` (gpu.ts and
 * gpu.browser.ts: where the GPU object comes from). Each runtime gets an adapter of its own,
 * since an adapter makes one device.
 */
import { errors } from '../../errors.js';
import { environment, performance } from '../../platform.js';
import { gpuInstance, NO_ADAPTER, noGpuDeviceNode } from './gpu.js';
import { debugLog, dropped } from '../../runtime/debug.js';
import { parseBytes } from '../../units.js';
import type { WebGpuOptions } from './options.js';

export type { WebGpuOptions } from './options.js';
export { noGpuDeviceNode } from './gpu.js';

export type AdapterSearch = { adapter: GPUAdapter } | { reason: string };

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
  value = environment().OFFLOAD_WEBGPU,
  memory = environment().OFFLOAD_WEBGPU_MEMORY,
  loopBudget = environment().OFFLOAD_WEBGPU_LOOP_BUDGET,
): WebGpuOptions | false {
  const setting = (value ?? '').trim().toLowerCase();
  if (WEBGPU_SETTINGS.off.includes(setting)) return false;
  if (!WEBGPU_SETTINGS.on.includes(setting) && !WEBGPU_SETTINGS.fallback.includes(setting)) {
    throw errors.invalidArgument(`OFFLOAD_WEBGPU must be on, off or fallback (or unset: on), got '${value}'`);
  }
  const options: WebGpuOptions = { fallback: setting === 'fallback' };
  if (memory !== undefined && memory !== '') options.memoryBytes = parseBytes(memory, 'OFFLOAD_WEBGPU_MEMORY');
  if (loopBudget !== undefined && loopBudget !== '') {
    const budget = Number(loopBudget);
    if (!/^\d+$/.test(loopBudget.trim()) || !Number.isSafeInteger(budget) || budget < 1 || budget > 0xffffffff)
      throw errors.invalidArgument(
        `OFFLOAD_WEBGPU_LOOP_BUDGET must be a whole number of loop iterations from 1 to 4294967295, got '${loopBudget}'`,
      );
    options.loopBudget = budget;
  }
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
    dropped('webgpu', 'asking for an adapter')(error); // no adapter: said below
    return null;
  });
  if (!adapter) return { reason: NO_ADAPTER };
  const info = adapter.info;
  debugLog(
    'webgpu',
    () =>
      `WebGPU found ${info.description || info.vendor} (${isFallback(adapter) ? 'software' : 'hardware'}) in ${(performance.now() - started).toFixed(0)} ms`,
  );
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
