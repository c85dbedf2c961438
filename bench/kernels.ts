// Kernels of `npm run bench` (AssemblyScript, compiled by buildBundle; not type-checked by tsc).
// Pointers are usize byte offsets into device memory; loops are grid-stride over teams.
import { numTeams, teamId } from "offload-ts/device";

/** Does nothing: a launch of it costs only the runtime's overhead. */
export function empty(): void {}

/**
 * y[i] = a * x[i] + y[i] for i < n, over f32 vectors. Each team takes one contiguous block, so
 * no two workers write the same cache line, and the team numbers are read once, not per element.
 */
export function saxpy(n: i32, a: f32, x: usize, y: usize): void {
  const teams = numTeams();
  const block = (n + teams - 1) / teams;
  const start = teamId() * block;
  const end = min(n, start + block);
  for (let i = start; i < end; i++) {
    const offset = <usize>i << 2;
    store<f32>(y + offset, a * load<f32>(x + offset) + load<f32>(y + offset));
  }
}
