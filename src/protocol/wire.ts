/**
 * The remote device protocol, spoken between the remote plugin (client) and `offload proxy`
 * (DESIGN section 5). Frames are JSON meta plus raw payload (src/transport/frame.ts). This
 * folder is the protocol's one home, imported by both ends: messages.ts types every frame,
 * decode-request.ts and decode-reply.ts check what each end receives, gate.ts and chunks.ts
 * are the two steps both ends take (parking a queue, streaming bytes), and this file holds the
 * constants, the wire form of errors and the field reader the decoders use.
 *
 * Every request carries `op` and a client-chosen `id`; the proxy answers each with exactly one
 * `reply` frame of the same id (`error` set on failure). Requests are pipelined: the client never
 * waits for a reply before sending the next request, and the proxy handles them in arrival order,
 * so per-queue order holds. Objects (buffers, images, queues, events) are named by ids the client
 * chooses, scoped to its session: an id of another client simply does not exist.
 *
 * Bulk data: a write of at most EAGER_BYTES travels in the request's payload. A larger one (or
 * one whose bytes are not ready yet) is sent with `stream: true` and no payload: a rendezvous.
 * The proxy sends `ready` when the queue reaches the write, the client then streams `chunk`
 * frames of at most CHUNK_BYTES, which the proxy writes into device memory as they come; so
 * neither side holds a second copy of the data and other queues' frames interleave with the
 * chunks. A read above EAGER_BYTES streams `data` frames before its reply; a smaller one comes
 * in the reply's payload. Lengths and offsets are integers up to 2^53 in JSON meta (exact, and
 * far beyond 5.7 GB); the frame prefix holds the payload length as u64.
 *
 * Client-side steps inside a queue (a copy staged through the client, waiting for an event of
 * another device) use gates: `wait-host` parks the proxy queue until the client's `signal`.
 * Event ids increase per connection; the proxy keeps only failed events, so an older id that is
 * absent completed successfully. Field types are checked on arrival (decodeRequest, with Meta
 * below): a wrong type is PROTOCOL and closes the connection; a well-typed wrong value (an unknown buffer, queue or kernel, an
 * offset out of range) is a coded error in the reply.
 */
import { asOffloadError, errors, OffloadError, quoted, type ErrorCode, ErrorCode as Codes } from '../errors.js';
import type { Frame } from '../transport/frame.js';

export const PROTOCOL_VERSION = 1;
/** Writes up to this size travel in the request itself. */
export const EAGER_BYTES = 256 * 1024;
/** Bulk data is split into chunks of this size. */
export const CHUNK_BYTES = 1024 * 1024;

/** A kernel argument on the wire: a number (i32/f32/f64), an i64 as a decimal string, or a buffer id with an offset. */
export type WireArg = number | { i64: string } | { buffer: number; offset?: number };

export interface WireError {
  code: ErrorCode;
  message: string;
}

/** The longest error message a reply carries (longer ones are cut: a reply must fit in a frame). */
const MAX_ERROR_MESSAGE = 4096;

const bounded = (text: string): string =>
  text.length > MAX_ERROR_MESSAGE ? `${text.slice(0, MAX_ERROR_MESSAGE)}... (${text.length} characters)` : text;

/** An error as a reply carries it: a foreign exception on the proxy is INTERNAL (a bug of ours), never a lost device. */
export function toWireError(error: unknown, context = 'serving a request'): WireError {
  const known = asOffloadError(error, `${context} on the proxy`);
  return { code: known.code, message: bounded(known.message) };
}

/** The one conversion of a wire error into an OffloadError (Meta.error has already refused unknown codes). */
export function fromWireError(error: WireError, where: string): OffloadError {
  return new OffloadError(error.code, `${error.message} (on proxy ${where})`);
}

/**
 * Typed access to an incoming frame's meta: each getter checks the field and throws PROTOCOL
 * naming the op and the field, so a malformed frame closes the connection with a clear reason.
 */
