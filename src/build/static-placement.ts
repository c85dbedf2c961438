/**
 * Where an image's static data goes. AssemblyScript emits absolute addresses for static data, so
 * each image fixes its region at build time inside the static window (see wasm-abi.ts). Bases
 * are spread over the window by a hash of the bundle, so that unrelated images loaded on one
 * device rarely claim the same range.
 */
import { errors } from '../errors.js';
import { STATIC_ALIGN, STATIC_WINDOW_END, STATIC_WINDOW_START } from '../image/wasm-abi.js';
import type { DataSegment } from './wasm-module-info.js';

/** Static sizes are multiples of this (AssemblyScript aligns its static objects to 16). */
const STATIC_SIZE_ALIGN = 16;

/** 32-bit FNV-1a hash of the UTF-8 encoding of `parts`, each followed by a NUL byte. */
export function fnv1a32(parts: readonly string[]): number {
  let hash = 0x811c9dc5;
  const encoder = new TextEncoder();
  for (const part of parts) {
    for (const byte of encoder.encode(part)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/**
 * The default static base for `staticSize` bytes of data: STATIC_WINDOW_START plus `hash`
 * modulo the number of STATIC_ALIGN slots at which that much data still ends inside the window.
 * @throws OffloadError INVALID_ARGUMENT when the data does not fit in the window at all.
 */
export function pickStaticBase(hash: number, staticSize: number): number {
  checkFitsWindow(STATIC_WINDOW_START, staticSize);
  // A size of 0 is placed like 1 byte so that the base stays below the window's end.
  const span = Math.max(staticSize, 1);
  const slots = Math.floor((STATIC_WINDOW_END - STATIC_WINDOW_START - span) / STATIC_ALIGN) + 1;
  return STATIC_WINDOW_START + (hash % slots) * STATIC_ALIGN;
}

/**
 * Size of the static region starting at `staticBase` that covers every active data segment,
 * rounded up to 16; 0 when there are none.
 * @throws OffloadError INVALID_ARGUMENT when a segment starts below `staticBase`.
 */
export function staticSizeOf(segments: readonly DataSegment[], staticBase: number): number {
  let end = staticBase;
  for (const segment of segments) {
    if (segment.offset < staticBase) {
      throw errors.invalidArgument(`static data at address ${segment.offset} lies below the static base ${staticBase}`);
    }
    end = Math.max(end, segment.offset + segment.size);
  }
  return Math.ceil((end - staticBase) / STATIC_SIZE_ALIGN) * STATIC_SIZE_ALIGN;
}

/** @throws OffloadError INVALID_ARGUMENT when [staticBase, staticBase + staticSize) leaves the window. */
export function checkFitsWindow(staticBase: number, staticSize: number): void {
  if (staticBase + staticSize > STATIC_WINDOW_END) {
    throw errors.invalidArgument(
      `the kernels' static data (${staticSize} bytes at address ${staticBase}) does not fit in the static ` +
        `window [${STATIC_WINDOW_START}, ${STATIC_WINDOW_END}); reduce constant tables and strings`,
    );
  }
}
