/**
 * The shared-memory protocol between the host device (main thread) and its workers.
 *
 * Launches travel through a ring of slots in a SharedArrayBuffer, not through postMessage:
 * the main thread writes a slot and bumps EPOCH (Atomics.notify wakes sleeping workers); the
 * workers take teams from the slot with an atomic ticket counter; the worker that finishes the
 * last team marks the slot DONE and bumps DONE_COUNT (Atomics.notify wakes the main thread's
 * Atomics.waitAsync). Every wait on either side is bounded, so a lost wake-up costs time,
 * never a hang. postMessage carries only the slow path: loading and unloading images.
 *
 * Tickets: each slot has a 64-bit counter whose high half is the slot's generation (bumped at
 * every publication) and whose low half counts the teams handed out. A worker that grabs a
 * ticket from a slot that was meanwhile republished gets a ticket of the old generation and
 * knows it is stale; one 64-bit atomic add both claims a team and says which launch it belongs to.
 */

import type { MessagePort } from 'node:worker_threads';

/** Header fields (Int32 indices). */
export const H_EPOCH = 0;
export const H_DONE_COUNT = 1;
export const H_STOP = 2;
export const H_SLEEPERS = 3;
const HEADER_INTS = 16;

export const SLOT_COUNT = 64;
export const MAX_ARGS = 32;

/** Slot fields (Int32 offsets within a slot). */
export const S_STATE = 0;
export const S_GEN = 1;
export const S_IMAGE = 2;
export const S_KERNEL = 3;
export const S_TEAMS = 4;
export const S_THREADS = 5;
export const S_FINISHED = 6;
export const S_TRAPPED = 7;
export const S_ERROR_LENGTH = 8;
export const S_NARGS = 9;
/** 64-bit ticket counter at Int32 offset 10..11 (8-byte aligned because slots are). */
export const S_TICKET = 10;
/** Arguments, 8 bytes each, from Int32 offset 16. */
export const S_ARGS = 16;
export const SLOT_INTS = S_ARGS + MAX_ARGS * 2;

export const STATE_FREE = 0;
export const STATE_READY = 1;
export const STATE_DONE = 2;

/** Bytes of trap message kept per slot (UTF-8, truncated). */
export const ERROR_BYTES = 1024;

export const RING_BYTES = (HEADER_INTS + SLOT_COUNT * SLOT_INTS) * 4 + SLOT_COUNT * ERROR_BYTES;

/** Typed views over one ring buffer; both sides build the same views over the same memory. */
export class LaunchRing {
  readonly i32: Int32Array;
  readonly f64: Float64Array;
  readonly i64: BigInt64Array;
  readonly errors: Uint8Array;

  constructor(readonly buffer: SharedArrayBuffer) {
    this.i32 = new Int32Array(buffer, 0, HEADER_INTS + SLOT_COUNT * SLOT_INTS);
    this.f64 = new Float64Array(buffer, 0, this.i32.length / 2);
    this.i64 = new BigInt64Array(buffer, 0, this.i32.length / 2);
    this.errors = new Uint8Array(buffer, this.i32.byteLength, SLOT_COUNT * ERROR_BYTES);
  }

  static create(): LaunchRing {
    return new LaunchRing(new SharedArrayBuffer(RING_BYTES));
  }

  /** Int32 index of field `field` of slot `slot`. */
  static at(slot: number, field: number): number {
    return HEADER_INTS + slot * SLOT_INTS + field;
  }

  /** Index into `f64`/`i64` of argument `arg` of slot `slot`. */
  static arg(slot: number, arg: number): number {
    return (HEADER_INTS + slot * SLOT_INTS + S_ARGS) / 2 + arg;
  }

  /** Index into `i64` of the ticket counter of slot `slot`. */
  static ticket(slot: number): number {
    return (HEADER_INTS + slot * SLOT_INTS + S_TICKET) / 2;
  }

  errorText(slot: number): string {
    const length = Atomics.load(this.i32, LaunchRing.at(slot, S_ERROR_LENGTH));
    const start = slot * ERROR_BYTES;
    // TextDecoder refuses views of shared memory; copy the few bytes out first.
    return new TextDecoder().decode(this.errors.slice(start, start + length));
  }

  writeErrorText(slot: number, text: string): void {
    const encoded = new TextEncoder().encode(text).subarray(0, ERROR_BYTES);
    this.errors.set(encoded, slot * ERROR_BYTES);
    Atomics.store(this.i32, LaunchRing.at(slot, S_ERROR_LENGTH), encoded.length);
  }
}

/** Argument encodings in a slot: the worker converts each 8-byte word by the kernel's param types. */
export const ARG_KIND = { i32: 0, i64: 1, f32: 2, f64: 3, ptr: 4 } as const;
export type ArgKind = (typeof ARG_KIND)[keyof typeof ARG_KIND];

/** Messages on the slow path (postMessage), main -> worker. */
export type ControlMessage =
  | { type: 'load'; image: number; module: WebAssembly.Module; kernels: { name: string; kinds: ArgKind[] }[] }
  | { type: 'unload'; image: number };

/** Messages worker -> main. */
export type WorkerReply =
  | { type: 'loaded'; image: number; worker: number }
  | { type: 'load-failed'; image: number; worker: number; message: string }
  | { type: 'unloaded'; image: number; worker: number };

export interface WorkerData {
  index: number;
  ring: SharedArrayBuffer;
  memory: WebAssembly.Memory;
  control: MessagePort;
  waitBoundMs: number;
}
