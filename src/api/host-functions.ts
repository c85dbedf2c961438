/**
 * The program's functions that kernels may call (the device library's hostCall): a registry
 * per runtime, `runtime.hostFunctions`. A kernel names a function; its numbers come as
 * arguments, and the function's number goes back to the kernel, which waits for it.
 */
import { errors } from '../errors.js';
import { MAX_HOST_FUNCTION_NAME } from '../plugins/interface.js';
import { describe } from './checks.js';

/** A function kernels may call: numbers in, a number (or a promise of one) out. */
export type HostFunction = (...args: number[]) => number | Promise<number>;

/** A kernel's call of a host function, as a context's hostCall option receives it. */
export interface HostCall {
  /** The device's id and the queue the launch was enqueued on (in the runtime that launched it). */
  device: number;
  queue: number;
  kernel: string;
  name: string;
  args: number[];
}

export class HostFunctions {
  private readonly functions = new Map<string, HostFunction>();

  /**
   * Lets kernels call `fn` as `hostCall(name, ...)`. It runs on the program's thread (also for
   * a kernel behind a proxy: the call travels back); a kernel waits for its result. A throw or a
   * rejection traps the kernel with its message.
   * @throws OffloadError INVALID_ARGUMENT for a name that is not 1 to 128 characters, a name
   *   already taken (delete it first), or an `fn` that is not a function.
   */
  add(name: string, fn: HostFunction): void {
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_HOST_FUNCTION_NAME) {
      throw errors.invalidArgument(
        `hostFunctions.add: name must be a string of 1 to ${MAX_HOST_FUNCTION_NAME} characters, got ${describe(name)}`,
      );
    }
    if (typeof fn !== 'function')
      throw errors.invalidArgument(
        `hostFunctions.add: the function for '${name}' must be a function, got ${describe(fn)}`,
      );
    if (this.functions.has(name))
      throw errors.invalidArgument(`hostFunctions.add: a host function '${name}' exists already; delete it first`);
    this.functions.set(name, fn);
  }

  /** Removes host function `name`; true if there was one. Calls already running finish. */
  delete(name: string): boolean {
    return this.functions.delete(name);
  }

  has(name: string): boolean {
    return this.functions.has(name);
  }

  /** @internal Runs a kernel's call; rejects with the reason the kernel traps with. */
  async call({ kernel, name, args }: HostCall): Promise<number> {
    const fn = this.functions.get(name);
    if (fn === undefined) {
      throw new Error(
        `kernel '${kernel}' called host function '${name}', which the program has not added (runtime.hostFunctions.add('${name}', fn))`,
      );
    }
    const value = await fn(...args);
    if (typeof value !== 'number') throw new Error(`host function '${name}' returned ${describe(value)}, not a number`);
    return value;
  }
}
