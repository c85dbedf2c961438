// Kernels only `npm run bench` needs (AssemblyScript, compiled by buildBundle; not type-checked
// by tsc). The bench bundle also holds examples/kernels.ts: saxpy and mandelbrot come from there.
import { hostCall, teamId, threadId } from "offload-ts/device";

/** Does nothing: a launch of it costs only the runtime's overhead. */
export function empty(): void {}

/** Calls the program's host function "tick" n times from one thread: the cost of hostCall. */
export function host_calls(n: i32): void {
  if (teamId() != 0 || threadId() != 0) return;
  for (let i = 0; i < n; i++) hostCall("tick", 1, <f64>i);
}
