/**
 * Calls from a kernel to the program (the device library's hostCall) on the host device's
 * workers, through a mailbox per worker in the launch ring. The worker writes the call and
 * waits; the main thread's pump (worker-pool.ts) answers it with the launch's host function,
 * which may be asynchronous (behind a proxy it is the client's, a network round trip away).
 *
 * A mailbox: [i32 STATE = call number << 2 | state | i32 slot | i32 argument count | i32 name
 * length | i32 message length | pad | f64 x 6 arguments | f64 result | the function's name
 * (UTF-8) | the failure's message (UTF-8)].
 *   M1 Only the worker moves STATE to CALLING (with a new call number), after writing the call;
 *      only main moves it from CALLING to ANSWERED or FAILED, with one compare-exchange that
 *      names the call, after writing the answer; only the worker moves it back to IDLE, after
 *      reading that. The moves are seq-cst (Atomics), so what was written before a move is
 *      seen by whoever sees the move.
 *   M2 A worker makes one call at a time (it waits for the answer), so a mailbox holds at most
 *      one call; main answers each call once (it remembers the call it serves per mailbox).
 *   M3 After CALLING the worker adds 1 to DONE_COUNT and wakes main: main waits on DONE_COUNT
 *      (launch-protocol.ts I4) and serves the mailboxes whenever a round of its pump finds no
 *      launch completed, so no call is missed. An extra DONE_COUNT only makes main look again.
 *   M4 A worker killed while it waits (its launch timed out) never reads its answer; its
 *      replacement resets STATE to IDLE and numbers its calls on from the old one's. A late
 *      answer to the old call finds STATE no longer CALLING with its number and writes
 *      nothing: it may come after the new call was answered and before the replacement read
 *      that answer (test/host-call-mailbox.test.ts found the result overwritten there). Killed
 *      during the answer's turn, its compare-exchange fails and it is dropped; what it wrote
 *      (the result, the message: never the name or arguments, which only a worker writes) is
 *      written again by the answer to the new call before that call's compare-exchange.
 *      Main's answers are whole turns of its one thread, so two never interleave.
 */
import { MAX_HOST_CALL_ARGS } from '../interface.js';
import { H_DONE_COUNT, type LaunchRing } from './launch-ring.js';

const IDLE = 0;
const CALLING = 1;
const ANSWERED = 2;
const FAILED = 3;

const M_STATE = 0;
const M_SLOT = 1;
const M_ARGC = 2;
const M_NAME_LENGTH = 3;
const M_MESSAGE_LENGTH = 4;
/** Float64 offsets within a mailbox. */
const M_ARGS = 3;
const M_RESULT = 9;
/** Byte offsets and sizes of the texts. */
const M_NAME = 80;
const NAME_BYTES = 512;
const M_MESSAGE = M_NAME + NAME_BYTES;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What the program's side does with a call: the function's result, or a rejection with why it failed. */
export type HostCallHandler = (name: string, args: number[]) => number | Promise<number>;

interface Mailbox {
  words: number;
  floats: number;
  bytes: number;
  messageBytes: number;
}

function mailboxOf(ring: LaunchRing, worker: number): Mailbox {
  const size = ring.shape.mailboxBytes ?? 0;
  return {
    words: (worker * size) / 4,
    floats: (worker * size) / 8,
    bytes: worker * size,
    messageBytes: size - M_MESSAGE,
  };
}

function writeText(ring: LaunchRing, box: Mailbox, at: number, lengthWord: number, max: number, text: string): void {
  const bytes = encoder.encode(text).subarray(0, max);
  ring.mailboxes.set(bytes, box.bytes + at);
  ring.mailboxWords[box.words + lengthWord] = bytes.length;
}

function readText(ring: LaunchRing, box: Mailbox, at: number, lengthWord: number, max: number): string {
  const length = Math.max(0, Math.min(ring.mailboxWords[box.words + lengthWord]!, max));
  return decoder.decode(ring.mailboxes.slice(box.bytes + at, box.bytes + at + length));
}

const stateWord = (call: number, state: number): number => (call << 2) | state;

/** Worker side: a replacement worker's mailbox starts empty (M4). */
export function resetMailbox(ring: LaunchRing, worker: number): void {
  if ((ring.shape.mailboxBytes ?? 0) === 0) return;
  const at = mailboxOf(ring, worker).words + M_STATE;
  Atomics.store(ring.mailboxWords, at, stateWord(Atomics.load(ring.mailboxWords, at) >>> 2, IDLE));
}

