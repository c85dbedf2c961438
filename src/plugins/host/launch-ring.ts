/**
 * The shared memory between the host device (main thread) and its workers: a header, one cell
 * per worker and a ring of launch slots, all in one SharedArrayBuffer. launch-protocol.ts says
 * who writes what, in which order, and why that is exact; this file only lays the memory out.
 *
 * Launches travel through the ring, not through postMessage, because a postMessage round trip
 * costs an event-loop turn on both sides (~200 us on a 2-vCPU VM); postMessage carries only the
 * slow path (loading and unloading images).
 */

/** Header fields (Int32 indices). */
export const H_EPOCH = 0;
export const H_DONE_COUNT = 1;
export const H_STOP = 2;
export const H_SLEEPERS = 3;
const HEADER_INTS = 16;

export const SLOT_COUNT = 64;
export const MAX_ARGS = 32;
/** The most workers a ring has cells for (OFFLOAD_HOST_THREADS is at most this). */
export const MAX_WORKERS = 256;

/** Slot fields (Int32 offsets within a slot). */
export const S_STATE = 0;
export const S_FINISHED = 1;
export const S_TRAPPED = 2;
export const S_ERROR_LENGTH = 3;
export const S_IMAGE = 4;
export const S_KERNEL = 5;
export const S_THREADS = 6;
export const S_NARGS = 7;
/** 64-bit words at Int32 offsets 8..9 and 10..11 (8-byte aligned because slots are). */
export const S_LIMIT = 8;
export const S_TICKET = 10;
/** Kernel print records of the launch (kernel-print.ts): bytes claimed, and lines that did not fit. */
export const S_PRINT_TAIL = 12;
export const S_PRINT_DROPPED = 13;
/**
 * The team shape of the launch (team-threads.ts): the x and y sizes of its teams and threads
 * (z follows from the totals), the address of its scratch memory and the bytes of each
 * worker's region there, a team's team memory, and each thread's asyncify stack.
 */
export const S_SCRATCH = 14;
export const S_SCRATCH_REGION = 15;
export const S_TEAMS_X = 16;
export const S_TEAMS_Y = 17;
export const S_THREADS_X = 18;
export const S_THREADS_Y = 19;
export const S_TEAM_BYTES = 20;
export const S_STACK_BYTES = 21;
/** Arguments, 8 bytes each, from Int32 offset 24. */
export const S_ARGS = 24;

export const STATE_FREE = 0;
export const STATE_READY = 1;
export const STATE_DONE = 2;

/** Bytes of trap message kept per slot (UTF-8, truncated). */
export const ERROR_BYTES = 1024;
/** Bytes of kernel print records kept per slot (a multiple of 4). */
export const PRINT_BYTES = 16 * 1024;
/** Bytes of each worker's host-call mailbox (host-calls.ts; a multiple of 8). */
export const MAILBOX_BYTES = 1024;

/** How big a ring is: the model test makes small ones, the host device the full size. */
export interface RingShape {
  slots: number;
  /** Worker cells (the most workers that will ever run on this ring at once). */
  workers: number;
  maxArgs: number;
  errorBytes: number;
  /** Bytes of print records per slot (a multiple of 4; 0: kernels' print() lines are all dropped). */
  printBytes?: number;
  /** Bytes of each worker's host-call mailbox (a multiple of 8; 0: none). */
  mailboxBytes?: number;
}

export const FULL_RING: RingShape = {
  slots: SLOT_COUNT,
  workers: MAX_WORKERS,
  maxArgs: MAX_ARGS,
  errorBytes: ERROR_BYTES,
  printBytes: PRINT_BYTES,
  mailboxBytes: MAILBOX_BYTES,
};

/**
 * Where things lie: the header, then the worker cells, then the slots. Slots start on an even
 * index (their 64-bit words stay aligned) and are whole 64-byte cache lines, so two slots never
 * share a line; the trap messages follow the slots, the print records follow those, and the
 * workers' host-call mailboxes (8-byte aligned) come last.
 */
function ringLayout(shape: RingShape): {
  slotBase: number;
  slotInts: number;
  ints: number;
  printStart: number;
  mailboxStart: number;
  bytes: number;
} {
  const slotBase = HEADER_INTS + Math.ceil(shape.workers / 16) * 16;
  const slotInts = Math.ceil((S_ARGS + shape.maxArgs * 2) / 16) * 16;
  const ints = slotBase + shape.slots * slotInts;
  const printStart = ints * 4 + Math.ceil((shape.slots * shape.errorBytes) / 4) * 4;
  const mailboxStart = Math.ceil((printStart + shape.slots * (shape.printBytes ?? 0)) / 8) * 8;
  return {
    slotBase,
    slotInts,
    ints,
    printStart,
    mailboxStart,
    bytes: mailboxStart + shape.workers * (shape.mailboxBytes ?? 0),
  };
}

