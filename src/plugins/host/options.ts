/**
 * The host device's options, apart from the device: the public declarations reach this file,
 * and it names no WebAssembly type, so a program type-checks without the DOM library or
 * @types/node (ES2022's library has no WebAssembly namespace).
 */
import type { InlineMode } from './inline.js';

export interface HostDeviceOptions {
  /** Worker threads that run teams. */
  threads: number;
  /** Device memory in bytes (a multiple of 64 KiB, at most 4 GiB - 64 KiB). */
  memoryBytes: number;
  /** Which launches run on the calling thread (inline.ts). */
  inline: InlineMode;
}
