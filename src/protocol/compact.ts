/**
 * The compact form of the two frames of a launch round trip: the `launch` request and a reply
 * that carries nothing but its id. They are most of the frames a launch-heavy program sends,
 * and JSON cost each a stringify and a parse (0.5-0.9 us apiece, more on a cold cache); here
 * each field is a fixed-size number. Every other frame travels as JSON, and so do a reply with
 * any field besides its id and a launch with a value this form cannot hold (a launch's fields
 * are all carried: a new one does not compile until it is). Both ends set this codec on their
 * transport once the hello agreed on it (`Transport.metaCodec`); the frame's magic says which
 * form its meta is in.
 *
 * Layout, little-endian. A u53 is an integer below 2^53 as two u32s, the low one first:
 *   reply:   u8 1 | u53 id
 *   launch:  u8 2 | u8 flags (1: timeoutMs, 2: teamMemoryBytes) | u8 teams rank | u8 threads rank
 *            | u53 id | u53 queue | u53 image | u53 x max(rank, 1) teams | the same for threads
 *            | [u53 timeoutMs] | [u53 teamMemoryBytes] | u16 n + n bytes of kernel name (UTF-8)
 *            | u16 argument count | arguments
 *   argument: u8 0 | f64 (a number, every bit of it: NaN, the infinities and -0, which JSON cannot write)
 *           | u8 1 | u53 buffer | u53 offset
 *           | u8 2 | u8 n + n ASCII characters (an i64 in decimal)
 * A rank of 0 is a grid size written as one number, 1 to 3 an array of that many. The decoder
 * checks every length against the bytes it has and wants all of them used; the request's fields
 * are then checked by decodeRequest as a JSON request's are.
 */
import { errors } from '../errors.js';
import { allocUnsafe, readU32, writeU32, type MetaCodec } from '../transport/frame.js';
import type { Requests } from './messages.js';
import type { WireArg } from './wire.js';

const REPLY = 1;
const LAUNCH = 2;
const HAS_TIMEOUT = 1;
const HAS_TEAM_MEMORY = 2;
const ARG_NUMBER = 0;
const ARG_BUFFER = 1;
const ARG_I64 = 2;
/** The longest i64 in decimal: '-9223372036854775808'. */
const MAX_I64_DIGITS = 20;
/** Bytes of a launch besides its grid, kernel name and arguments. */
const LAUNCH_FIXED_BYTES = 4 + 3 * 8 + 2 * 8 + 2 + 2;
const GRID_BYTES = 3 * 8;
/** The most bytes one argument takes (an i64 of 20 characters with its tag and length). */
const ARG_MAX_BYTES = 2 + MAX_I64_DIGITS;

/** The f64 <-> bytes conversion, little-endian whatever the platform's order. */
const f64 = new Float64Array(1);
const f64Bytes = new Uint8Array(f64.buffer);
const littleEndian = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

const isU53 = (value: unknown): value is number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;

/** The last kernel name written and its UTF-8, and the last one read and its bytes: a program launches the same few kernels over and over. */
let lastName = '';
let lastNameUtf8: Uint8Array = new Uint8Array(0);
let lastDecodedName = '';
let lastNameBytes: Uint8Array = new Uint8Array(0);

/** Writes into a fresh Node Buffer (cut from its pool, and with a UTF-8 writer). */
class Writer {
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

  u32(value: number): void {
    writeU32(this.bytes, this.at, value);
    this.at += 4;
  }

