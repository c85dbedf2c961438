/**
 * The gate: parking a queue at a point until work outside it is done. Both ends of the protocol
 * park queues this way: the client while a part of a copy runs here (or a host function, or a
 * wait for an event of another device), the proxy while a streamed write's chunks arrive, a
 * streamed read's data leaves, or a copy goes to a peer proxy. Each end says what parking means
 * for its queues (ParkingQueue); the order of the steps is written here, once.
 */

/** A queue as the gate sees it. */
export interface ParkingQueue {
  /** Enqueues a mark: resolves when the queue reaches it (everything before it completed), rejects with the queue's failure. */
  reach(): Promise<void>;
  /**
   * Enqueues a stop: the queue's later operations wait until `until` settles, and fail (sticky,
   * as any failure) if it rejects. Settles as the stop does.
   */
  stopUntil(until: Promise<void>): Promise<void>;
}

/**
 * Runs `work` when `queue` reaches this point, and holds the queue's later operations until it
 * is done (failing them if it fails). Resolves when both are done; rejects with the first
 * failure (the work's own error when the work failed).
 */
export function park(queue: ParkingQueue, work: () => Promise<void>): Promise<void> {
  const reached = queue.reach();
  const done = reached.then(work);
  const held = queue.stopUntil(done);
  return Promise.all([done, held]).then(() => {});
}

/** A promise with its settling functions outside (a gate another frame opens). Its rejection is marked handled. */
export interface Deferred {
  promise: Promise<void>;
  resolve(): void;
  reject(error: unknown): void;
}

export function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}
