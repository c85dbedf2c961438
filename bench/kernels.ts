// Kernels only `npm run bench` needs (AssemblyScript, compiled by buildBundle; not type-checked
// by tsc). The bench bundle also holds examples/kernels.ts: saxpy and mandelbrot come from there.

/** Does nothing: a launch of it costs only the runtime's overhead. */
export function empty(): void {}
