/**
 * What the build changes in a module linked by wasm-ld (C, C++, Rust kernels) so that it meets
 * the kernel ABI, and the function names it reads for messages.
 *
 * Why edit the binary instead of asking the linker: wasm-ld makes a shared memory only for
 * objects compiled with the atomics feature (Debian's Rust core library is not), and then turns
 * every data segment passive with a start function that copies them; the kernel ABI wants
 * active segments at fixed addresses and no start function. So the module is linked over a
 * plain imported memory and its import is declared shared with the ABI's maximum here: the
 * code is the same (plain loads and stores over a shared memory are valid wasm).
 */
import { MAX_PAGES } from '../image/wasm-abi.js';
import { ByteReader, malformed } from './wasm-module-info.js';

const SECTION_CUSTOM = 0;
const SECTION_IMPORT = 2;
const SECTION_EXPORT = 7;
const KIND_FUNCTION = 0;
const KIND_TABLE = 1;
const KIND_MEMORY = 2;
const KIND_GLOBAL = 3;
const NAME_FUNCTIONS = 1;

/**
 * `bytes` with its `env.memory` import made shared with maximum MAX_PAGES, its exports cut to
 * the functions named in `kernels`, and its custom sections but `name` dropped (the producers
 * and target features say nothing a device needs).
 */
export function toKernelModule(bytes: Uint8Array, kernels: ReadonlySet<string>): Uint8Array {
  const out: number[] = [...bytes.subarray(0, 8)];
  const reader = new ByteReader(bytes, 8);
  while (!reader.atEnd()) {
    const start = reader.offset();
    const id = reader.byte();
    const size = reader.leb();
    const section = reader.sub(size);
    const end = start + 1 + lebLength(size) + size;
    if (id === SECTION_CUSTOM) {
      if (section.name() === 'name') out.push(...bytes.subarray(start, end));
    } else if (id === SECTION_IMPORT) pushSection(out, id, importSection(bytes, section));
    else if (id === SECTION_EXPORT) pushSection(out, id, exportSection(bytes, section, kernels));
    else out.push(...bytes.subarray(start, end));
  }
  return Uint8Array.from(out);
}

/** Function names from the module's `name` section, by function index (imports first). */
export function functionNames(bytes: Uint8Array): Map<number, string> {
  const names = new Map<number, string>();
  const reader = new ByteReader(bytes, 8);
  while (!reader.atEnd()) {
    const id = reader.byte();
    const section = reader.sub(reader.leb());
    if (id !== SECTION_CUSTOM || section.name() !== 'name') continue;
    while (!section.atEnd()) {
      const kind = section.byte();
      const sub = section.sub(section.leb());
      if (kind !== NAME_FUNCTIONS) continue;
      for (let count = sub.leb(), i = 0; i < count; i++) {
        const index = sub.leb();
        names.set(index, sub.name());
      }
    }
  }
  return names;
}

function importSection(bytes: Uint8Array, section: ByteReader): number[] {
  const count = section.leb();
  const out = leb(count);
  for (let i = 0; i < count; i++) {
    const start = section.offset();
    const module = section.name();
    const name = section.name();
    const kind = section.byte();
    if (kind === KIND_MEMORY) {
      const limitsAt = section.offset();
      const limits = section.limits();
      if (module === 'env' && name === 'memory') {
        out.push(...bytes.subarray(start, limitsAt));
        out.push(0x03, ...leb(limits.minimum), ...leb(MAX_PAGES));
        continue;
      }
    } else if (kind === KIND_FUNCTION) section.leb();
    else if (kind === KIND_TABLE) {
      section.byte();
      section.limits();
    } else if (kind === KIND_GLOBAL) {
      section.byte();
      section.byte();
    } else throw malformed(`import kind ${kind}`);
    out.push(...bytes.subarray(start, section.offset()));
  }
  return out;
}

function exportSection(bytes: Uint8Array, section: ByteReader, kernels: ReadonlySet<string>): number[] {
  const kept: number[][] = [];
  for (let count = section.leb(), i = 0; i < count; i++) {
    const start = section.offset();
    const name = section.name();
    const kind = section.byte();
    section.leb();
    if (kind === KIND_FUNCTION && kernels.has(name)) kept.push([...bytes.subarray(start, section.offset())]);
  }
  return [...leb(kept.length), ...kept.flat()];
}

function pushSection(out: number[], id: number, body: number[]): void {
  out.push(id, ...leb(body.length), ...body);
}

function leb(value: number): number[] {
  const out: number[] = [];
  do {
    let byte = value % 128;
    value = Math.floor(value / 128);
    if (value > 0) byte |= 0x80;
    out.push(byte);
  } while (value > 0);
  return out;
}

function lebLength(value: number): number {
  return leb(value).length;
}
