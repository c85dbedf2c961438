// The `offload demo` kernels a WebGPU device runs (WGSL, by docs/wgsl-abi.md). dot_partial and
// mandelbrot compute in f64, which WGSL lacks: they exist in kernels.ts only.

override threads: u32 = 64;

// saxpy(n: i32, a: f32, x: ptr, y: ptr), the same parameters as in kernels.ts: y = a * x + y.
struct Saxpy { n: i32, a: f32 }
@group(0) @binding(0) var<uniform> args: Saxpy;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(threads)
fn saxpy(@builtin(global_invocation_id) id: vec3u, @builtin(num_workgroups) groups: vec3u) {
  for (var i = id.x; i < u32(args.n); i += groups.x * threads) { y[i] = args.a * x[i] + y[i]; }
}
