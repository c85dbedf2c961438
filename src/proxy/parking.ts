/** A queue of the proxy's runtime as the gate (protocol/gate.ts) parks it. */
import type { Queue } from '../api/queue.js';
import { eventWhen } from '../api/internal.js';
import type { ParkingQueue } from '../protocol/gate.js';

/**
 * A mark is a recorded event; a stop is a wait for an event that completes when `until` settles
 * (and fails, failing the queue from there, if it rejects).
 */
export function parking(queue: Queue): ParkingQueue {
  return {
    reach: () => queue.record().done,
    stopUntil: (until) => {
      until.catch(() => {});
      return queue.wait(eventWhen(queue, until)).done;
    },
  };
}
