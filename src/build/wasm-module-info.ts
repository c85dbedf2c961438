/**
 * Reads the few facts the build checks about a compiled wasm module straight from its binary:
 * imports (with memory limits), exports, active data segments and whether it has a start
 * function. Everything else is skipped.
 */
import { errors } from '../errors.js';

export type WasmExternKind = 'function' | 'table' | 'memory' | 'global' | 'tag';

/** Limits of an imported memory, in 64 KiB pages. */
export interface MemoryLimits {
  minimum: number;
  maximum: number | undefined;
  shared: boolean;
}

export interface WasmImport {
  module: string;
  name: string;
  kind: WasmExternKind;
  /** Present for memory imports. */
  memory?: MemoryLimits;
}

export interface WasmExport {
  name: string;
  kind: WasmExternKind;
  /** Index in the module's space of that kind (for functions: imported functions first). */
  index: number;
}

/** An active data segment: `size` bytes written at byte address `offset` on instantiation. */
export interface DataSegment {
  offset: number;
  size: number;
}

export interface WasmModuleInfo {
  imports: WasmImport[];
  exports: WasmExport[];
  /** Active segments only; passive ones write nothing on their own. */
  dataSegments: DataSegment[];
  /**
   * True when the module has a start section: a function that runs on every instantiation,
   * before any export can be called (AssemblyScript emits one for top-level code).
   */
  hasStart: boolean;
  /** The module's own globals (imported ones not included), in index order after the imported. */
  globals: WasmGlobal[];
}

/** A global the module defines: whether it is mutable, and its value when it is an i32 constant. */
export interface WasmGlobal {
  mutable: boolean;
  i32: number | undefined;
}

/**
 * The exported immutable i32 globals: what AssemblyScript makes of `export const name = <static
 * data>` (a module-level array): the address of data in the image's static range, by name.
 */
export function exportedAddresses(info: WasmModuleInfo): Map<string, number> {
  const imported = info.imports.filter((imp) => imp.kind === 'global').length;
  const addresses = new Map<string, number>();
  for (const exp of info.exports) {
    if (exp.kind !== 'global') continue;
    const global = info.globals[exp.index - imported];
    if (global && !global.mutable && global.i32 !== undefined) addresses.set(exp.name, global.i32 >>> 0);
  }
  return addresses;
}

const EXTERN_KINDS: readonly WasmExternKind[] = ['function', 'table', 'memory', 'global', 'tag'];
const SECTION_IMPORT = 2;
const SECTION_GLOBAL = 6;
const SECTION_EXPORT = 7;
const SECTION_START = 8;
const SECTION_DATA = 11;
const OP_I32_CONST = 0x41;
const OP_END = 0x0b;

/**
 * Parses `bytes` as a wasm binary module.
 * @throws OffloadError INCOMPATIBLE_IMAGE when the bytes are not a well-formed module, or use a
 *   data segment offset other than a constant i32 (AssemblyScript emits only those).
 */
export function readWasmModuleInfo(bytes: Uint8Array): WasmModuleInfo {
  const reader = new ByteReader(bytes);
  if (reader.u32le() !== 0x6d736100) throw malformed('bad magic');
  if (reader.u32le() !== 1) throw malformed('unsupported binary version');
  const info: WasmModuleInfo = { imports: [], exports: [], dataSegments: [], hasStart: false, globals: [] };
  while (!reader.atEnd()) {
    const id = reader.byte();
    const size = reader.leb();
    const section = reader.sub(size);
    if (id === SECTION_IMPORT) info.imports = section.vector(readImport);
    else if (id === SECTION_EXPORT) info.exports = section.vector(readExport);
    else if (id === SECTION_GLOBAL) info.globals = section.vector(readGlobal);
    else if (id === SECTION_START) info.hasStart = true;
    else if (id === SECTION_DATA) info.dataSegments = section.vector(readDataSegment).filter((s) => s !== null);
  }
  return info;
}

function readImport(r: ByteReader): WasmImport {
  const module = r.name();
  const name = r.name();
  const kind = r.externKind();
  switch (kind) {
    case 'function':
      r.leb();
      return { module, name, kind };
    case 'table':
      r.byte();
      r.limits();
      return { module, name, kind };
    case 'memory':
      return { module, name, kind, memory: r.limits() };
    case 'global':
      r.byte();
      r.byte();
      return { module, name, kind };
    case 'tag':
      r.byte();
      r.leb();
      return { module, name, kind };
  }
}

