/**
 * What the host device needs of its platform, in Node: worker threads (node:worker_threads), the
 * machine's parallelism and CPU name, a hold on the process while work is outstanding, and a
 * synchronous write for trace lines. host-threads.browser.ts is the page's twin (package.json's
 * "browser" field puts it in place of this file there): Web Workers, and no process to hold.
 * Everything else of the host device (the launch ring, the pool, the workers' loop) is shared.
 */
import { writeSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { MessageChannel, Worker, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import type { ControlMessage, WorkerData, WorkerReply } from './launch-ring.js';

/** Threads the machine can run at once (the default number of host workers). */
export function hostParallelism(): number {
  return availableParallelism();
}

/** The CPU's name, for the host device's info. */
export function cpuModel(): string {
  return cpus()[0]?.model.trim() || 'unknown';
}

/** Why this platform cannot have a host device, or undefined when it can (Node always can). */
export function hostUnavailable(): string | undefined {
  return undefined;
}

/**
 * Writes a trace line straight to the process's stderr. Not through process.stderr: a worker's
 * is relayed by the main thread and holds every write after the first until the worker returns
 * to its event loop, which it does not while launches come (the lines would pile up in its heap,
 * and be lost if the process exits first). One write of a short line is not torn by another's.
 */
export function writeTraceLine(line: string): void {
  writeSync(2, line);
}

/** A worker thread of the host device, as the pool sees it on either platform. */
export interface HostWorker {
  /** Sends a control message; the worker reads it at its next scan. */
  post(message: ControlMessage): void;
  /** Stops the thread, even in the middle of a kernel; `exit` follows. Settles once it has stopped. */
  terminate(): Promise<void>;
}

/** What a host worker tells the pool. `exit` comes once, after the thread has ended (killed or dead). */
export interface HostWorkerEvents {
  reply(reply: WorkerReply): void;
  error(error: Error): void;
  exit(code: number): void;
}

/** The worker's side of its control channel (worker-loop.ts). */
export interface WorkerChannel {
  data: WorkerData;
  /** The next control message, read synchronously; undefined when none is waiting. */
  takeControl(): ControlMessage | undefined;
  reply(reply: WorkerReply): void;
  /**
   * How the worker sleeps when idle: 'block' (Atomics.wait; control messages still reach it
   * through takeControl), or 'event-loop' (Atomics.waitAsync: a page's worker gets its messages
   * only in its event loop, which a blocked worker never reaches).
   */
  sleep: 'block' | 'event-loop';
  close(): void;
}

// Built code runs dist/.../worker.js. Tests run the TypeScript source through tsx, whose loader
// hooks do not reach worker threads on Node 20, so the worker registers them itself first.
const fromSource = import.meta.url.endsWith('.ts');
const workerUrl = new URL(`./worker${fromSource ? '.ts' : '.js'}`, import.meta.url);
const workerScript: string | URL = fromSource
  ? `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(workerUrl.href)}); })`
  : workerUrl;

/**
 * The program's node flags, for the workers (a loader such as tsx's must reach them), less those
 * a worker refuses. `--input-type` (a program run as `node --input-type=module -e ...`) made
 * every worker die at its start. V8's and other process-wide flags (`--expose-gc`,
 * `--max-old-space-size=N`) make `new Worker` throw; they already hold for the whole process,
 * workers included, so the ones Node names are dropped, once, for every worker after.
 */
let workerExecArgv = process.execArgv.filter((arg) => !arg.startsWith('--input-type'));

/** The flags of `execArgv` that Node's ERR_WORKER_INVALID_EXEC_ARGV names; undefined for any other error. */
function refusedFlags(error: unknown): Set<string> | undefined {
  if ((error as { code?: unknown }).code !== 'ERR_WORKER_INVALID_EXEC_ARGV') return undefined;
  const named = /flags: (.+)$/.exec((error as Error).message)?.[1];
  return named === undefined ? undefined : new Set(named.split(', '));
}

/** The data a Node worker gets: the shared part, and the port its control messages come on. */
interface NodeWorkerData extends WorkerData {
  control: MessagePort;
}

/**
 * Starts worker `data.index`. `images` are the loads it takes before its first scan (it holds
 * every image before any launch). The thread does not keep the process alive.
 */
export function startHostWorker(data: WorkerData, images: ControlMessage[], events: HostWorkerEvents): HostWorker {
  const { port1, port2 } = new MessageChannel();
  const options = {
    eval: fromSource,
    workerData: { ...data, control: port2 } satisfies NodeWorkerData,
    transferList: [port2],
    name: `offload-host-${data.index}`,
  };
  let worker: Worker;
  try {
    worker = new Worker(workerScript, { ...options, execArgv: workerExecArgv });
  } catch (error) {
    const refused = refusedFlags(error);
    if (!refused) throw error;
    workerExecArgv = workerExecArgv.filter((arg) => !refused.has(arg));
    worker = new Worker(workerScript, { ...options, execArgv: workerExecArgv });
  }
  // Queued before its first scan, which reads them all.
  for (const message of images) port1.postMessage(message);
  worker.on('message', (reply: WorkerReply) => events.reply(reply));
  worker.on('error', (error) => events.error(error));
  worker.on('exit', (code) => {
    port1.close();
    events.exit(code);
  });
  // Workers must not keep the process alive: an idle runtime that the user forgot to shut
  // down should not hang the program at exit.
  worker.unref();
  return {
    post: (message) => port1.postMessage(message),
    terminate: () => worker.terminate().then(() => undefined),
  };
}

/** The channel of the worker this code runs in (worker.ts), from Node's workerData. */
export function nodeWorkerChannel(
  workerData: unknown,
  parentPort: { postMessage(value: unknown): void },
): WorkerChannel {
  const data = workerData as NodeWorkerData;
  return {
    data,
    takeControl: () => receiveMessageOnPort(data.control)?.message as ControlMessage | undefined,
    reply: (reply) => parentPort.postMessage(reply),
    sleep: 'block',
    close: () => data.control.close(),
  };
}

/**
 * Keeps the process alive while the pool has something outstanding (a launch or a control
 * message): workers are unref'd so an idle runtime never holds the process open, and this timer
 * is ref'd only while a pending promise of ours needs it.
 */
export class ProcessHold {
  private readonly timer = setInterval(() => {}, 1 << 30);
  private count = 0;

  constructor() {
    this.timer.unref();
  }

  hold(): void {
    if (this.count++ === 0) this.timer.ref();
  }

  release(): void {
    if (--this.count === 0) this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
  }
}
