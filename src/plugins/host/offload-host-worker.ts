/**
 * A host-device worker in a page: a module worker (host-threads.browser.ts starts it) running
 * the same loop as Node's (worker-loop.ts). Its first message is its data and the images it
 * loads before its first scan; every later message is a control message, handled as it comes,
 * which is only when the worker is idle in its event loop (it sleeps there, in Atomics.waitAsync).
 */
import type { PageWorkerStart, WorkerChannel } from './host-threads.browser.js';
import type { ControlMessage } from './launch-ring.js';
import { runHostWorker } from './worker-loop.js';

interface WorkerScope {
  onmessage: ((event: MessageEvent) => void) | null;
  postMessage(value: unknown): void;
  close(): void;
}

const scope = globalThis as unknown as WorkerScope;

scope.onmessage = (first: MessageEvent<PageWorkerStart>) => {
  const { data, images } = first.data;
  const channel: WorkerChannel = {
    data,
    takeControl: () => images.shift(),
    reply: (reply) => scope.postMessage(reply),
    sleep: 'event-loop',
    close: () => scope.close(),
  };
  const handleControl = runHostWorker(channel);
  scope.onmessage = (event: MessageEvent<ControlMessage>) => handleControl(event.data);
};