/**
 * Worker side: calls host function `name` with `args` for the launch in `slot` and waits for
 * its result (M1-M3). Throws an Error with the program's reason when the call fails.
 */
export function callHost(
  ring: LaunchRing,
  worker: number,
  slot: number,
  name: string,
  args: number[],
  waitBoundMs: number,
): number {
  if ((ring.shape.mailboxBytes ?? 0) === 0) throw new Error('this device has no host calls');
  const box = mailboxOf(ring, worker);
  const words = ring.mailboxWords;
  words[box.words + M_SLOT] = slot;
  words[box.words + M_ARGC] = args.length;
  for (let i = 0; i < args.length; i++) ring.mailboxFloats[box.floats + M_ARGS + i] = args[i]!;
  writeText(ring, box, M_NAME, M_NAME_LENGTH, NAME_BYTES, name);
  const call = ((Atomics.load(words, box.words + M_STATE) >>> 2) + 1) & 0x1fffffff;
  const calling = stateWord(call, CALLING);
  Atomics.store(words, box.words + M_STATE, calling);
  Atomics.add(ring.i32, H_DONE_COUNT, 1);
  Atomics.notify(ring.i32, H_DONE_COUNT);
  let word = calling;
  while ((word = Atomics.load(words, box.words + M_STATE)) === calling)
    Atomics.wait(words, box.words + M_STATE, calling, waitBoundMs);
  const failed = (word & 3) === FAILED;
  const result = ring.mailboxFloats[box.floats + M_RESULT]!;
  const message = failed ? readText(ring, box, M_MESSAGE, M_MESSAGE_LENGTH, box.messageBytes) : '';
  Atomics.store(words, box.words + M_STATE, stateWord(call, IDLE));
  if (failed) throw new Error(message);
  return result;
}

/**
 * Main side: answers the calls waiting in the mailboxes of `workers` workers; `handlerOf(slot)`
 * gives the handler of the launch in a slot (undefined: the launch is gone, and its worker
 * with it). Calls already being answered are skipped (M2).
 */
export class HostCallServer {
  /** The number of the call being answered, by worker. */
  private readonly serving = new Map<number, number>();

  constructor(private readonly ring: LaunchRing) {}

  serve(workers: number, handlerOf: (slot: number) => HostCallHandler | undefined): void {
    if ((this.ring.shape.mailboxBytes ?? 0) === 0) return;
    const words = this.ring.mailboxWords;
    for (let worker = 0; worker < workers; worker++) {
      const box = mailboxOf(this.ring, worker);
      const word = Atomics.load(words, box.words + M_STATE);
      const call = word >>> 2;
      if ((word & 3) !== CALLING || this.serving.get(worker) === call) continue;
      const handler = handlerOf(words[box.words + M_SLOT]!);
      if (handler === undefined) continue;
      const argc = Math.max(0, Math.min(words[box.words + M_ARGC]!, MAX_HOST_CALL_ARGS));
      const args = Array.from({ length: argc }, (_, i) => this.ring.mailboxFloats[box.floats + M_ARGS + i]!);
      const name = readText(this.ring, box, M_NAME, M_NAME_LENGTH, NAME_BYTES);
      this.serving.set(worker, call);
      let answer: Promise<number>;
      try {
        answer = Promise.resolve(handler(name, args));
      } catch (error) {
        answer = Promise.reject(error);
      }
      answer.then(
        (value) => this.answer(worker, call, box, typeof value === 'number' ? value : Number.NaN, undefined),
        (error: unknown) => this.answer(worker, call, box, 0, error instanceof Error ? error.message : String(error)),
      );
    }
  }

  private answer(worker: number, call: number, box: Mailbox, value: number, failure: string | undefined): void {
    if (this.serving.get(worker) === call) this.serving.delete(worker);
    const words = this.ring.mailboxWords;
    const calling = stateWord(call, CALLING);
    // A late answer (its worker killed, its replacement maybe answered since) writes nothing: M4.
    if (Atomics.load(words, box.words + M_STATE) !== calling) return;
    this.ring.mailboxFloats[box.floats + M_RESULT] = value;
    if (failure !== undefined) writeText(this.ring, box, M_MESSAGE, M_MESSAGE_LENGTH, box.messageBytes, failure);
    // Fails when the worker was killed (and maybe replaced, calling again) meanwhile: M4.
    const answered = stateWord(call, failure === undefined ? ANSWERED : FAILED);
    if (Atomics.compareExchange(words, box.words + M_STATE, calling, answered) === calling) {
      Atomics.notify(words, box.words + M_STATE);
    }
  }
}
