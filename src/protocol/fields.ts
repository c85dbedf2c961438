/**
 * The kinds of field a protocol message has. messages.ts declares each message as a record of
 * these, once; its TypeScript type, the proxy's decoder (decode-request.ts) and the compact form
 * of launches (compact.ts) all follow from that record. A kind says how its field is checked when
 * it arrives as JSON (each check throws PROTOCOL naming the op and the field) and, where the
 * compact form can carry it, how it is written and read as bytes.
 */
import { errors } from '../errors.js';
import type { WireGridSize } from './messages.js';
import type { CompactReader, CompactWriter } from './compact-bytes.js';
import type { Meta, WireArg, WireError } from './wire.js';

/** How a field travels in the compact form. */
export interface CompactForm<T> {
  /** The most bytes `value` can take (0 for a value of the wrong type: `write` refuses it). */
  maxBytes(value: unknown): number;
  /** False when the value cannot be written (the frame then travels as JSON). */
  write(writer: CompactWriter, value: unknown): boolean;
  read(reader: CompactReader, what: string): T;
}

/** One field of a message: its value's type `T`, and whether it may be absent. */
export interface Field<T, Optional extends boolean = boolean> {
  readonly optional: Optional;
  /** The field of a JSON meta, checked; an optional field that is absent reads as undefined (a flag as false). */
  read(meta: Meta, name: string): T;
  readonly compact?: CompactForm<T>;
}

/** A field the compact form carries. */
export interface CompactField<T, Optional extends boolean = boolean> extends Field<T, Optional> {
  readonly compact: CompactForm<T>;
}

/** A message's fields (besides `op` and `id`), by name. */
export type Fields = Record<string, Field<any, boolean>>; // eslint-disable-line @typescript-eslint/no-explicit-any

type ValueOf<F> = F extends Field<infer T, boolean> ? T : never;
type RequiredNames<S> = { [K in keyof S]: S[K] extends Field<unknown, true> ? never : K }[keyof S];
type OptionalNames<S> = Exclude<keyof S, RequiredNames<S>>;

/** The TypeScript type of a message declared as `S`: its fields, the optional ones with `?`. */
export type FieldsOf<S> = { [K in RequiredNames<S>]: ValueOf<S[K]> } & {
  [K in OptionalNames<S>]?: ValueOf<S[K]>;
} extends infer O
  ? { [K in keyof O]: O[K] }
  : never;

/** A non-negative safe integer (ids, sizes, offsets). */
export const uint: CompactField<number, false> = {
  optional: false,
  read: (meta, name) => meta.uint(name),
  compact: {
    maxBytes: () => 8,
    write: (writer, value) => writer.u53(value),
    read: (reader, what) => reader.u53(what),
  },
};

/** A string of at most 4,096 characters. */
export const string: CompactField<string, false> = {
  optional: false,
  read: (meta, name) => meta.string(name),
  compact: {
    maxBytes: (value) => (typeof value === 'string' ? 2 + 3 * value.length : 0),
    write: (writer, value) => typeof value === 'string' && writer.name(value),
    read: (reader, what) => reader.name(what),
  },
};

/** A grid size: a number, or 1 to 3 of them (compact: its rank, 0 for one number, then the extents). */
export const gridSize: CompactField<WireGridSize, false> = {
  optional: false,
  read: (meta, name) => meta.gridSize(name),
  compact: {
    maxBytes: () => 1 + 3 * 8,
    write(writer, value) {
      if (typeof value === 'number') {
        writer.u8(0);
        return writer.u53(value);
      }
      if (!Array.isArray(value) || value.length < 1 || value.length > 3) return false;
      writer.u8(value.length);
      for (const extent of value) if (!writer.u53(extent)) return false;
      return true;
    },
    read(reader, what) {
      const rank = reader.u8(what);
      if (rank === 0) return reader.u53(what);
      if (rank > 3) throw errors.protocol(`compact launch meta: ${what} has rank ${rank} (at most 3)`);
      const extents: number[] = [];
      for (let i = 0; i < rank; i++) extents.push(reader.u53(what));
      return extents as WireGridSize;
    },
  },
};

