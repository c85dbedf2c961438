/**
 * Every failure offload-ts reports is an {@link OffloadError} with a stable string `code`.
 * All codes live here, in one place, so callers can switch on them and messages stay consistent.
 */

/** The stable error codes (README's error table lists them with when each happens). */
export const ErrorCode = {
  /** An argument has the wrong type, range or shape. */
  INVALID_ARGUMENT: 'INVALID_ARGUMENT',
  /** A buffer was freed, belongs to another device or runtime, or is not a buffer at all. */
  INVALID_BUFFER: 'INVALID_BUFFER',
  /** A copy or access reaches outside a buffer or a host view. */
  OUT_OF_BOUNDS: 'OUT_OF_BOUNDS',
  /** The device has no free block large enough. */
  OUT_OF_MEMORY: 'OUT_OF_MEMORY',
  /** A kernel, image, device or file does not exist. */
  NOT_FOUND: 'NOT_FOUND',
  /** An image or bundle cannot be used by this device (bad format, bad module, conflict). */
  INCOMPATIBLE_IMAGE: 'INCOMPATIBLE_IMAGE',
  /** A kernel trapped (out-of-bounds access, unreachable, abort). */
  KERNEL_TRAP: 'KERNEL_TRAP',
  /** The device is gone (its workers died, its proxy vanished, the runtime shut down). */
  DEVICE_LOST: 'DEVICE_LOST',
  /** A peer sent a malformed or oversized frame. */
  PROTOCOL: 'PROTOCOL',
  /** A peer presented a wrong token. */
  UNAUTHORIZED: 'UNAUTHORIZED',
  /** An operation did not complete within its time limit. */
  TIMEOUT: 'TIMEOUT',
  /** The device does not support what was asked (a memory kind, an image format). */
  UNSUPPORTED: 'UNSUPPORTED',
  /** A function of queue.hostFunction() threw or rejected (its `cause`); its queue went on. */
  HOST_FUNCTION_FAILED: 'HOST_FUNCTION_FAILED',
  /** The program gave up on the operation through its AbortSignal. */
  ABORTED: 'ABORTED',
  /**
   * A bug in offload-ts: something below the API threw what it never should (a TypeError, a
   * broken invariant). The message says so and asks for a report; `cause` is the original.
   * Never reported as DEVICE_LOST: the device may well be fine.
   */
  INTERNAL: 'INTERNAL',
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

const BRAND = Symbol.for('offload-ts.OffloadError');

export interface OffloadErrorOptions {
  /** Id of the device involved, when one is. */
  device?: number;
  /** The underlying error, kept for debugging. */
  cause?: unknown;
}

/** The one error class of offload-ts. `instanceof` works across duplicate installs. */
export class OffloadError extends Error {
  readonly code: ErrorCode;
  readonly device: number | undefined;

  constructor(code: ErrorCode, message: string, options: OffloadErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OffloadError';
    this.code = code;
    this.device = options.device;
    // Formatting the stack now drops V8's raw frames, which hold every receiver and closure on
    // the stack: an error kept as a device's or a queue's failure would keep all that alive.
    void this.stack;
  }

  /** Same error, attributed to a device (plugins may not know the public device id). */
  withDevice(device: number): OffloadError {
    if (this.device === device) return this;
    const copy = new OffloadError(this.code, this.message, { device, cause: this.cause });
    copy.stack = this.stack;
    return copy;
  }

  static [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }

  static is(value: unknown, code?: ErrorCode): value is OffloadError {
    return value instanceof OffloadError && (code === undefined || value.code === code);
  }
}
Object.defineProperty(OffloadError.prototype, BRAND, { value: true });

/**
 * A value that came from outside (an environment variable, a frame, a file), quoted for a
 * message and cut short: messages never echo unbounded input.
 */
export function quoted(text: string, max = 40): string {
  return `'${text.length > max ? `${text.slice(0, max)}...' (${text.length} characters)` : `${text}'`}`;
}

/** The longest part of a foreign error's message that asOffloadError repeats. */
const MAX_FOREIGN_MESSAGE = 500;

/** What an INTERNAL error's message ends with. */
const BUG_REPORT =
  'this is a bug in offload-ts, not in your program or device: please report it with this message and the stack of its cause';

/**
 * The one conversion of a thrown value into an OffloadError, used wherever something that may
 * not be one crosses into the runtime's errors (a plugin's rejection, a callback's throw):
 * - an OffloadError passes through (attributed to `options.device` when given);
 * - anything else is a bug of ours, INTERNAL, unless the caller names the code that a foreign
 *   error really means at that place (a socket's error is the device being lost:
 *   `{ code: 'DEVICE_LOST' }`).
 * `context` says what was being done ("loading library 'k' on device 0"); the message repeats
 * the original's (cut short) and the original is kept as `cause`.
 */
export function asOffloadError(
  error: unknown,
  context: string,
  options: { code?: ErrorCode; device?: number } = {},
): OffloadError {
  const { code = 'INTERNAL', device } = options;
  if (error instanceof OffloadError) return device === undefined ? error : error.withDevice(device);
  const text =
    error instanceof Error
      ? error.name === 'Error'
        ? error.message
        : `${error.name}: ${error.message}`
      : String(error);
  const said = text.length > MAX_FOREIGN_MESSAGE ? `${text.slice(0, MAX_FOREIGN_MESSAGE)}...` : text;
  const message =
    code === 'INTERNAL' ? `internal error while ${context}: ${said} (${BUG_REPORT})` : `${context}: ${said}`;
  return new OffloadError(code, message, { device, cause: error });
}

/** The message of anything thrown, for a coded error that keeps it as its cause. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Shorthand constructors, one per code, so call sites read as sentences. */
export const errors = {
  invalidArgument: (msg: string, device?: number) => new OffloadError('INVALID_ARGUMENT', msg, { device }),
  invalidBuffer: (msg: string, device?: number) => new OffloadError('INVALID_BUFFER', msg, { device }),
  outOfBounds: (msg: string, device?: number) => new OffloadError('OUT_OF_BOUNDS', msg, { device }),
  outOfMemory: (msg: string, device?: number) => new OffloadError('OUT_OF_MEMORY', msg, { device }),
  notFound: (msg: string, device?: number) => new OffloadError('NOT_FOUND', msg, { device }),
  incompatibleImage: (msg: string, device?: number, cause?: unknown) =>
    new OffloadError('INCOMPATIBLE_IMAGE', msg, { device, cause }),
  kernelTrap: (msg: string, device?: number) => new OffloadError('KERNEL_TRAP', msg, { device }),
  deviceLost: (msg: string, device?: number) => new OffloadError('DEVICE_LOST', msg, { device }),
  protocol: (msg: string) => new OffloadError('PROTOCOL', msg),
  unauthorized: (msg: string) => new OffloadError('UNAUTHORIZED', msg),
  timeout: (msg: string, device?: number) => new OffloadError('TIMEOUT', msg, { device }),
  unsupported: (msg: string, device?: number) => new OffloadError('UNSUPPORTED', msg, { device }),
  aborted: (msg: string, cause?: unknown) => new OffloadError('ABORTED', msg, { cause }),
};
