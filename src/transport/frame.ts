/**
 * Frames: the unit every transport carries. A frame is a small `meta` object plus a raw
 * `payload` of bytes (bulk data never goes through JSON).
 *
 * Encoding, little-endian:
 *   u32 magic | u32 meta length | u64 payload length | meta | payload
 * The magic says how the meta is written: 'OFL1', UTF-8 JSON; 'OFC1', the compact binary form
 * of a MetaCodec that both ends set (the protocol's, for the frames of a launch round trip:
 * transport knows no messages). The decoder checks the magic and both lengths before it buffers
 * anything, so a malformed or oversized frame is a PROTOCOL error at once, never a large allocation.
 */
import { foreignProtocol } from './foreign-protocol.js';
import { errors, type OffloadError } from '../errors.js';
import { copyInto } from '../shared-copy.js';

export const FRAME_MAGIC = 0x314c464f; // 'OFL1' read as a little-endian u32
export const COMPACT_MAGIC = 0x3143464f; // 'OFC1'
export const PREFIX_BYTES = 16;
export const MAX_META_BYTES = 64 * 1024;
/** Bulk transfers are chunked far below this; a larger frame is an attack or a bug. */
export const MAX_PAYLOAD_BYTES = 64 * 1024 * 1024;

export interface Frame {
  meta: Record<string, unknown>;
  payload: Uint8Array;
}

/** The largest frame a receiver takes now (a proxy takes far less from a peer not yet logged in). */
export interface FrameLimits {
  metaBytes: number;
  payloadBytes: number;
  /** When these limits apply, for messages (e.g. 'before login'). */
  when?: string;
}

export const FRAME_LIMITS: FrameLimits = { metaBytes: MAX_META_BYTES, payloadBytes: MAX_PAYLOAD_BYTES };

/**
 * A binary form of some metas, which the layer above gives both ends of a transport: a frame
 * whose meta it encodes travels with COMPACT_MAGIC, and a frame with that magic is decoded by it.
 * JSON costs a launch round trip four encodings and parses of about 0.5-0.9 us each.
 */
export interface MetaCodec {
  /**
   * `meta` written from byte `at` of a fresh array (the bytes before are the caller's), the array
   * cut where it ends; undefined when `meta` has no compact form (it then travels as JSON).
   */
  encode(meta: Record<string, unknown>, at: number): Uint8Array | undefined;
  /** The meta written in `bytes`, checked: any malformed byte is PROTOCOL. */
  decode(bytes: Uint8Array): Record<string, unknown>;
}

const EMPTY = new Uint8Array(0);
const decoder = new TextDecoder('utf-8', { fatal: true });
const encoder = new TextEncoder();

/** Node's Buffer where there is one (a page has none): its pool and its UTF-8 writer are the fast path. */
const NodeBuffer = (
  globalThis as {
    Buffer?: {
      allocUnsafe(size: number): Uint8Array & { write(text: string, offset: number, encoding: 'utf8'): number };
    };
  }
).Buffer;

/** An array of `size` bytes whose contents are not cleared (from Node's pool where there is one). */
export function allocUnsafe(size: number): Uint8Array {
  return NodeBuffer ? NodeBuffer.allocUnsafe(size) : new Uint8Array(size);
}

/** Writes `text` as UTF-8 into `bytes` from `at` (room for 3 bytes per unit); the bytes written. */
export function writeUtf8(bytes: Uint8Array, text: string, at: number): number {
  if (NodeBuffer && 'write' in bytes)
    return (bytes as Uint8Array & { write(text: string, offset: number, encoding: 'utf8'): number }).write(
      text,
      at,
      'utf8',
    );
  return encoder.encodeInto(text, bytes.subarray(at)).written;
}

const oversized = new WeakSet<Error>();

/** PROTOCOL for a frame whose prefix is sound but which breaks the receiver's limits. */
function tooLarge(message: string): OffloadError {
  const error = errors.protocol(message);
  oversized.add(error);
  return error;
}

/**
 * Whether `error` is the decoder's refusal of a frame over the limits: the stream was in step up
 * to it (unlike after garbage), so the receiver can still answer before it closes.
 */
