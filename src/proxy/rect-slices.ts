/**
 * Rectangles cut into slices, so that no single request holds the proxy's event loop. A host
 * device copies a rectangle row by row on the proxy's main thread: 64 Mi rows of one byte each
 * held it for seconds, and 16 such copies at once for over 10 s, while every other client waited.
 * A rectangle of more than SLICE_ROWS rows runs instead as slices of at most that many rows (and
 * SLICE_BYTES bytes), one per turn of the event loop, on a side queue while the client's queue
 * waits for them at a gate (so the queue's order holds). A run of slices that lasts longer than
 * the proxy's launch time limit fails with TIMEOUT: work a client asks for is bounded by time as
 * a launch is.
 */
import { errors } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import { describeBuffer } from '../api/internal.js';
import type { Event, Queue, RectCopy } from '../api/queue.js';
import { park } from '../protocol/gate.js';
import { parking } from './parking.js';

/** Rows per slice: 16 Ki one-byte rows took about 2 ms on the host device (`copyWithin` per row). */
export const SLICE_ROWS = 16 * 1024;
/** Bytes per slice, for wide rows (a 16 MiB row is one copy of a few ms). */
const SLICE_BYTES = 16 * 1024 * 1024;

/** Both sides' layouts of `rect` with every default filled in (RectCopy's defaults). */
interface FullRect {
  width: number;
  height: number;
  depth: number;
  src: { offset: number; rowPitch: number; slicePitch: number };
  dst: { offset: number; rowPitch: number; slicePitch: number };
}

function full(rect: RectCopy): FullRect {
  const { width, height } = rect;
  const side = (layout: RectCopy['src']) => {
    const rowPitch = layout?.rowPitch ?? width;
    return { offset: layout?.offset ?? 0, rowPitch, slicePitch: layout?.slicePitch ?? rowPitch * height };
  };
  return { width, height, depth: rect.depth ?? 1, src: side(rect.src), dst: side(rect.dst) };
}

/** Whether `rect` is small enough to run as one operation. */
export function runsWhole(rect: RectCopy): boolean {
  const rows = rect.height * (rect.depth ?? 1);
  return rows <= SLICE_ROWS && rows * rect.width <= SLICE_BYTES;
}

/**
 * The slices of `rect`, in order: runs of whole planes when a plane has at most a slice's rows,
 * else runs of rows of one plane. Each has both sides' layouts in full, and lies inside `rect`.
 */
export function* slicesOf(rect: RectCopy): Generator<RectCopy> {
  const { width, height, depth, src, dst } = full(rect);
  if (width === 0 || height === 0 || depth === 0) return;
  const rows = Math.max(1, Math.min(SLICE_ROWS, Math.floor(SLICE_BYTES / width)));
  const at = (side: FullRect['src'], z: number, r: number) => ({
    offset: side.offset + z * side.slicePitch + r * side.rowPitch,
    rowPitch: side.rowPitch,
    slicePitch: side.slicePitch,
  });
  if (height <= rows) {
    const planes = Math.floor(rows / height);
    for (let z = 0; z < depth; z += planes)
      yield { width, height, depth: Math.min(planes, depth - z), src: at(src, z, 0), dst: at(dst, z, 0) };
    return;
  }
  for (let z = 0; z < depth; z++)
    for (let r = 0; r < height; r += rows)
      yield { width, height: Math.min(rows, height - r), depth: 1, src: at(src, z, r), dst: at(dst, z, r) };
}

/** The bytes `rect` spans on `side`'s buffer from its start, checked against `buffer` (OUT_OF_BOUNDS past it). */
export function checkSpan(what: string, rect: RectCopy, side: 'src' | 'dst', buffer: Buffer): void {
  const { width, height, depth, [side]: layout } = full(rect);
  if (width === 0 || height === 0 || depth === 0) return;
  if (layout.rowPitch < width || (depth > 1 && layout.slicePitch < layout.rowPitch * height)) return; // the API says why
  const end = layout.offset + (depth - 1) * layout.slicePitch + (height - 1) * layout.rowPitch + width;
  if (!Number.isSafeInteger(end) || end > buffer.byteLength)
    throw errors.outOfBounds(
      `${what}: the ${side} side's last row ends at byte ${end}, beyond the ${buffer.byteLength} bytes of ${describeBuffer(buffer)}`,
      buffer.device.id,
    );
}

/**
 * Runs `slice(side, rect)` for each slice of `rect`, one per turn of the event loop, on a queue
 * of `queue`'s device made for the purpose, while `queue` waits at a gate for all of them: the
 * returned promise settles as the client's operation (after everything queued before it on
 * `queue`; what is queued after it waits). Past `timeoutMs` (when set) it fails with TIMEOUT.
 */
export function inSlices(
  queue: Queue,
  rect: RectCopy,
  slice: (side: Queue, rect: RectCopy) => Event,
  timeoutMs: number | undefined,
  what: string,
): Promise<void> {
  return park(parking(queue), async () => {
    const started = Date.now();
    const side = queue.device.queue();
    try {
      for (const part of slicesOf(rect)) {
        await slice(side, part).done;
        if (timeoutMs !== undefined && timeoutMs > 0 && Date.now() - started > timeoutMs)
          throw errors.timeout(
            `${what} ran past the proxy's launch time limit of ${timeoutMs} ms (offload proxy --launch-timeout); copy fewer rows at a time`,
            queue.device.id,
          );
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      await side.destroy().catch(() => {});
    }
  });
}
