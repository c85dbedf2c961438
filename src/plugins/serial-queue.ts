/**
 * The in-order, sticky-failure queue every plugin queue is built on (see PluginQueue in
 * interface.ts for the contract). Plugins enqueue closures; this class keeps the order, the
 * failure state and the bookkeeping, once.
 */
import { OffloadError } from '../errors.js';
import type { PluginEvent, PluginQueue } from './interface.js';

const noop = (): void => {};

export class SerialQueue {
  /** Settles (never rejects) when the last enqueued operation has settled. */
  private tail: Promise<void> = Promise.resolve();
  private pending = 0;
  private failure: OffloadError | undefined;

  /**
   * @param guard Called before each operation runs; may throw (e.g. DEVICE_LOST) to fail it.
   */
  constructor(private readonly guard: () => void = noop) {}

  /**
   * Runs `op` after every operation enqueued before it has settled. The returned promise is
   * already marked as handled: callers that drop it cause no unhandled rejection.
   */
  enqueue<T>(op: () => T | Promise<T>): Promise<T> {
    this.pending++;
    const result = this.tail.then(() => {
      if (this.failure) throw this.failure;
      this.guard();
      return op();
    });
    this.tail = result.then(
      () => {
        this.pending--;
      },
      (error: unknown) => {
        this.pending--;
        this.failure ??= asOffloadError(error);
      },
    );
    result.catch(noop);
    return result;
  }

  /** True when no operation is waiting or running. */
  idle(): boolean {
    return this.pending === 0;
  }

  /** Waits for everything enqueued so far; rejects with (and clears) the first failure. */
  async synchronize(): Promise<void> {
    await this.tail;
    const failure = this.failure;
    this.failure = undefined;
    if (failure) throw failure;
  }
}

/** Anything thrown below the API becomes an OffloadError, so callers can always read `code`. */
export function asOffloadError(error: unknown): OffloadError {
  if (error instanceof OffloadError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new OffloadError('DEVICE_LOST', `internal failure: ${message}`, { cause: error });
}

/** An event of a queue built on SerialQueue: `done` settles with the op it was recorded as. */
export class SerialEvent implements PluginEvent {
  private settled = false;
  readonly done: Promise<void>;

  constructor(
    readonly queue: PluginQueue,
    done: Promise<void>,
  ) {
    this.done = done.finally(() => {
      this.settled = true;
    });
    this.done.catch(noop);
  }

  query(): boolean {
    return this.settled;
  }
}
