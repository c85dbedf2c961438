/// <reference types="@webgpu/types" preserve="true" />
/**
 * Where the GPU object comes from in a page (package.json's "browser" field puts this file in
 * place of gpu.ts): the browser's own `navigator.gpu`, with the same WGSL images and ABI as Dawn
 * in Node.
 */

/** The page's GPU, or why there is none. */
export function gpuInstance(): Promise<GPU | string> {
  const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
  return Promise.resolve(
    gpu ??
      'this page has no navigator.gpu: WebGPU needs a browser that has it (Chrome or Edge 113+, Firefox 141+, Safari 26+) and a secure context (https, or http://localhost)',
  );
}

/** Why there is no adapter when navigator.gpu finds none. */
export const NO_ADAPTER =
  'navigator.gpu.requestAdapter() found no adapter (the GPU is blocklisted or disabled; headless Chromium needs --enable-unsafe-webgpu)';

/** A page cannot look for device nodes: the browser decides. */
export function noGpuDeviceNode(): Promise<string | undefined> {
  return Promise.resolve(undefined);
}
