/**
 * A queue's fill (olMemFill) and rectangular copies (olMemcpyRect), checked and handed to its
 * device queue. Each returns its operation's promise; the Queue runs it as one of its ordered
 * operations (Queue.op), so a check that throws fails that operation's event. The shape of a
 * rectangular copy is rect.ts's.
 */
import { errors } from '../errors.js';
import { MAX_FILL_PATTERN_BYTES } from '../units.js';
import { rectBytes, type PluginQueue } from '../plugins/interface.js';
import type { Buffer } from './buffer.js';
import { checkInteger, checkRange, checkSize, describe, hostBytes } from './checks.js';
import type { Device } from './device.js';
import { checkRect, type RectCopy } from './rect.js';

/** What these operations need of their queue (a Queue has it). */
export interface OperationQueue {
  readonly device: Device;
  readonly plugin: PluginQueue;
  localBuffer(value: unknown, name: string): Buffer;
  trace(name: string, args: Record<string, unknown>, done: Promise<unknown>): void;
}

/** A fill pattern as its bytes (a copy: the caller may change its array once fill() returns). */
function fillPatternBytes(pattern: unknown, device: number): Uint8Array {
  if (typeof pattern === 'number') {
    checkInteger(pattern, 'fill: pattern (a number is one byte)', 0, 255, device);
    return Uint8Array.of(pattern);
  }
  if (!ArrayBuffer.isView(pattern)) {
    throw errors.invalidArgument(
      `fill: pattern must be a number (one byte), a TypedArray or a DataView of 1 to ${MAX_FILL_PATTERN_BYTES} bytes, got ${describe(pattern)}`,
      device,
    );
  }
  if (pattern.byteLength < 1 || pattern.byteLength > MAX_FILL_PATTERN_BYTES) {
    throw errors.invalidArgument(
      `fill: pattern must be 1 to ${MAX_FILL_PATTERN_BYTES} bytes long, got ${pattern.byteLength} (a ${describe(pattern)}); for more, write the bytes`,
      device,
    );
  }
  return new Uint8Array(pattern.buffer, pattern.byteOffset, pattern.byteLength).slice();
}

/** Queue.fill: `bytes` bytes of `buffer` from `offset` filled with `pattern` repeated. */
export function enqueueFill(
  queue: OperationQueue,
  buffer: Buffer,
  pattern: number | ArrayBufferView,
  offset: number,
  bytes: number | undefined,
): Promise<unknown> {
  const device = queue.device.id;
  const dst = queue.localBuffer(buffer, 'fill: buffer');
  const bytesOf = fillPatternBytes(pattern, device);
  const at = checkSize(offset, 'fill: offset', device);
  checkRange(at, 0, dst.byteLength, `fill of ${dst.describe()}`, device);
  const length = checkSize(bytes ?? dst.byteLength - at, 'fill: bytes', device);
  checkRange(at, length, dst.byteLength, `fill of ${dst.describe()}`, device);
  if (bytesOf.byteLength > length) {
    throw errors.invalidArgument(
      `fill: the pattern's ${bytesOf.byteLength} bytes are more than the ${length} bytes to fill; pass a pattern no longer than the fill`,
      device,
    );
  }
  if (length % bytesOf.byteLength !== 0) {
    throw errors.invalidArgument(
      `fill: ${length} bytes is not a multiple of the pattern's ${bytesOf.byteLength} bytes; pass bytes that is`,
      device,
    );
  }
  const done = queue.plugin.fill(dst.allocation, at, length, bytesOf);
  queue.trace('fill', { bytes: length, offset: at }, done);
  dst.use(done);
  return done;
}

/** Queue.writeRect: a rectangle of `hostView` copied into `buffer`. */
export function enqueueWriteRect(
  queue: OperationQueue,
  buffer: Buffer,
  hostView: ArrayBufferView,
  rect: RectCopy,
): Promise<unknown> {
  const dst = queue.localBuffer(buffer, 'writeRect: buffer');
  const src = hostBytes(hostView, 'writeRect: hostView', queue.device.id);
  const checked = checkRect(rect, `writeRect into ${dst.describe()}`, src.byteLength, dst.byteLength, queue.device.id);
  const done = queue.plugin.submitRect(dst.allocation, src, checked);
  queue.trace('writeRect', { bytes: rectBytes(checked) }, done);
  dst.use(done);
  return done;
}

/** Queue.readRect: a rectangle of `buffer` copied into `hostView`. */
export function enqueueReadRect(
  queue: OperationQueue,
  buffer: Buffer,
  hostView: ArrayBufferView,
  rect: RectCopy,
): Promise<unknown> {
  const src = queue.localBuffer(buffer, 'readRect: buffer');
  const dst = hostBytes(hostView, 'readRect: hostView', queue.device.id);
  const checked = checkRect(rect, `readRect from ${src.describe()}`, src.byteLength, dst.byteLength, queue.device.id);
  const done = queue.plugin.retrieveRect(dst, src.allocation, checked);
  queue.trace('readRect', { bytes: rectBytes(checked) }, done);
  src.use(done);
  return done;
}

/** Queue.copyRect: a rectangle copied between two buffers of the queue's device. */
export function enqueueCopyRect(queue: OperationQueue, dst: Buffer, src: Buffer, rect: RectCopy): Promise<unknown> {
  const to = queue.localBuffer(dst, 'copyRect: dst');
  const from = queue.localBuffer(src, 'copyRect: src');
  const checked = checkRect(rect, `copyRect from ${from.describe()}`, from.byteLength, to.byteLength, queue.device.id);
  const done = queue.plugin.copyRect(to.allocation, from.allocation, checked);
  queue.trace('copyRect', { bytes: rectBytes(checked) }, done);
  from.use(done);
  to.use(done);
  return done;
}
