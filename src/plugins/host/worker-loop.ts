/**
 * A host-device worker's loop, on either platform (worker.ts starts it in Node, and
 * offload-host-worker.ts in a page): runs teams of kernel launches taken from the shared launch ring, by
 * driving its side of the launch protocol (launch-worker-side.ts) and doing what each step asks.
 *
 * It never returns to its event loop while it has launches to run. In Node it sleeps in
 * Atomics.wait on the ring's EPOCH and polls its control port synchronously (receiveMessageOnPort)
 * for image loads and unloads, as piscina's workers do. A page's worker has no synchronous read
 * of its messages: it sleeps in Atomics.waitAsync, in its event loop, where its control messages
 * are handled as they come (handleControl); so a worker kept busy by launches answers a load when
 * it next runs out of teams. After an unload it returns to its event loop once, when idle, to
 * collect the instances (and the device memory they hold) that were dropped.
 */
import type { WorkerChannel } from './host-threads.js';
import { collectGarbage } from './garbage.js';
import { type GridWords, KernelEnvironment, trapText } from './kernel-env.js';
import { callHost, resetMailbox } from './host-calls.js';
import { appendPrint } from './kernel-print.js';
import {
  ARG_KIND,
  type ArgKind,
  type ControlMessage,
  H_DONE_COUNT,
  H_EPOCH,
  LaunchRing,
  S_IMAGE,
  S_KERNEL,
  S_NARGS,
  S_SCRATCH,
  S_SCRATCH_REGION,
  S_STACK_BYTES,
  S_TEAM_BYTES,
  S_TEAMS_X,
  S_TEAMS_Y,
  S_THREADS,
  S_THREADS_X,
  S_THREADS_Y,
  S_TRAPPED,
  type WorkerReply,
} from './launch-ring.js';
import { WorkerAction, WorkerSide } from './launch-worker-side.js';
import { asyncifyOf, runTeamThreads, type Asyncify } from './team-threads.js';

