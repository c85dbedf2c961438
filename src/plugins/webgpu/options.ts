/**
 * The WebGPU plugin's options, apart from the plugin: the public declarations reach this file,
 * and it names no WebGPU type, so a program type-checks without the DOM and WebGPU libraries.
 */

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
  /**
   * Loop iterations each invocation of a translated kernel may run, all its loops together, before
   * the launch fails with TIMEOUT (a GPU cannot stop a dispatch, so the kernel stops itself).
   * Default: OFFLOAD_WEBGPU_LOOP_BUDGET, or 2^26.
   */
  loopBudget?: number;
}
