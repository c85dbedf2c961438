// The `webgpu` bench suite's baseline for the WGSL translation: saxpy and xs_lookup of
// kernels.ts beside this file written by hand in WGSL (the twins the bench ran before offload
// build translated kernels.ts). Nothing runs them but the rows "translated vs hand-written WGSL",
// which build kernels.ts with this file (a hand-written kernel wins over its translation).
// The WGSL kernel ABI: group-0 storage buffers are the pointers in binding order, the uniform
// struct's members the scalars in order (u32 travels as i32). Teams are workgroups of `threads`
// invocations, set by the launch.

override threads: u32 = 64;

// saxpy(n: i32, a: f32, x: ptr, y: ptr)

struct SaxpyScalars {
  n: u32,
  a: f32,
}

@group(0) @binding(0) var<uniform> saxpyScalars: SaxpyScalars;
@group(0) @binding(1) var<storage, read> saxpyX: array<f32>;
@group(0) @binding(2) var<storage, read_write> saxpyY: array<f32>;

/** y[i] = a * x[i] + y[i] for i < n, one element per invocation, grid-stride past teams * threads. */
@compute @workgroup_size(threads)
fn saxpy(@builtin(global_invocation_id) id: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let n = saxpyScalars.n;
  let a = saxpyScalars.a;
  let stride = groups.x * threads;
  for (var i = id.x; i < n; i += stride) {
    saxpyY[i] = a * saxpyX[i] + saxpyY[i];
  }
}

// xs_lookup(count: i32, gridPoints: i32, maxNucs: i32, seed: i32,
//           energy: ptr, xs: ptr, numNucs: ptr, mats: ptr, concs: ptr, out: ptr)

struct LookupScalars {
  count: u32,
  gridPoints: u32,
  maxNucs: u32,
  seed: u32,
}

@group(0) @binding(0) var<uniform> lookupScalars: LookupScalars;
@group(0) @binding(1) var<storage, read> energy: array<f32>;
@group(0) @binding(2) var<storage, read> xs: array<f32>;
@group(0) @binding(3) var<storage, read> numNucs: array<i32>;
@group(0) @binding(4) var<storage, read> mats: array<i32>;
@group(0) @binding(5) var<storage, read> concs: array<f32>;
@group(0) @binding(6) var<storage, read_write> lookupOut: array<f32>;

const LCG_A: u32 = 1664525u;
const LCG_C: u32 = 1013904223u;
const HASH_MUL: u32 = 2654435761u;
const INV_2_24: f32 = 5.9604644775390625e-8;
const MATERIALS: u32 = 12u;
const CHANNELS: u32 = 5u;

fn lcg(state: u32) -> u32 {
  return state * LCG_A + LCG_C;
}

/** The simplified XSBench lookup of kernels.ts (see there), lookup i per invocation, grid-stride. */
@compute @workgroup_size(threads)
fn xs_lookup(@builtin(global_invocation_id) id: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let count = lookupScalars.count;
  let points = lookupScalars.gridPoints;
  let maxNucs = lookupScalars.maxNucs;
  let stride = groups.x * threads;
  for (var i = id.x; i < count; i += stride) {
    var state = (i * HASH_MUL) ^ lookupScalars.seed;
    state = lcg(lcg(state));
    let e = f32(state >> 8u) * INV_2_24;
    state = lcg(state);
    let mat = (state >> 8u) % MATERIALS;
    var m0 = 0.0f;
    var m1 = 0.0f;
    var m2 = 0.0f;
    var m3 = 0.0f;
    var m4 = 0.0f;
    let nucs = u32(numNucs[mat]);
    for (var j = 0u; j < nucs; j++) {
      let at = mat * maxNucs + j;
      let nuc = u32(mats[at]);
      let conc = concs[at];
      let grid = nuc * points;
      // The largest lo with energy[grid + lo] <= e; the grid runs from 0 to 1, e is in [0, 1).
      var lo = 0u;
      var hi = points - 1u;
      while (hi - lo > 1u) {
        let mid = (lo + hi) >> 1u;
        if (energy[grid + mid] > e) {
          hi = mid;
        } else {
          lo = mid;
        }
      }
      let e0 = energy[grid + lo];
      let e1 = energy[grid + lo + 1u];
      let f = (e - e0) / (e1 - e0);
      let low = (grid + lo) * CHANNELS;
      let high = low + CHANNELS;
      m0 += conc * (xs[low] + f * (xs[high] - xs[low]));
      m1 += conc * (xs[low + 1u] + f * (xs[high + 1u] - xs[low + 1u]));
      m2 += conc * (xs[low + 2u] + f * (xs[high + 2u] - xs[low + 2u]));
      m3 += conc * (xs[low + 3u] + f * (xs[high + 3u] - xs[low + 3u]));
      m4 += conc * (xs[low + 4u] + f * (xs[high + 4u] - xs[low + 4u]));
    }
    let result = i * CHANNELS;
    lookupOut[result] = m0;
    lookupOut[result + 1u] = m1;
    lookupOut[result + 2u] = m2;
    lookupOut[result + 3u] = m3;
    lookupOut[result + 4u] = m4;
  }
}
