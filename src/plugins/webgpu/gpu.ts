/**
 * Where the GPU object comes from in Node: the npm package `webgpu` (Dawn). A page's build has
 * gpu.browser.ts in its place (package.json's "browser" field), which takes `navigator.gpu`.
 * The Dawn instance is made once per process (its start is the slow part, ~0.1-0.3 s).
 */
import { readdir, stat } from 'node:fs/promises';

let instance: Promise<GPU | string> | undefined;

/** The Dawn instance, or why there is none. */
export function gpuInstance(): Promise<GPU | string> {
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

/** Why there is no adapter when the instance finds none. */
export const NO_ADAPTER =
  'no WebGPU adapter: Dawn found no Vulkan, Metal or D3D12 driver it accepts (without a GPU, Mesa 25 ' +
  "lavapipe from Debian's bookworm-backports mesa-vulkan-drivers provides a software one)";

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
