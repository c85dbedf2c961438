/**
 * The baseline of kernels: a bundle's wasm image instantiated on the main thread over its own
 * shared memory, with the imports a host-device worker gives it, for a grid of one team.
 */
import { readFile } from 'node:fs/promises';
import { decodeBundle } from '../src/image/bundle.js';

export type MainThreadKernel = (...args: number[]) => void;

/** The exported kernels of the bundle's wasm image, as plain functions over `memory`. */
export async function instantiateOnMainThread(
  bundlePath: string,
  memory: WebAssembly.Memory,
): Promise<Record<string, MainThreadKernel>> {
  const { images } = decodeBundle(await readFile(bundlePath));
  const image = images.find(({ info }) => info.format === 'wasm');
  if (!image) throw new Error(`${bundlePath} holds no wasm image`);
  const module = await WebAssembly.compile(image.bytes as Uint8Array<ArrayBuffer>);
  const instance = await WebAssembly.instantiate(module, {
    env: {
      memory,
      abort: () => {
        throw new Error('kernel aborted');
      },
      seed: () => Date.now(),
      trace: () => {},
    },
    // Team 0 of 1, one thread: what the baselines run as.
    offload: {
      team_id: () => 0,
      num_teams: () => 1,
      thread_id: () => 0,
      num_threads: () => 1,
      print: () => {},
      barrier: () => {},
      team_memory: () => 0,
      host_call: () => {
        throw new Error('no host calls on the main thread baseline');
      },
    },
  });
  return instance.exports as Record<string, MainThreadKernel>;
}
