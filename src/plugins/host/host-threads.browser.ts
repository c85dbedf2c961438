/**
 * What the host device needs of its platform, in a page (package.json's "browser" field puts this
 * file in place of host-threads.ts there): Web Workers started as module workers from
 * offload-host-worker.js, which must sit beside the page's bundle (see README, "In a page"); the
 * launch ring and device memory shared with them, which needs a cross-origin isolated page.
 */
import type { ControlMessage, WorkerData, WorkerReply } from './launch-ring.js';
import type { HostWorker, HostWorkerEvents, WorkerChannel } from './host-threads.js';

export type { HostWorker, HostWorkerEvents, WorkerChannel };

/** The headers that make a page cross-origin isolated, as a diagnostic names them. */
export const ISOLATION_HEADERS =
  'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp';

interface PageGlobals {
  navigator?: { hardwareConcurrency?: number };
  crossOriginIsolated?: boolean;
  Worker?: unknown;
  SharedArrayBuffer?: unknown;
}

/** Threads the machine can run at once, as the browser tells (it may round or cap it). */
export function hostParallelism(): number {
  return (globalThis as PageGlobals).navigator?.hardwareConcurrency || 4;
}

/** A page is not told the CPU's name. */
export function cpuModel(): string {
  return 'unknown (a page is not told)';
}

/** Why this page cannot have a host device, or undefined when it can. */
export function hostUnavailable(): string | undefined {
  const page = globalThis as PageGlobals;
  if (typeof page.Worker !== 'function') return 'this page has no Web Workers';
  if (page.crossOriginIsolated !== true || typeof page.SharedArrayBuffer !== 'function')
    return (
      'the page is not cross-origin isolated, so it has no SharedArrayBuffer or shared WebAssembly.Memory for the ' +
      `host device's workers: serve it with the headers ${ISOLATION_HEADERS}`
    );
  if (typeof Atomics.waitAsync !== 'function')
    return 'this browser has no Atomics.waitAsync, which the host device needs';
  return undefined;
}

/** Trace lines go to the console (a worker's console is the page's). */
export function writeTraceLine(line: string): void {
  console.error(line.endsWith('\n') ? line.slice(0, -1) : line);
}

/** The first message a page's host worker gets: its data and the loads it takes before its first scan. */
export interface PageWorkerStart {
  data: WorkerData;
  images: ControlMessage[];
}

/**
 * Starts worker `data.index` as a module worker. The script is found beside this module (or
 * beside the page's bundle, once bundled): `new URL(..., import.meta.url)`, which esbuild leaves
 * as it is and Vite follows. A page's worker has no exit event: an uncaught error ends it here,
 * and `exit` is told once it is terminated.
 */
export function startHostWorker(data: WorkerData, images: ControlMessage[], events: HostWorkerEvents): HostWorker {
  const worker = new Worker(new URL('./offload-host-worker.js', import.meta.url), {
    type: 'module',
    name: `offload-host-${data.index}`,
  });
  let ended = false;
  const end = (code: number): Promise<void> => {
    if (ended) return Promise.resolve();
    ended = true;
    worker.terminate();
    // After the caller's turn, as Node's exit event comes.
    return new Promise((resolve) =>
      setTimeout(() => {
        events.exit(code);
        resolve();
      }, 0),
    );
  };
  worker.onmessage = (event: MessageEvent<WorkerReply>) => events.reply(event.data);
  worker.onerror = (event: ErrorEvent) => {
    event.preventDefault();
    events.error(
      new Error(event.message || 'the worker failed to start (is offload-host-worker.js served beside the bundle?)'),
    );
    void end(1);
  };
  worker.onmessageerror = () => {
    events.error(new Error('a message to the worker could not be read'));
    void end(1);
  };
  worker.postMessage({ data, images } satisfies PageWorkerStart);
  return {
    post: (message) => worker.postMessage(message),
    terminate: () => end(1),
  };
}

/** A page's workers hold nothing open: there is no process to keep alive. */
export class ProcessHold {
  hold(): void {}
  release(): void {}
  close(): void {}
}