/** Runs the worker's loop over `channel`; returns its control handler (a page's worker calls it on each message). */
export function runHostWorker(channel: WorkerChannel): (message: ControlMessage) => void {
  const data = channel.data;
  const ring = new LaunchRing(data.ring, data.shape);
  const { i32, f64, i64 } = ring;
  const side = new WorkerSide(ring, data.index);

  type KernelFunction = (...args: unknown[]) => unknown;
  interface LoadedKernel {
    name: string;
    fn: KernelFunction;
    kinds: ArgKind[];
    /** Its instance's asyncify exports, when its module has barriers. */
    asyncify: Asyncify | undefined;
  }
  /** Instances by image id; each image is instantiated over its own context's memory. */
  const images = new Map<number, LoadedKernel[]>();
  /** Set by an unload: collect garbage at the next idle moment. */
  let collectPending = false;

  /** The grid of the team running on this worker, and the imports of its instances. */
  const env = new KernelEnvironment();
  // A team's lines go to the records of the slot it holds a claim in (kernel-print.ts).
  env.onPrint = (team, text) => appendPrint(ring, side.slot, team, text);
  // A team's host calls go through this worker's mailbox (host-calls.ts), which starts empty (M4).
  env.onHostCall = (name, args) => callHost(ring, data.index, side.slot, name, args, data.waitBoundMs);
  resetMailbox(ring, data.index);

  function handleControl(message: ControlMessage): void {
    let reply: WorkerReply;
    if (message.type === 'load') {
      try {
        const instance = new WebAssembly.Instance(message.module, env.imports(message.memory));
        const asyncify = asyncifyOf(instance);
        const kernels = message.kernels.map(({ name, kinds }) => {
          const fn = instance.exports[name];
          if (typeof fn !== 'function') throw new Error(`the module exports no function '${name}'`);
          return { name, fn: fn as KernelFunction, kinds, asyncify };
        });
        images.set(message.image, kernels);
        reply = { type: 'loaded', image: message.image, worker: data.index };
      } catch (error) {
        // V8's message may quote the module (an export's name): a few hundred characters say enough.
        const text = String(error);
        reply = {
          type: 'load-failed',
          image: message.image,
          worker: data.index,
          message: text.length > 500 ? `${text.slice(0, 500)}...` : text,
        };
      }
    } else {
      images.delete(message.image);
      collectPending = true;
      reply = { type: 'unloaded', image: message.image, worker: data.index };
    }
    channel.reply(reply);
  }

  function drainControl(): void {
    for (let message = channel.takeControl(); message; message = channel.takeControl()) handleControl(message);
  }

  /** What this worker read of a slot's launch; valid for one entry into the slot and one generation. */
  interface SlotView {
    entry: number;
    gen: number;
    kernel: LoadedKernel | undefined;
    args: unknown[];
    /** The launch's grid and this worker's scratch region, for KernelEnvironment.setGrid. */
    grid: GridWords;
    /** Runs the kernel once with `args` (one thread of a team). */
    run: () => void;
  }
  const views: SlotView[] = Array.from({ length: ring.shape.slots }, () => {
    const view: SlotView = {
      entry: -1,
      gen: 0,
      kernel: undefined,
      args: [],
      grid: [1, 1, 1, 1, 1, 1, 0, 0, 0],
      run: () => view.kernel!.fn(...view.args),
    };
    return view;
  });

  /** Reads the payload of the slot the worker holds a claim in (it cannot change under a claim: I2). */
  function readPayload(slot: number, view: SlotView): void {
    view.entry = side.entry;
    view.gen = side.gen;
    view.kernel = images.get(i32[ring.at(slot, S_IMAGE)]!)?.[i32[ring.at(slot, S_KERNEL)]!];
    const grid = view.grid;
    grid[0] = side.teams;
    grid[1] = i32[ring.at(slot, S_TEAMS_X)]!;
    grid[2] = i32[ring.at(slot, S_TEAMS_Y)]!;
    grid[3] = i32[ring.at(slot, S_THREADS)]!;
    grid[4] = i32[ring.at(slot, S_THREADS_X)]!;
    grid[5] = i32[ring.at(slot, S_THREADS_Y)]!;
    // This worker's region of the launch's scratch memory (team-threads.ts).
    grid[6] = (i32[ring.at(slot, S_SCRATCH)]! >>> 0) + data.index * i32[ring.at(slot, S_SCRATCH_REGION)]!;
    grid[7] = i32[ring.at(slot, S_TEAM_BYTES)]!;
    grid[8] = i32[ring.at(slot, S_STACK_BYTES)]!;
    const nargs = Math.min(i32[ring.at(slot, S_NARGS)]!, ring.shape.maxArgs);
    const kinds = view.kernel?.kinds ?? [];
    view.args = new Array(nargs);
    for (let a = 0; a < nargs; a++) {
      const index = ring.arg(slot, a);
      view.args[a] = kinds[a] === ARG_KIND.i64 ? i64[index] : f64[index];
    }
  }

  function runTeam(): void {
    const slot = side.slot;
    const view = views[slot]!;
    if (view.entry !== side.entry || view.gen !== side.gen) readPayload(slot, view);
    const trapped = ring.at(slot, S_TRAPPED);
    if (Atomics.load(i32, trapped) !== 0) return; // the launch already failed: skip its other teams
    const kernel = view.kernel;
    try {
      if (!kernel) throw new Error('the image of this kernel is not loaded on the worker');
      env.setGrid(view.grid);
      env.teamId = side.team;
      runTeamThreads(env, kernel.asyncify, view.run);
    } catch (error) {
      if (Atomics.compareExchange(i32, trapped, 0, 1) === 0)
        ring.writeErrorText(slot, trapText(kernel?.name ?? '?', side.team, error));
    }
    env.endTrace(kernel?.name ?? '?');
  }

  function run(): void {
    for (;;) {
      switch (side.step()) {
        case WorkerAction.Continue:
          break;
        case WorkerAction.Scan:
          drainControl();
          break;
        case WorkerAction.RunTeam:
          runTeam();
          break;
        case WorkerAction.Sleep:
          if (collectPending) {
            // Idle after an unload: let V8 collect the dropped instances, then go on (a wake-up
            // that came meanwhile is not lost: the next scan reads EPOCH again, I4).
            collectPending = false;
            const hold = setInterval(() => {}, 1 << 30); // keeps the thread alive until then
            void collectGarbage().then(() => {
              clearInterval(hold);
              run();
            });
            return;
          }
          if (channel.sleep === 'event-loop') {
            const wait = Atomics.waitAsync(i32, H_EPOCH, side.epoch, data.waitBoundMs);
            if (wait.async) {
              void wait.value.then(run);
              return;
            }
            break;
          }
          Atomics.wait(i32, H_EPOCH, side.epoch, data.waitBoundMs);
          break;
        case WorkerAction.WakeMain:
          Atomics.notify(i32, H_DONE_COUNT);
          break;
        default:
          // Stop: the pool is closing, or main killed this worker.
          channel.close();
          return;
      }
    }
  }

  run();
  return handleControl;
}
