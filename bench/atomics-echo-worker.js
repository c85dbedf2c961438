// The worker side of the raw Atomics round trip (atomics-round-trip.ts). Plain JavaScript:
// tsx's loader does not reach worker threads on Node 20.
import { workerData } from 'node:worker_threads';

const REQUEST = 0;
const REPLY = 1;
const STOP = -1;
const words = new Int32Array(workerData);

// Sleeps until the request word changes, echoes it into the reply word and wakes the main
// thread, as a host-device worker does when a launch completes.
for (let seen = 0; ;) {
  Atomics.wait(words, REQUEST, seen);
  const request = Atomics.load(words, REQUEST);
  if (request === STOP) break;
  if (request === seen) continue;
  seen = request;
  Atomics.store(words, REPLY, request);
  Atomics.notify(words, REPLY);
}
