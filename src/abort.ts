/**
 * AbortSignal support, once for every layer: checking a signal given as an option, the error an
 * abort becomes, and racing a wait against a signal. Aborting a wait ends the wait; it does not
 * undo work a device has already taken (a kernel runs to its end, as a CUDA stream's would).
 */
import { errors, OffloadError } from './errors.js';

/** `signal` if it is an AbortSignal or undefined; INVALID_ARGUMENT naming `what` otherwise. */
export function checkSignal(signal: unknown, what: string): AbortSignal | undefined {
  if (signal === undefined || signal instanceof AbortSignal) return signal;
  throw errors.invalidArgument(
    `${what} must be an AbortSignal (new AbortController().signal, AbortSignal.timeout(ms)), got ${typeof signal}`,
  );
}

/**
 * The error an aborted `signal` means for `what`: its reason when that is an OffloadError,
 * TIMEOUT for `AbortSignal.timeout(ms)`, ABORTED otherwise.
 */
export function abortError(signal: AbortSignal, what: string): OffloadError {
  const reason: unknown = signal.reason;
  if (reason instanceof OffloadError) return reason;
  if (reason instanceof Error && reason.name === 'TimeoutError') return errors.timeout(`${what}: ${reason.message}`);
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- a signal's reason may be anything: shown as String() shows it
  const said = reason instanceof Error ? reason.message : reason === undefined ? 'no reason given' : String(reason);
  return errors.aborted(`${what} was aborted by its signal (${said})`, reason);
}

/**
 * `promise`, or a rejection with `abortError` as soon as `signal` aborts, whichever comes first.
 * The listener is removed when `promise` settles, so a long-lived signal does not collect them.
 */
export function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined, what: string): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) {
    // Given up, its outcome is no longer this wait's: a queue's failure goes to its next finish or
    // wait, and Offload.init reports what it drops under OFFLOAD_DEBUG.
    promise.catch(() => {});
    return Promise.reject(abortError(signal, what));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      promise.catch(() => {}); // as above
      reject(abortError(signal, what));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
