/**
 * The byte reader and writer of the compact form (protocol/compact.ts), apart from the layout so
 * that each field kind (protocol/fields.ts) can say how it is written. Little-endian; a u53 is an
 * integer below 2^53 as two u32s, the low one first.
 */
import { errors } from '../errors.js';
import { readU32, writeU32 } from '../transport/frame.js';

/** The f64 <-> bytes conversion, little-endian whatever the platform's order. */
const f64 = new Float64Array(1);
const f64Bytes = new Uint8Array(f64.buffer);
const littleEndian = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

const isU53 = (value: unknown): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;

/** The last name written and its UTF-8, and the last one read and its bytes: a program launches the same few kernels over and over. */
let lastName = '';
let lastNameUtf8: Uint8Array = new Uint8Array(0);
let lastDecodedName = '';
let lastNameBytes: Uint8Array = new Uint8Array(0);

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Writes into a fresh array (a Node Buffer cut from its pool where there is one). Each write that can refuse its value returns false, having written nothing useful. */
export class CompactWriter {
  at: number;

  constructor(
    readonly bytes: Uint8Array,
    at: number,
  ) {
    this.at = at;
  }

  u8(value: number): void {
    this.bytes[this.at++] = value;
  }

  u16(value: number): void {
    this.bytes[this.at++] = value;
    this.bytes[this.at++] = value >>> 8;
  }

  /** False when `value` is not an integer in 0..2^53-1. */
  u53(value: unknown): boolean {
    if (!isU53(value)) return false;
    writeU32(this.bytes, this.at, value >>> 0);
    writeU32(this.bytes, this.at + 4, Math.floor(value / 2 ** 32));
    this.at += 8;
    return true;
  }

  f64(value: number): void {
    f64[0] = value;
    for (let i = 0; i < 8; i++) this.bytes[this.at++] = f64Bytes[littleEndian ? i : 7 - i]!;
  }

  /** ASCII `text` after its length in one byte; false when it is longer or not ASCII. */
  ascii(text: string): boolean {
    if (text.length >= 2 ** 8) return false;
    this.bytes[this.at++] = text.length;
    for (let i = 0; i < text.length; i++) {
      const unit = text.charCodeAt(i);
      if (unit > 0x7f) return false;
      this.bytes[this.at++] = unit;
    }
    return true;
  }

  /** A name, UTF-8 after its length in two bytes; false when it is longer. */
  name(name: string): boolean {
    if (name !== lastName) {
      const encoded = new TextEncoder().encode(name);
      if (encoded.length >= 2 ** 16) return false;
      lastName = name;
      lastNameUtf8 = encoded;
    }
    const length = lastNameUtf8.length;
    this.u16(length);
    for (let i = 0; i < length; i++) this.bytes[this.at++] = lastNameUtf8[i]!;
    return true;
  }

  /** The bytes written, as a plain Uint8Array (what the transport contract expects). */
  done(): Uint8Array {
    return new Uint8Array(this.bytes.buffer, this.bytes.byteOffset, this.at);
  }
}

/** Reads a compact meta; every read past the end, or a byte left over, is PROTOCOL. */
export class CompactReader {
  private at = 0;

  constructor(private readonly bytes: Uint8Array) {}

  private need(count: number, what: string): number {
    const at = this.at;
    if (at + count > this.bytes.length)
      throw errors.protocol(`compact frame meta of ${this.bytes.length} bytes ends inside its ${what} (at byte ${at})`);
    this.at = at + count;
    return at;
  }

  u8(what: string): number {
    return this.bytes[this.need(1, what)]!;
  }

  u16(what: string): number {
    const at = this.need(2, what);
    return this.bytes[at]! | (this.bytes[at + 1]! << 8);
  }

  u53(what: string): number {
    const at = this.need(8, what);
    const high = readU32(this.bytes, at + 4);
    if (high >= 2 ** 21) throw errors.protocol(`compact frame meta: ${what} is not below 2^53`);
    return high * 2 ** 32 + readU32(this.bytes, at);
  }

  f64(what: string): number {
    const at = this.need(8, what);
    for (let i = 0; i < 8; i++) f64Bytes[littleEndian ? i : 7 - i] = this.bytes[at + i]!;
    return f64[0]!;
  }

  /** A name as CompactWriter.name writes it (the last one decoded is kept: it usually comes again). */
  name(what: string): string {
    const length = this.u16(what);
    const at = this.need(length, what);
    const { bytes } = this;
    if (length === lastNameBytes.length) {
      let same = true;
      for (let i = 0; i < length && same; i++) same = bytes[at + i] === lastNameBytes[i];
      if (same) return lastDecodedName;
    }
    const slice = bytes.slice(at, at + length);
    try {
      lastDecodedName = utf8.decode(slice);
    } catch {
      throw errors.protocol(`compact frame meta: ${what} is not UTF-8`);
    }
    lastNameBytes = slice;
    return lastDecodedName;
  }

  /** ASCII text as CompactWriter.ascii writes it. */
  ascii(what: string): string {
    const length = this.u8(what);
    const at = this.need(length, what);
    let text = '';
    for (let i = at; i < at + length; i++) {
      const unit = this.bytes[i]!;
      if (unit > 0x7f) throw errors.protocol(`compact frame meta: ${what} is not ASCII`);
      text += String.fromCharCode(unit);
    }
    return text;
  }

  end(what: string): void {
    if (this.at !== this.bytes.length)
      throw errors.protocol(`compact ${what} meta has ${this.bytes.length - this.at} bytes after its end`);
  }
}