export class Meta {
  constructor(readonly frame: Frame) {}

  get op(): string {
    return this.string('op');
  }

  private fail(field: string, expected: string, value: unknown = this.frame.meta[field]): never {
    const op = typeof this.frame.meta.op === 'string' ? quoted(this.frame.meta.op) : '?';
    // What came is described, never echoed whole: it may be 64 KiB of anything.
    const got = JSON.stringify(value) ?? 'nothing';
    throw errors.protocol(
      `malformed ${op} frame: field '${field}' must be ${expected}, got ${got.length > 80 ? `${got.slice(0, 80)}... (${got.length} characters)` : got}`,
    );
  }

  string(field: string): string {
    const value = this.frame.meta[field];
    if (typeof value !== 'string' || value.length > 4096) this.fail(field, 'a string');
    return value;
  }

  /** A non-negative safe integer (ids, sizes, offsets). */
  uint(field: string): number {
    const value = this.frame.meta[field];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0)
      this.fail(field, 'a non-negative integer');
    return value;
  }

  /** A grid size: a non-negative integer, or 1 to 3 of them ([x, y, z]); the API checks the values. */
  gridSize(field: string): number | [number] | [number, number] | [number, number, number] {
    const value = this.frame.meta[field];
    if (typeof value === 'number') return this.uint(field);
    if (
      !Array.isArray(value) ||
      value.length < 1 ||
      value.length > 3 ||
      !value.every((v) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)
    ) {
      this.fail(field, 'a non-negative integer or 1 to 3 of them');
    }
    return value as [number, number, number];
  }

  optional<T>(field: string, read: (field: string) => T): T | undefined {
    return this.frame.meta[field] === undefined ? undefined : read.call(this, field);
  }

  object(field: string): Record<string, unknown> {
    const value = this.frame.meta[field];
    if (typeof value !== 'object' || value === null || Array.isArray(value)) this.fail(field, 'an object');
    return value as Record<string, unknown>;
  }

  array(field: string): unknown[] {
    const value = this.frame.meta[field];
    if (!Array.isArray(value) || value.length > 1024) this.fail(field, 'an array');
    return value;
  }

  error(field: string): WireError | undefined {
    const value = this.frame.meta[field];
    if (value === undefined) return undefined;
    const wire = value as Partial<WireError>;
    if (
      typeof wire !== 'object' ||
      wire === null ||
      typeof wire.code !== 'string' ||
      typeof wire.message !== 'string'
    ) {
      this.fail(field, 'an error object');
    }
    if (!Object.values(Codes).includes(wire.code))
      this.fail(`${field}.code`, `one of ${Object.values(Codes).join(', ')}`);
    return { code: wire.code, message: bounded(wire.message) };
  }

  /** Up to `max` bytes as an array of integers 0..255 (a fill's pattern). */
  bytes(field: string, max: number): Uint8Array {
    const value = this.array(field);
    if (
      value.length > max ||
      !value.every((byte) => Number.isInteger(byte) && (byte as number) >= 0 && (byte as number) <= 255)
    ) {
      this.fail(field, `an array of at most ${max} bytes (integers 0 to 255)`);
    }
    return Uint8Array.from(value as number[]);
  }

  args(field: string): WireArg[] {
    return this.array(field).map((arg, index) => {
      if (typeof arg === 'number') return arg;
      if (typeof arg === 'object' && arg !== null) {
        const a = arg as Record<string, unknown>;
        if (typeof a.i64 === 'string' && /^-?\d{1,20}$/.test(a.i64)) return { i64: a.i64 };
        const offset = a.offset ?? 0;
        if (Number.isSafeInteger(a.buffer) && Number.isSafeInteger(offset) && (offset as number) >= 0)
          return { buffer: a.buffer as number, offset: offset as number };
      }
      return this.fail(`${field}[${index}]`, 'a number, {i64} or {buffer}', arg);
    });
  }
}
