/**
 * How a kernel is named across the protocol: by the client's image id, the proxy's device index
 * and the kernel's name (a `load` makes the names, a `launch` uses them, an `unload` drops
 * every name of its image).
 */

export function kernelKey(image: number, device: number, kernel: string): string {
  return `${image}/${device}/${kernel}`;
}

/** Whether `key` names a kernel of image `image`. */
export function isKernelOf(key: string, image: number): boolean {
  return key.startsWith(`${image}/`);
}