export function isFrameTooLarge(error: unknown): boolean {
  return error instanceof Error && oversized.has(error);
}

/** Writes the prefix into the first PREFIX_BYTES of `head`. */
function writePrefix(head: Uint8Array, magic: number, metaBytes: number, payloadLength: number): void {
  writeU32(head, 0, magic);
  writeU32(head, 4, metaBytes);
  writeU32(head, 8, payloadLength % 2 ** 32);
  writeU32(head, 12, Math.floor(payloadLength / 2 ** 32));
}

/**
 * The prefix and meta of a frame as one array; the payload is sent after it, uncopied. The meta
 * in `codec`'s compact form when it has one, else JSON written straight into a Node Buffer cut
 * from its pool: a frame is encoded per request and per reply, and TextEncoder, a fresh
 * Uint8Array, a DataView and a BigInt cost 1.8 us a frame against 1.1.
 */
export function encodeHead(meta: Record<string, unknown>, payloadLength: number, codec?: MetaCodec): Uint8Array {
  if (!Number.isSafeInteger(payloadLength) || payloadLength < 0)
    throw errors.invalidArgument(`frame payload length must be a byte count, not ${payloadLength}`);
  if (payloadLength > MAX_PAYLOAD_BYTES)
    throw errors.invalidArgument(`frame payload of ${payloadLength} bytes exceeds ${MAX_PAYLOAD_BYTES}`);
  const compact = codec?.encode(meta, PREFIX_BYTES);
  if (compact !== undefined) {
    const metaBytes = compact.length - PREFIX_BYTES;
    if (metaBytes > MAX_META_BYTES)
      throw errors.invalidArgument(`compact frame meta of ${metaBytes} bytes exceeds ${MAX_META_BYTES}`);
    writePrefix(compact, COMPACT_MAGIC, metaBytes, payloadLength);
    return compact;
  }
  const json = JSON.stringify(meta);
  // A string of more units than the limit has more bytes too: refused before it is written anywhere.
  if (json.length > MAX_META_BYTES)
    throw errors.invalidArgument(`frame meta of at least ${json.length} bytes exceeds ${MAX_META_BYTES}`);
  // Three bytes of UTF-8 at most per UTF-16 unit.
  const head = allocUnsafe(PREFIX_BYTES + json.length * 3);
  const metaBytes = writeUtf8(head, json, PREFIX_BYTES);
  if (metaBytes > MAX_META_BYTES)
    throw errors.invalidArgument(`frame meta of ${metaBytes} bytes exceeds ${MAX_META_BYTES}`);
  writePrefix(head, FRAME_MAGIC, metaBytes, payloadLength);
  // A plain Uint8Array over the same bytes: what the contract (and a deep comparison) expects.
  return new Uint8Array(head.buffer, head.byteOffset, PREFIX_BYTES + metaBytes);
}

/** A whole frame in one buffer (tests, and transports that send messages rather than streams). */
export function encodeFrame(meta: Record<string, unknown>, payload: Uint8Array = EMPTY, codec?: MetaCodec): Uint8Array {
  const head = encodeHead(meta, payload.length, codec);
  const frame = new Uint8Array(head.length + payload.length);
  frame.set(head);
  frame.set(payload, head.length);
  return frame;
}

/** The little-endian u32 at `at`, read byte by byte: a DataView and a BigInt per frame cost twenty times as much. */
export function readU32(bytes: Uint8Array, at: number): number {
  return (bytes[at]! | (bytes[at + 1]! << 8) | (bytes[at + 2]! << 16) | (bytes[at + 3]! << 24)) >>> 0;
}

export function writeU32(bytes: Uint8Array, at: number, value: number): void {
  bytes[at] = value;
  bytes[at + 1] = value >>> 8;
  bytes[at + 2] = value >>> 16;
  bytes[at + 3] = value >>> 24;
}

/**
 * Says where a frame's payload should land, given its meta, before the payload arrives: a view
 * of exactly `length` bytes (the decoder then copies the bytes there as they come, and the
 * frame's payload is that view), or undefined for a fresh array.
 */
