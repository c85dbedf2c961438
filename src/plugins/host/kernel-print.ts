/**
 * Kernels' print() lines on the host device's workers: each launch slot has PRINT_BYTES of
 * records, written by the teams of the launch in flight there and read by the main thread once
 * that launch has completed, so the lines reach the program before the launch's event does.
 *
 * A record is [i32 team | i32 byte length | UTF-8 text, padded to 4 bytes]. A team claims the
 * bytes of its record with one Atomics.add on the slot's PRINT_TAIL, then writes them.
 *   R1 Main zeroes PRINT_TAIL and PRINT_DROPPED with the payload (P1), before the launch's
 *      teams can be claimed: every record of a launch is claimed from byte 0 of its slot.
 *   R2 Claims never overlap (one atomic add each), and only a team holding a claim of the
 *      launch writes records (kernel code runs only under a claim, launch-protocol.ts I2).
 *   R3 A team finishes (FINISHED, then DONE) after its last record: main reads the records
 *      after it sees DONE and before the slot is published again (onSettled), so every record
 *      is whole when read, and none is written while it reads.
 *   R4 Claims grow: once one runs past the end, every later one does too. The first that does
 *      writes an end marker (team -1) where it began, if a record head fits there, and counts
 *      itself in PRINT_DROPPED, as every later one does; so records before it are all whole
 *      and the reader stops at the marker or the end.
 * A withdrawn launch (timed out, its workers killed) leaves its records unread: a killed
 * worker may have claimed bytes it never wrote.
 */
import { PRINT_BYTES, S_PRINT_DROPPED, S_PRINT_TAIL, type LaunchRing } from './launch-ring.js';

const HEAD_BYTES = 8;
const END_MARKER = -1;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What a launch printed: its lines in claim order (so each team's in its own order), and how many did not fit. */
export interface LaunchPrints {
  lines: { team: number; text: string }[];
  dropped: number;
}

/** Worker side: appends a line of `team` to the records of the launch in `slot` (R2, R4). */
export function appendPrint(ring: LaunchRing, slot: number, team: number, text: string): void {
  const capacity = ring.shape.printBytes ?? 0;
  const bytes = encoder.encode(text);
  const size = HEAD_BYTES + ((bytes.length + 3) & ~3);
  const at = Atomics.add(ring.i32, ring.at(slot, S_PRINT_TAIL), size);
  const base = slot * capacity;
  if (at + size > capacity) {
    if (at + HEAD_BYTES <= capacity) ring.printWords[(base + at) >> 2] = END_MARKER;
    Atomics.add(ring.i32, ring.at(slot, S_PRINT_DROPPED), 1);
    return;
  }
  const word = (base + at) >> 2;
  ring.printWords[word] = team;
  ring.printWords[word + 1] = bytes.length;
  ring.prints.set(bytes, base + at + HEAD_BYTES);
}

/** Main side: the records of the completed launch in `slot` (R3). */
export function takePrints(ring: LaunchRing, slot: number): LaunchPrints | undefined {
  const capacity = ring.shape.printBytes ?? 0;
  const tail = Atomics.load(ring.i32, ring.at(slot, S_PRINT_TAIL));
  if (tail === 0) return undefined;
  const dropped = Atomics.load(ring.i32, ring.at(slot, S_PRINT_DROPPED));
  const base = slot * capacity;
  const end = Math.min(tail, capacity);
  const lines: LaunchPrints['lines'] = [];
  for (let at = 0; at + HEAD_BYTES <= end;) {
    const team = ring.printWords[(base + at) >> 2]!;
    const length = ring.printWords[((base + at) >> 2) + 1]!;
    if (team === END_MARKER || length < 0 || at + HEAD_BYTES + length > end) break;
    lines.push({
      team,
      // A copy: a browser's TextDecoder refuses a view of shared memory.
      text: decoder.decode(ring.prints.slice(base + at + HEAD_BYTES, base + at + HEAD_BYTES + length)),
    });
    at += HEAD_BYTES + ((length + 3) & ~3);
  }
  return { lines, dropped };
}

/** The line that says how many did not fit, for the program to see after the others. */
export function droppedLine(dropped: number): string {
  return `(${dropped} more line${dropped === 1 ? '' : 's'} of this launch dropped: a launch keeps ${PRINT_BYTES / 1024} KiB of print() output)`;
}
