/** Rectangular copies (writeRect, readRect, copyRect): their shape as the program gives it, checked and lowered. */
import { errors } from '../errors.js';
import type { Rect } from '../plugins/interface.js';
import { checkOptions, checkSize } from './checks.js';

/**
 * One side of a rectangular copy: where its first row starts, and the bytes from one row to
 * the next and one slice to the next (defaults: rows packed, `width` bytes apart; slices packed,
 * `rowPitch * height` apart).
 */
export interface RectSide {
  offset?: number;
  rowPitch?: number;
  slicePitch?: number;
}

/**
 * A rectangular copy (olMemcpyRect, cudaMemcpy3D): `depth` slices of `height` rows of `width`
 * bytes, read from `src` and written to `dst` with the layout each side says.
 */
export interface RectCopy {
  /** Bytes per row. */
  width: number;
  /** Rows per slice. */
  height: number;
  /** Slices; default 1. */
  depth?: number;
  /** The layout of the side read from (the host view of writeRect, the buffer of readRect, src of copyRect). */
  src?: RectSide;
  /** The layout of the side written to. */
  dst?: RectSide;
}

/** The bytes `rect` spans on one side, from its offset to the end of its last row. */
function rectSpan(width: number, height: number, depth: number, rowPitch: number, slicePitch: number): number {
  if (width === 0 || height === 0 || depth === 0) return 0;
  return (depth - 1) * slicePitch + (height - 1) * rowPitch + width;
}

/** `rect` checked against the byte lengths of both sides, as the plugin contract's Rect. */
export function checkRect(rect: unknown, what: string, srcLength: number, dstLength: number, device: number): Rect {
  const shape = checkOptions(rect, `${what}: rect`);
  const width = checkSize(shape.width, `${what}: rect.width`, device);
  const height = checkSize(shape.height, `${what}: rect.height`, device);
  const depth = checkSize(shape.depth ?? 1, `${what}: rect.depth`, device);
  if (width === 0 || height === 0 || depth === 0)
    throw errors.invalidArgument(
      `${what}: rect is ${width} x ${height} x ${depth} bytes; every extent must be at least 1 (liboffload's INVALID_SIZE)`,
      device,
    );
  const side = (name: 'src' | 'dst', length: number) => {
    const layout = checkOptions(shape[name], `${what}: rect.${name}`);
    const offset = checkSize(layout.offset ?? 0, `${what}: rect.${name}.offset`, device);
    const rowPitch = checkSize(layout.rowPitch ?? width, `${what}: rect.${name}.rowPitch`, device);
    if (rowPitch < width)
      throw errors.invalidArgument(
        `${what}: rect.${name}.rowPitch ${rowPitch} is less than rect.width ${width}: rows would overlap`,
        device,
      );
    const slicePitch = checkSize(layout.slicePitch ?? rowPitch * height, `${what}: rect.${name}.slicePitch`, device);
    if (depth > 1 && slicePitch < rowPitch * height) {
      throw errors.invalidArgument(
        `${what}: rect.${name}.slicePitch ${slicePitch} is less than rowPitch * height (${rowPitch * height}): slices would overlap`,
        device,
      );
    }
    const span = rectSpan(width, height, depth, rowPitch, slicePitch);
    if (!Number.isSafeInteger(offset + span) || offset + span > length) {
      throw errors.outOfBounds(
        `${what}: the ${name} side's last row ends at byte ${offset + span}, beyond its ${length} bytes`,
        device,
      );
    }
    return { offset, rowPitch, slicePitch };
  };
  const src = side('src', srcLength);
  const dst = side('dst', dstLength);
  return {
    width,
    height,
    depth,
    srcOffset: src.offset,
    srcRowPitch: src.rowPitch,
    srcSlicePitch: src.slicePitch,
    dstOffset: dst.offset,
    dstRowPitch: dst.rowPitch,
    dstSlicePitch: dst.slicePitch,
  };
}