export type PayloadSink = (meta: Record<string, unknown>, length: number) => Uint8Array | undefined;

/**
 * Cuts a byte stream into frames. `add` buffers chunks as they arrive (any split) and `next`
 * returns the next complete frame, checking each frame's lengths against the limits in force
 * when its prefix is read (so a receiver can change them between frames); `push` does both.
 * A malformed byte throws PROTOCOL, and the decoder must not be used after that.
 */
export class FrameDecoder {
  private chunks: Uint8Array[] = [];
  /** Bytes of chunks[0] already taken: an offset, where a view per take cost two arrays a frame. */
  private head = 0;
  private buffered = 0;
  private metaLength = -1;
  private payloadLength = 0;
  /** Whether the current frame's meta is in the codec's compact form. */
  private compact = false;
  /** The current frame's meta once parsed (its payload may still be arriving). */
  private meta: Record<string, unknown> | undefined;
  private target: Uint8Array | undefined;
  private filled = 0;

  constructor(
    private readonly sink?: PayloadSink,
    private readonly limits: () => FrameLimits = () => FRAME_LIMITS,
    /** Decodes compact metas; without one, a compact frame is PROTOCOL. */
    private readonly codec: () => MetaCodec | undefined = () => undefined,
  ) {}

  /** Buffers `chunk` and returns every frame now complete. */
  push(chunk: Uint8Array): Frame[] {
    this.add(chunk);
    const frames: Frame[] = [];
    for (let frame = this.next(); frame; frame = this.next()) frames.push(frame);
    return frames;
  }