const ARG_NUMBER = 0;
const ARG_BUFFER = 1;
const ARG_I64 = 2;
/** The longest i64 in decimal: '-9223372036854775808'. */
const MAX_I64_DIGITS = 20;

/**
 * A kernel's arguments. Compact: a u16 count, then each as
 *   u8 0 | f64 (a number, every bit of it: NaN, the infinities and -0, which JSON cannot write)
 *   u8 1 | u53 buffer | u53 offset
 *   u8 2 | u8 n + n ASCII characters (an i64 in decimal)
 */
export const args: CompactField<WireArg[], false> = {
  optional: false,
  read: (meta, name) => meta.args(name),
  compact: {
    maxBytes: (value) => (Array.isArray(value) ? 2 + (2 + MAX_I64_DIGITS) * value.length : 0),
    write(writer, value) {
      if (!Array.isArray(value) || value.length >= 2 ** 16) return false;
      writer.u16(value.length);
      for (const arg of value as unknown[]) {
        if (typeof arg === 'number') {
          writer.u8(ARG_NUMBER);
          writer.f64(arg);
          continue;
        }
        if (typeof arg !== 'object' || arg === null) return false;
        if ('i64' in arg) {
          const { i64 } = arg;
          if (typeof i64 !== 'string' || i64.length > MAX_I64_DIGITS) return false;
          writer.u8(ARG_I64);
          if (!writer.ascii(i64)) return false;
          continue;
        }
        const { buffer, offset } = arg as { buffer?: unknown; offset?: unknown };
        writer.u8(ARG_BUFFER);
        if (!(writer.u53(buffer) && writer.u53(offset ?? 0))) return false;
      }
      return true;
    },
    read(reader) {
      const count = reader.u16('argument count');
      const values: WireArg[] = [];
      for (let index = 0; index < count; index++) {
        const what = `argument ${index}`;
        const tag = reader.u8(what);
        if (tag === ARG_NUMBER) values.push(reader.f64(what));
        else if (tag === ARG_BUFFER) values.push({ buffer: reader.u53(what), offset: reader.u53(what) });
        else if (tag === ARG_I64) values.push({ i64: reader.ascii(what) });
        else throw errors.protocol(`compact launch meta: ${what} has the unknown kind ${tag}`);
      }
      return values;
    },
  },
};

/** An error a client reports (a code of ours and a message). */
export const wireError: Field<WireError | undefined, true> = {
  optional: true,
  read: (meta, name) => meta.error(name),
};

/** A boolean that is true only when the sender wrote `true` (absent or anything else: false). */
export const flag: Field<boolean, true> = {
  optional: true,
  read: (meta, name) => meta.frame.meta[name] === true,
};

/** Up to `max` bytes as an array of integers 0..255. */
export const byteArray = (max: number): Field<number[], false> => ({
  optional: false,
  read: (meta, name) => [...meta.bytes(name, max)],
});

/**
 * An object whose fields the receiver checks itself, typed `T` once checked (an image's
 * description: the image registry reads it field by field).
 */
export const object = <T>(): Field<T, false> => ({
  optional: false,
  read: (meta, name) => meta.object(name) as T,
});

/** An array of at most 1,024 items the receiver checks itself (as `object`). */
export const array = <T>(): Field<readonly T[], false> => ({
  optional: false,
  read: (meta, name) => meta.array(name) as T[],
});

/** `inner`, or absent (read as undefined; its compact form, when it has one, as a presence bit). */
export function optional<T>(inner: CompactField<T, false>): CompactField<T, true>;
export function optional<T>(inner: Field<T, false>): Field<T, true>;
export function optional<T>(inner: Field<T, false>): Field<T, true> {
  return {
    optional: true,
    read: (meta, name) => (meta.frame.meta[name] === undefined ? (undefined as T) : inner.read(meta, name)),
    ...(inner.compact ? { compact: inner.compact } : {}),
  };
}