function readGlobal(r: ByteReader): WasmGlobal {
  r.byte(); // value type
  const mutable = r.byte() === 1;
  const op = r.byte();
  let i32: number | undefined;
  if (op === OP_I32_CONST) i32 = r.sleb32();
  else if (op === 0x42) r.skipSleb();
  else if (op === 0x43) r.skip(4);
  else if (op === 0x44) r.skip(8);
  else if (op === 0x23 || op === 0xd2)
    r.leb(); // global.get, ref.func
  else if (op === 0xd0)
    r.byte(); // ref.null
  else if (op === 0xfd) {
    r.leb(); // v128.const
    r.skip(16);
  } else throw malformed(`global initialiser opcode 0x${op.toString(16)} is not supported`);
  if (r.byte() !== OP_END) throw malformed('global initialiser is not one constant');
  return { mutable, i32 };
}

function readExport(r: ByteReader): WasmExport {
  const name = r.name();
  const kind = r.externKind();
  const index = r.leb();
  return { name, kind, index };
}

function readDataSegment(r: ByteReader): DataSegment | null {
  const flags = r.leb();
  if (flags === 1) {
    r.skip(r.leb());
    return null;
  }
  if (flags === 2) r.leb();
  else if (flags !== 0) throw malformed(`unknown data segment flags ${flags}`);
  if (r.byte() !== OP_I32_CONST) throw malformed('data segment offset is not an i32 constant');
  const offset = r.sleb32() >>> 0;
  if (r.byte() !== OP_END) throw malformed('data segment offset is not an i32 constant');
  const size = r.leb();
  r.skip(size);
  return { offset, size };
}

export function malformed(what: string) {
  return errors.incompatibleImage(`malformed wasm module: ${what}`);
}

/** A bounds-checked cursor over a byte range. */
export class ByteReader {
  private pos: number;

  constructor(
    private readonly bytes: Uint8Array,
    start = 0,
    private readonly end = bytes.length,
  ) {
    this.pos = start;
  }

  atEnd(): boolean {
    return this.pos >= this.end;
  }

  /** Where this reader stands, as an index into the whole byte array. */
  offset(): number {
    return this.pos;
  }

  remaining(): number {
    return this.end - this.pos;
  }

  byte(): number {
    if (this.pos >= this.end) throw malformed('unexpected end');
    return this.bytes[this.pos++]!;
  }

  u32le(): number {
    return (this.byte() | (this.byte() << 8) | (this.byte() << 16) | (this.byte() << 24)) >>> 0;
  }

  /** Unsigned LEB128 of up to 64 bits, exact up to 2^53. */
  leb(): number {
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      const b = this.byte();
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return result;
      scale *= 128;
    }
    throw malformed('LEB128 number too long');
  }

  sleb32(): number {
    let result = 0;
    let shift = 0;
    for (let i = 0; i < 5; i++) {
      const b = this.byte();
      result |= (b & 0x7f) << shift;
      shift += 7;
      if ((b & 0x80) === 0) return shift < 32 && (b & 0x40) !== 0 ? result | (-1 << shift) : result;
    }
    throw malformed('LEB128 number too long');
  }

  /** Signed LEB128 of up to 64 bits, skipped (its value is not needed). */
  skipSleb(): void {
    for (let i = 0; i < 10; i++) if ((this.byte() & 0x80) === 0) return;
    throw malformed('LEB128 number too long');
  }

  skip(count: number): void {
    if (count > this.end - this.pos) throw malformed('unexpected end');
    this.pos += count;
  }

  /** A reader over the next `size` bytes; this reader moves past them. */
  sub(size: number): ByteReader {
    const start = this.pos;
    this.skip(size);
    return new ByteReader(this.bytes, start, start + size);
  }

  name(): string {
    const size = this.leb();
    const start = this.pos;
    this.skip(size);
    return new TextDecoder().decode(this.bytes.subarray(start, start + size));
  }

  externKind(): WasmExternKind {
    const code = this.byte();
    const kind = EXTERN_KINDS[code];
    if (kind === undefined) throw malformed(`unknown external kind ${code}`);
    return kind;
  }

  limits(): MemoryLimits {
    const flags = this.byte();
    const minimum = this.leb();
    const maximum = flags & 1 ? this.leb() : undefined;
    return { minimum, maximum, shared: (flags & 2) !== 0 };
  }

  vector<T>(readItem: (r: ByteReader) => T): T[] {
    const count = this.leb();
    const items: T[] = [];
    for (let i = 0; i < count; i++) items.push(readItem(this));
    return items;
  }
}
