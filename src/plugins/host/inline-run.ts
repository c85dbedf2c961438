/**
 * Inline runs: a launch run on the calling thread (where its kernel's policy placed it,
 * inline.ts), by an instance of its image made on this thread over the context's memory. The
 * thread runs one launch at a time (a kernel cannot launch), so one environment (grid, imports,
 * print lines) serves them all.
 */
import { errors } from '../../errors.js';
import { performance } from '../../platform.js';
import type { Grid, PrintListener } from '../interface.js';
import type { HostImage, HostKernel, KernelFunction } from './context-images.js';
import { trapText, type GridWords, KernelEnvironment } from './kernel-env.js';
import { droppedLine } from './kernel-print.js';
import { fitErrorText, PRINT_BYTES } from './launch-ring.js';
import type { TeamShape } from './launch-protocol.js';
import { asyncifyOf, runTeamThreads } from './team-threads.js';

/** A team's call of `fn`, for runTeamThreads (made apart: a closure in runInline would cost every inline launch its context). */
const teamThreadsRun =
  (fn: KernelFunction, values: unknown[]): (() => unknown) =>
  () =>
    fn(...values);

/** The grid and imports of every inline kernel: this thread runs one team at a time. */
const inlineEnv = new KernelEnvironment();

/**
 * The print() lines of the inline launch running on this thread (one at a time: a kernel cannot
 * launch), kept within a worker slot's budget and delivered when it ends; reused across launches.
 */
class InlinePrints {
  private readonly lines: { team: number; text: string }[] = [];
  private bytes = 0;
  private dropped = 0;

  readonly add = (team: number, text: string): void => {
    this.bytes += 8 + text.length;
    if (this.bytes > PRINT_BYTES) this.dropped++;
    else this.lines.push({ team, text });
  };

  /** Hands the lines to `print` (if any) and forgets them. */
  deliver(kernel: string, print: PrintListener | undefined): void {
    if (print) {
      for (const { team, text } of this.lines) print(kernel, team, text);
      if (this.dropped > 0) print(kernel, -1, droppedLine(this.dropped));
    }
    // Only when there were lines: setting an array's length is a call into V8's runtime.
    if (this.lines.length !== 0) this.lines.length = 0;
    this.bytes = 0;
    this.dropped = 0;
  }
}

const inlinePrints = new InlinePrints();
/** The grid of the inline launch running now (KernelEnvironment.setGrid), reused. */
const inlineGrid: GridWords = [1, 1, 1, 1, 1, 1, 0, 0, 0];
inlineEnv.onPrint = inlinePrints.add;

/**
 * Instantiates the image's module on this thread, over `memory`, for its kernels' inline runs;
 * a kernel that calls the host gets none.
 */
export function instantiateInline(image: HostImage, module: WebAssembly.Module, memory: WebAssembly.Memory): void {
  // The same module over the same memory, on this thread (its data segments write what the
  // workers' instances wrote: the bytes of this image's own static range).
  const instance = new WebAssembly.Instance(module, inlineEnv.imports(memory));
  const asyncify = asyncifyOf(instance);
  for (const kernel of image.kernels.values()) {
    // A host call waits for this very thread: such a kernel runs on the workers only.
    if (kernel.callsHost) continue;
    kernel.inline = instance.exports[kernel.name] as KernelFunction;
    kernel.inlineAsyncify = asyncify;
  }
}

/**
 * Drops the image's instance on this thread: a Kernel handle the program still holds must not
 * keep the instance, and with it the context's memory, alive; its later launches go to the
 * workers, which refuse them as unloaded.
 */
export function dropInline(image: HostImage): void {
  for (const kernel of image.kernels.values()) {
    kernel.inline = undefined;
    kernel.inlineAsyncify = undefined;
  }
}

/**
 * Runs every team of a launch here, in order, as the workers would: a trap ends the launch
 * with the same KERNEL_TRAP text; a time limit is checked afterwards (a wasm call on this
 * thread cannot be stopped), which the policy makes rare by running only short kernels here.
 */
export function runInline(
  kernel: HostKernel,
  fn: KernelFunction,
  grid: Grid,
  shape: TeamShape | undefined,
  values: unknown[],
  print: PrintListener | undefined,
  /** The device's workers (DeviceInfo.computeUnits). */
  computeUnits: number,
): void {
  const env = inlineEnv;
  // The calling thread's scratch region is the one after the workers'.
  const region = shape === undefined ? 0 : shape.scratch + computeUnits * shape.regionBytes;
  inlineGrid[0] = grid.teams;
  inlineGrid[1] = grid.teamDims[0];
  inlineGrid[2] = grid.teamDims[1];
  inlineGrid[3] = grid.threads;
  inlineGrid[4] = grid.threadDims[0];
  inlineGrid[5] = grid.threadDims[1];
  inlineGrid[6] = region;
  inlineGrid[7] = shape?.teamMemoryBytes ?? 0;
  inlineGrid[8] = shape?.stackBytes ?? 0;
  env.setGrid(inlineGrid);
  const run = grid.threads === 1 ? undefined : teamThreadsRun(fn, values);
  const started = performance.now();
  let trap: string | undefined;
  let team = 0;
  for (; team < grid.teams; team++) {
    env.teamId = team;
    try {
      if (run === undefined) fn(...values);
      else runTeamThreads(env, kernel.inlineAsyncify, run);
    } catch (error) {
      trap = trapText(kernel.name, team, error);
      break;
    } finally {
      env.endTrace(kernel.name);
    }
  }
  inlinePrints.deliver(kernel.name, print);
  const ms = performance.now() - started;
  kernel.policy.ranInline(Math.min(team + 1, grid.teams), ms * 1000);
  // Cut as a worker's ring slot cuts it, so the text is the same wherever the team ran.
  if (trap !== undefined) throw errors.kernelTrap(new TextDecoder().decode(fitErrorText(trap)));
  if (grid.timeoutMs !== undefined && ms > grid.timeoutMs) {
    throw errors.timeout(
      `launch of kernel '${kernel.name}' (${grid.teams} teams) ran past its time limit of ${grid.timeoutMs} ms on the calling thread, ` +
        `where it cannot be stopped: it ran to its end in ${ms.toFixed(1)} ms (OFFLOAD_HOST_INLINE=never keeps launches on the workers)`,
    );
  }
}
