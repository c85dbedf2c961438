// Kernels only `npm run bench` needs (AssemblyScript, compiled by buildBundle; not type-checked
// by tsc). The bench bundle also holds examples/kernels.ts: saxpy and mandelbrot, per item and hand-written, come from there.
import { hostCall, teamId, threadId } from "offload-ts/device";

/** Does nothing: a launch of it costs only the runtime's overhead. */
export function empty(): void {}

/** Calls the program's host function "tick" n times from one thread: the cost of hostCall. */
export function host_calls(n: i32): void {
  if (teamId() != 0 || threadId() != 0) return;
  for (let i = 0; i < n; i++) hostCall("tick", 1, <f64>i);
}

/**
 * The same work in every team: `iterations` steps of a dependent f32 recurrence on thread 0,
 * stored at out + 4 * teamId. A range of teams whose cost is its length, for `npm run bench --
 * spread` (total work over summed throughput is then the ideal time).
 */
export function team_work(iterations: i32, out: usize): void {
  if (threadId() != 0) return;
  let x: f32 = <f32>teamId();
  for (let k = 0; k < iterations; k++) x = x * 0.999999 + 0.000001;
  store<f32>(out + (<usize>teamId() << 2), x);
}
