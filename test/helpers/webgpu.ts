/**
 * Whether this machine has a WebGPU adapter (a software one counts: lavapipe runs the real
 * WebGPU path). Tests of the WebGPU device skip with the reason when it has none, except where
 * OFFLOAD_REQUIRE_WEBGPU=1 (CI) makes that a failure.
 */
import { findAdapter } from '../../src/plugins/webgpu/adapter.js';

/** Undefined when an adapter exists; otherwise the reason to skip. @throws when CI requires WebGPU. */
export async function webgpuSkipReason(): Promise<string | undefined> {
  const found = await findAdapter({ fallback: true });
  if ('adapter' in found) return undefined;
  if (process.env.OFFLOAD_REQUIRE_WEBGPU === '1') throw new Error(`OFFLOAD_REQUIRE_WEBGPU=1 but ${found.reason}`);
  return found.reason;
}

/** What the WebGPU device's WGSL kernels cannot do (the conformance suite skips those tests). */
export const WEBGPU_LACKS = {
  i64: 'WGSL has no 64-bit integers',
  f64: 'WGSL has no f64',
  traps: 'WGSL kernels cannot trap (out-of-bounds accesses are clamped)',
  concurrentQueues: 'a WebGPU device has one queue: work of several queues runs one after another',
  aliasing: 'a WebGPU launch cannot bind one buffer to two parameters when it writes one of them',
  unalignedPointers: "a WebGPU launch binds pointers only at the adapter's minStorageBufferOffsetAlignment",
} as const;