/** Typed views over one ring buffer; both sides build the same views over the same memory. */
export class LaunchRing {
  readonly i32: Int32Array;
  readonly f64: Float64Array;
  readonly i64: BigInt64Array;
  readonly errors: Uint8Array;
  /** The slots' print records (kernel-print.ts), as bytes and as 32-bit words. */
  readonly prints: Uint8Array;
  readonly printWords: Int32Array;
  /** The workers' host-call mailboxes (host-calls.ts), as bytes, 32-bit words and 64-bit floats. */
  readonly mailboxes: Uint8Array;
  readonly mailboxWords: Int32Array;
  readonly mailboxFloats: Float64Array;
  private readonly slotBase: number;
  private readonly slotInts: number;

  constructor(
    readonly buffer: SharedArrayBuffer,
    readonly shape: RingShape = FULL_RING,
  ) {
    const layout = ringLayout(shape);
    this.slotBase = layout.slotBase;
    this.slotInts = layout.slotInts;
    this.i32 = new Int32Array(buffer, 0, layout.ints);
    this.f64 = new Float64Array(buffer, 0, layout.ints / 2);
    this.i64 = new BigInt64Array(buffer, 0, layout.ints / 2);
    this.errors = new Uint8Array(buffer, layout.ints * 4, shape.slots * shape.errorBytes);
    this.prints = new Uint8Array(buffer, layout.printStart, shape.slots * (shape.printBytes ?? 0));
    this.printWords = new Int32Array(buffer, layout.printStart, this.prints.length / 4);
    this.mailboxes = new Uint8Array(buffer, layout.mailboxStart, shape.workers * (shape.mailboxBytes ?? 0));
    this.mailboxWords = new Int32Array(buffer, layout.mailboxStart, this.mailboxes.length / 4);
    this.mailboxFloats = new Float64Array(buffer, layout.mailboxStart, this.mailboxes.length / 8);
  }

  static create(shape: RingShape = FULL_RING): LaunchRing {
    return new LaunchRing(new SharedArrayBuffer(ringLayout(shape).bytes), shape);
  }

  /** Int32 index of field `field` of slot `slot`. */
  at(slot: number, field: number): number {
    return this.slotBase + slot * this.slotInts + field;
  }

  /** Int32 index of worker `worker`'s cell: which slot it works in and how (launch-protocol.ts). */
  cell(worker: number): number {
    return HEADER_INTS + worker;
  }

  /** Index into `f64`/`i64` of argument `arg` of slot `slot`. */
  arg(slot: number, arg: number): number {
    return (this.slotBase + slot * this.slotInts + S_ARGS) / 2 + arg;
  }

  /** Index into `i64` of the 64-bit word at Int32 offset `field` (S_LIMIT, S_TICKET) of slot `slot`. */
  word(slot: number, field: number): number {
    return (this.slotBase + slot * this.slotInts + field) / 2;
  }

  errorText(slot: number): string {
    const length = Math.min(Atomics.load(this.i32, this.at(slot, S_ERROR_LENGTH)), this.shape.errorBytes);
    const start = slot * this.shape.errorBytes;
    // TextDecoder refuses views of shared memory; copy the few bytes out first.
    return new TextDecoder().decode(this.errors.slice(start, start + length));
  }

  writeErrorText(slot: number, text: string): void {
    const encoded = fitErrorText(text, this.shape.errorBytes);
    this.errors.set(encoded, slot * this.shape.errorBytes);
    Atomics.store(this.i32, this.at(slot, S_ERROR_LENGTH), encoded.length);
  }
}

/** A trap text as a slot holds it: UTF-8, cut to `bytes` (inline launches cut theirs the same way). */
export function fitErrorText(text: string, bytes = ERROR_BYTES): Uint8Array {
  return new TextEncoder().encode(text).subarray(0, bytes);
}

/** Argument encodings in a slot: the worker converts each 8-byte word by the kernel's param types. */
export const ARG_KIND = { i32: 0, i64: 1, f32: 2, f64: 3, ptr: 4 } as const;
export type ArgKind = (typeof ARG_KIND)[keyof typeof ARG_KIND];

/** Messages on the slow path (postMessage), main -> worker. */
export type ControlMessage =
  | {
      type: 'load';
      image: number;
      module: WebAssembly.Module;
      memory: WebAssembly.Memory;
      kernels: { name: string; kinds: ArgKind[] }[];
    }
  | { type: 'unload'; image: number };

/** Messages worker -> main. */
export type WorkerReply =
  | { type: 'loaded'; image: number; worker: number }
  | { type: 'load-failed'; image: number; worker: number; message: string }
  | { type: 'unloaded'; image: number; worker: number };

export interface WorkerData {
  index: number;
  ring: SharedArrayBuffer;
  shape: RingShape;
  waitBoundMs: number;
}
