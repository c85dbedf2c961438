/** A host-device worker thread in Node: its loop (worker-loop.ts) over its workerData and control port. */
import { parentPort, workerData } from 'node:worker_threads';
import { nodeWorkerChannel } from './host-threads.js';
import { runHostWorker } from './worker-loop.js';

runHostWorker(nodeWorkerChannel(workerData, parentPort!));