  add(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  /** The next complete frame, or undefined until more bytes arrive. */
  next(): Frame | undefined {
    if (this.metaLength < 0) {
      if (this.buffered < PREFIX_BYTES) return undefined;
      const first = this.chunks[0]!;
      if (first.length - this.head >= PREFIX_BYTES) {
        this.readPrefix(first, this.head);
        this.skip(PREFIX_BYTES);
      } else {
        this.readPrefix(this.take(PREFIX_BYTES), 0);
      }
    }
    if (this.meta === undefined) {
      if (this.buffered < this.metaLength) return undefined;
      this.meta = this.parseMeta(this.take(this.metaLength));
      const target = this.payloadLength > 0 ? this.sink?.(this.meta, this.payloadLength) : undefined;
      this.target = target?.byteLength === this.payloadLength ? target : undefined;
      this.filled = 0;
    }
    let payload: Uint8Array;
    if (this.target) {
      // Straight into the sink's view: no intermediate array for a payload split over reads.
      while (this.filled < this.payloadLength && this.buffered > 0) {
        const part = this.take(Math.min(this.chunks[0]!.length - this.head, this.payloadLength - this.filled));
        copyInto(this.target, part, this.filled);
        this.filled += part.length;
      }
      if (this.filled < this.payloadLength) return undefined;
      payload = this.target;
    } else {
      if (this.buffered < this.payloadLength) return undefined;
      payload = this.payloadLength === 0 ? EMPTY : this.take(this.payloadLength);
    }
    const frame = { meta: this.meta, payload };
    this.metaLength = -1;
    this.meta = undefined;
    this.target = undefined;
    return frame;
  }

  /**
   * Where the next bytes of the stream may be read straight to: the rest of the current frame's
   * payload in the sink's view, when nothing else is buffered (so the bytes that come next are
   * that payload's); undefined otherwise. A transport that can choose where a read lands (TCP's
   * `onread`) reads there and reports the count with `landed`: no copy on this side at all.
   */
  directTarget(): Uint8Array | undefined {
    if (this.target === undefined || this.buffered > 0 || this.filled >= this.payloadLength) return undefined;
    return this.target.subarray(this.filled);
  }

  /** `length` bytes were read into the view `directTarget` returned. */
  landed(length: number): void {
    this.filled += length;
  }

  /** Copies the bytes still buffered, so the memory they were added in may be reused. */
  ownBuffered(): void {
    if (this.buffered === 0) return;
    this.chunks = this.chunks.map((chunk, i) => chunk.slice(i === 0 ? this.head : 0));
    this.head = 0;
  }

  /** Bytes received for a frame not yet complete (a prefix already parsed counts: the frame is begun). */
  get pending(): number {
    return (
      this.buffered +
      (this.metaLength < 0 ? 0 : PREFIX_BYTES) +
      (this.meta === undefined ? 0 : this.metaLength + this.filled)
    );
  }

  /**
   * The frame being received, once its prefix is read: its bytes so far (what is buffered
   * counts) and its whole size; undefined between frames.
   */
  progress(): { received: number; total: number } | undefined {
    if (this.metaLength < 0) return undefined;
    return { received: this.pending, total: PREFIX_BYTES + this.metaLength + this.payloadLength };
  }

  /** Reads the prefix at byte `at` of `prefix`. */
  private readPrefix(prefix: Uint8Array, at: number): void {
    const magic = readU32(prefix, at);
    const compact = magic === COMPACT_MAGIC && this.codec() !== undefined;
    if (magic !== FRAME_MAGIC && !compact) {
      const foreign = foreignProtocol(prefix.subarray(at, at + PREFIX_BYTES));
      throw errors.protocol(
        `bad frame magic 0x${magic.toString(16).padStart(8, '0')} (expected 0x${FRAME_MAGIC.toString(16)}${this.codec() ? ` or 0x${COMPACT_MAGIC.toString(16)}` : ''})${foreign ? `: ${foreign}` : ''}`,
      );
    }
    const metaLength = readU32(prefix, at + 4);
    // Exact while the high word is below 2^21 (2^53 bytes); any larger is over every limit anyway.
    const high = readU32(prefix, at + 12);
    const low = readU32(prefix, at + 8);
    const payloadLength = high >= 2 ** 21 ? Infinity : high * 2 ** 32 + low;
    const limits = this.limits();
    const when = limits.when ? ` ${limits.when}` : '';
    if (metaLength === 0) throw errors.protocol('frame meta length 0 (a frame carries a meta object)');
    if (metaLength > limits.metaBytes)
      throw tooLarge(`frame meta length ${metaLength} is over the ${limits.metaBytes} bytes taken${when}`);
    if (payloadLength > limits.payloadBytes) {
      // Exact in the message whatever its size (a BigInt only here, on the way out).
      const shown = payloadLength === Infinity ? (BigInt(high) * 2n ** 32n + BigInt(low)).toString() : payloadLength;
      throw tooLarge(`frame payload length ${shown} is over the ${limits.payloadBytes} bytes taken${when}`);
    }
    this.metaLength = metaLength;
    this.payloadLength = payloadLength;
    this.compact = compact;
  }

  private parseMeta(bytes: Uint8Array): Record<string, unknown> {
    if (this.compact) return this.codec()!.decode(bytes);
    let meta: unknown;
    try {
      meta = JSON.parse(decoder.decode(bytes));
    } catch (error) {
      throw errors.protocol(`frame meta is not UTF-8 JSON: ${(error as Error).message}`);
    }
    if (typeof meta !== 'object' || meta === null || Array.isArray(meta))
      throw errors.protocol('frame meta is not a JSON object');
    return meta as Record<string, unknown>;
  }

  /** Removes `length` buffered bytes that lie in the first chunk (read there in place). */
  private skip(length: number): void {
    this.buffered -= length;
    this.head += length;
    if (this.head === this.chunks[0]!.length) {
      this.chunks.shift();
      this.head = 0;
    }
  }

  /** Removes `length` buffered bytes and returns them: a view when they lie in one chunk, else one copy. */
  private take(length: number): Uint8Array {
    const first = this.chunks[0]!;
    const start = this.head;
    if (first.length - start >= length) {
      this.skip(length);
      return first.subarray(start, start + length);
    }
    this.buffered -= length;
    const out = new Uint8Array(length);
    let filled = 0;
    while (filled < length) {
      const chunk = this.chunks[0]!;
      const part = Math.min(chunk.length - this.head, length - filled);
      out.set(chunk.subarray(this.head, this.head + part), filled);
      filled += part;
      this.head += part;
      if (this.head === chunk.length) {
        this.chunks.shift();
        this.head = 0;
      }
    }
    return out;
  }
}