  /** False (nothing written) when `value` is not an integer in 0..2^53-1. */
  u53(value: unknown): boolean {
    if (!isU53(value)) return false;
    this.u32(value >>> 0);
    this.u32(Math.floor(value / 2 ** 32));
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

  /** A kernel name, UTF-8 after its length in two bytes; false when it is longer. */
  name(name: string): boolean {
    if (name !== lastName) {
      const encoded = new TextEncoder().encode(name);
      if (encoded.length >= 2 ** 16) return false;
      lastName = name;
      lastNameUtf8 = encoded;
    }
    const { bytes } = this;
    const length = lastNameUtf8.length;
    bytes[this.at] = length;
    bytes[this.at + 1] = length >>> 8;
    this.at += 2;
    for (let i = 0; i < length; i++) bytes[this.at++] = lastNameUtf8[i]!;
    return true;
  }

  /** The bytes written, as a plain Uint8Array (what the transport contract expects). */
  done(): Uint8Array {
    return new Uint8Array(this.bytes.buffer, this.bytes.byteOffset, this.at);
  }
}

/** A grid size: its rank, then its extents; false when it is not 1 to 3 non-negative integers. */
function writeGrid(writer: Writer, size: unknown, rankAt: number): boolean {
  if (typeof size === 'number') {
    writer.bytes[rankAt] = 0;
    return writer.u53(size);
  }
  if (!Array.isArray(size) || size.length < 1 || size.length > 3) return false;
  writer.bytes[rankAt] = size.length;
  for (const extent of size) if (!writer.u53(extent)) return false;
  return true;
}

function writeArg(writer: Writer, arg: WireArg): boolean {
  if (typeof arg === 'number') {
    writer.u8(ARG_NUMBER);
    writer.f64(arg);
    return true;
  }
  if (typeof arg !== 'object' || arg === null) return false;
  if ('i64' in arg) {
    if (typeof arg.i64 !== 'string' || arg.i64.length > MAX_I64_DIGITS) return false;
    writer.u8(ARG_I64);
    return writer.ascii(arg.i64);
  }
  writer.u8(ARG_BUFFER);
  return writer.u53(arg.buffer) && writer.u53(arg.offset ?? 0);
}

/** The fields of a launch this form carries, besides `op` and `id`. */
type Carried = 'queue' | 'image' | 'kernel' | 'teams' | 'threads' | 'args' | 'timeoutMs' | 'teamMemoryBytes';
/**
 * Does not compile once a launch has a field this form does not carry: checked here, not per
 * frame (looking at every field of every launch cost 50 ns of its 440).
 */
const carriesEveryField: [keyof Requests['launch']] extends [Carried]
  ? [Carried] extends [keyof Requests['launch']]
    ? true
    : never
  : never = true;
void carriesEveryField;

function encodeLaunch(meta: Record<string, unknown>, at: number): Uint8Array | undefined {
  const { kernel, args, timeoutMs, teamMemoryBytes } = meta;
  if (typeof kernel !== 'string' || !Array.isArray(args) || args.length >= 2 ** 16) return undefined;
  const bound = LAUNCH_FIXED_BYTES + 2 * GRID_BYTES + 3 * kernel.length + ARG_MAX_BYTES * args.length;
  const writer = new Writer(allocUnsafe(at + bound), at);
  writer.u8(LAUNCH);
  writer.u8((timeoutMs === undefined ? 0 : HAS_TIMEOUT) | (teamMemoryBytes === undefined ? 0 : HAS_TEAM_MEMORY));
  const ranksAt = writer.at;
  writer.at += 2;
  if (!(writer.u53(meta.id) && writer.u53(meta.queue) && writer.u53(meta.image))) return undefined;
  if (!(writeGrid(writer, meta.teams, ranksAt) && writeGrid(writer, meta.threads, ranksAt + 1))) return undefined;
  if (timeoutMs !== undefined && !writer.u53(timeoutMs)) return undefined;
  if (teamMemoryBytes !== undefined && !writer.u53(teamMemoryBytes)) return undefined;
  if (!writer.name(kernel)) return undefined;
  writer.u8(args.length);
  writer.u8(args.length >>> 8);
  for (const arg of args as WireArg[]) if (!writeArg(writer, arg)) return undefined;
  return writer.done();
}

function encodeReply(meta: Record<string, unknown>, at: number): Uint8Array | undefined {
  for (const field in meta) if (field !== 'op' && field !== 'id') return undefined;
  const writer = new Writer(allocUnsafe(at + 9), at);
  writer.u8(REPLY);
  return writer.u53(meta.id) ? writer.done() : undefined;
}

/** Reads a compact meta; every read past the end, or a byte left over, is PROTOCOL. */
class Reader {
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

  /** A kernel name as Writer.name writes it (the last one decoded is kept: it usually comes again). */
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

  /** ASCII text as Writer.ascii writes it. */
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

const utf8 = new TextDecoder('utf-8', { fatal: true });

function readGrid(reader: Reader, rank: number, what: string): number | number[] {
  if (rank === 0) return reader.u53(what);
  if (rank > 3) throw errors.protocol(`compact launch meta: ${what} has rank ${rank} (at most 3)`);
  const extents: number[] = [];
  for (let i = 0; i < rank; i++) extents.push(reader.u53(what));
  return extents;
}

function readArgs(reader: Reader): WireArg[] {
  const count = reader.u16('argument count');
  const args: WireArg[] = [];
  for (let index = 0; index < count; index++) {
    const what = `argument ${index}`;
    const tag = reader.u8(what);
    if (tag === ARG_NUMBER) args.push(reader.f64(what));
    else if (tag === ARG_BUFFER) args.push({ buffer: reader.u53(what), offset: reader.u53(what) });
    else if (tag === ARG_I64) args.push({ i64: reader.ascii(what) });
    else throw errors.protocol(`compact launch meta: ${what} has the unknown kind ${tag}`);
  }
  return args;
}

function decodeLaunch(reader: Reader): Record<string, unknown> {
  const flags = reader.u8('flags');
  if (flags > (HAS_TIMEOUT | HAS_TEAM_MEMORY)) throw errors.protocol(`compact launch meta: unknown flags ${flags}`);
  const teamsRank = reader.u8('teams');
  const threadsRank = reader.u8('threads');
  const meta = {
    op: 'launch',
    id: reader.u53('id'),
    queue: reader.u53('queue'),
    image: reader.u53('image'),
    teams: readGrid(reader, teamsRank, 'teams'),
    threads: readGrid(reader, threadsRank, 'threads'),
    timeoutMs: flags & HAS_TIMEOUT ? reader.u53('timeoutMs') : undefined,
    teamMemoryBytes: flags & HAS_TEAM_MEMORY ? reader.u53('teamMemoryBytes') : undefined,
    kernel: reader.name('kernel'),
    args: readArgs(reader),
  };
  reader.end('launch');
  return meta;
}

export const compactMeta: MetaCodec = {
  encode(meta, at) {
    if (meta.op === 'launch') return encodeLaunch(meta, at);
    if (meta.op === 'reply') return encodeReply(meta, at);
    return undefined;
  },
  decode(bytes) {
    const reader = new Reader(bytes);
    const kind = reader.u8('kind');
    if (kind === LAUNCH) return decodeLaunch(reader);
    if (kind !== REPLY) throw errors.protocol(`compact frame meta of unknown kind ${kind}`);
    const meta = { op: 'reply', id: reader.u53('id') };
    reader.end('reply');
    return meta;
  },
};
