/**
 * Hand-assembled wasm images for the tests that treat images as hostile input: the smallest
 * module that looks like a built image, plus what an attacker would add (data segments
 * anywhere, a start function, a segment address that is not a constant, any kernel code).
 */
import { encodeBundle } from '../../src/image/bundle.js';
import { STATIC_WINDOW_START, WASM_TRIPLE } from '../../src/image/wasm-abi.js';

// A tiny wasm assembler: just what a hostile image needs.
function leb(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    out.push(byte);
  } while (n > 0);
  return out;
}
function sleb32(n: number): number[] {
  const out: number[] = [];
  for (n |= 0; ;) {
    const byte = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (byte & 0x40) === 0) || (n === -1 && (byte & 0x40) !== 0)) return [...out, byte];
    out.push(byte | 0x80);
  }
}
function name(text: string): number[] {
  const bytes = [...new TextEncoder().encode(text)];
  return [...leb(bytes.length), ...bytes];
}
const vec = (items: number[][]) => [...leb(items.length), ...items.flat()];
const section = (id: number, body: number[]) => [id, ...leb(body.length), ...body];

export interface HostileModule {
  /** Active data segments: `size` bytes of 0xAA at `offset`. */
  data?: { offset: number; size: number }[];
  /** A start function: one that returns, or one that loops forever. */
  start?: 'returns' | 'loops';
  /** A data segment whose address is an imported global, not a constant. */
  globalOffset?: boolean;
  /** The instructions of kernel `k` (without its final `end`); default none. */
  body?: number[];
}

/**
 * A module as images normally look (a shared env.memory import of up to 4 GiB, an exported
 * kernel `k` that does nothing), plus what `hostile` asks for.
 */
export function hostileModule(hostile: HostileModule): Uint8Array {
  const imports = [[...name('env'), ...name('memory'), 0x02, 0x03, ...leb(1), ...leb(65536)]];
  if (hostile.globalOffset) imports.push([...name('env'), ...name('seed'), 0x03, 0x7f, 0x00]); // an i32 constant global
  const bodies = [[0x00, ...(hostile.body ?? []), 0x0b]];
  if (hostile.start === 'returns') bodies.push([0x00, 0x0b]);
  if (hostile.start === 'loops') bodies.push([0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b]); // loop: br 0
  const segments = (hostile.data ?? []).map(({ offset, size }) => [
    0x00,
    0x41,
    ...sleb32(offset),
    0x0b,
    ...leb(size),
    ...new Array<number>(size).fill(0xaa),
  ]);
  if (hostile.globalOffset) segments.push([0x00, 0x23, 0x00, 0x0b, ...leb(4), 1, 2, 3, 4]); // global.get 0
  const bytes = [
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, vec([[0x60, 0x00, 0x00]])),
    ...section(2, vec(imports)),
    ...section(3, vec(bodies.map(() => [0x00]))),
    ...section(7, vec([[...name('k'), 0x00, 0x00]])),
    ...(hostile.start ? section(8, leb(1)) : []),
    ...section(10, vec(bodies.map((body) => [...leb(body.length), ...body]))),
    ...(segments.length > 0 ? section(11, vec(segments)) : []),
  ];
  return new Uint8Array(bytes);
}

/** A bundle of one wasm image, whose manifest claims whatever static range `claims` says. */
export function hostileBundle(
  bundleName: string,
  hostile: HostileModule,
  claims = { staticBase: STATIC_WINDOW_START, staticSize: 0 },
): Uint8Array {
  const image = { format: 'wasm', triple: WASM_TRIPLE, offset: 0, size: 0, ...claims, minPages: 1 } as const;
  return encodeBundle({ name: bundleName, images: [image], entries: [{ name: 'k', kind: 'kernel', params: [] }] }, [
    hostileModule(hostile),
  ]);
}
