/**
 * Every failure offload-ts reports is an {@link OffloadError} with a stable string `code`.
 * All codes live here, in one place, so callers can switch on them and messages stay consistent.
 */

/** The stable error codes (DESIGN section 6). */
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
