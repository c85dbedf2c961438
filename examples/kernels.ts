// Kernels of the `offload demo` command (AssemblyScript, compiled by buildBundle; not
// type-checked by tsc). Pointers are usize byte offsets into device memory. One source for every
// device: offload build compiles them to wasm (the host device) and translates them to WGSL (the
// WebGPU device; README "One kernel source for every device"), so they compute in f32, the
// floating point type WGSL has. saxpy_items and mandelbrot_items are written for one item (the
// demo runs these): the device maps the items to its hardware. The hand-written kernels below
// them choose their own mapping: each team takes one contiguous block and its threads stride
// through it, one thread per team on the host, a workgroup of them on a GPU.
import { barrier, item, itemCount, itemId, numTeams, numThreads, ptr, teamId, teamMemory, threadId } from "offload-ts/device";
import { anyLane, countWhere, laneIndices, loadF32x4, selectLanes, storeF32x4, storeI32x4 } from "offload-ts/device";

/** y[i] = a * x[i] + y[i], for one element: launched with { items: n }; the build makes the block loop. */
export function saxpy_items(i: item, a: f32, x: ptr<f32>, y: ptr<f32>): void {
  y[i] = a * x[i] + y[i];
}

/** mandelbrot's escape count of one pixel, launched with { items: [width, height] }. */
export function mandelbrot_items(col: item, maxIter: i32, x0: f32, y0: f32, dx: f32, out: ptr<u32>): void {
  const row = itemId(1);
  const cx = x0 + <f32>col * dx;
  const cy = y0 + <f32>row * dx;
  let zx: f32 = 0.0;
  let zy: f32 = 0.0;
  // The squares kept for the next test (the same arithmetic as mandelbrot's, bit for bit): V8
  // did not reuse them from the test, and this loop ran 1.2-1.3x faster on one worker.
  let xx: f32 = 0.0;
  let yy: f32 = 0.0;
  let iter = 0;
  while (iter < maxIter && xx + yy <= 4.0) {
    zy = 2.0 * zx * zy + cy;
    zx = xx - yy + cx;
    xx = zx * zx;
    yy = zy * zy;
    iter++;
  }
  out[row * itemCount(0) + col] = <u32>iter;
}

/**
 * y[i] = a * x[i] + y[i] for i < n, over f32 vectors. With one thread per team (the host device)
 * each team takes one contiguous block, so no two workers write the same cache line; with teams
 * of threads (a GPU) every invocation strides over the whole grid, so that neighbouring
 * invocations touch neighbouring elements. The branch is the same for the whole launch.
 */
export function saxpy(n: i32, a: f32, x: usize, y: usize): void {
  // Read once: on the host device each device library call is a call out of wasm.
  const threads = numThreads();
  const teams = numTeams();
  let start = teamId() * threads + threadId();
  let end = n;
  let stride = teams * threads;
  if (threads == 1) {
    const block = (n + teams - 1) / teams;
    start = teamId() * block;
    end = min(n, start + block);
    stride = 1;
  }
  for (let i = start; i < end; i += stride) {
    const offset = <usize>i << 2;
    store<f32>(y + offset, a * load<f32>(x + offset) + load<f32>(y + offset));
  }
}

/**
 * Iteration counts of the Mandelbrot set over a width x height grid whose pixel (col, row) is the
 * point (x0 + col * dx, y0 + row * dx), in f32; out receives u32 counts, row-major. Rows are
 * spread over the teams, a row's pixels over the team's threads.
 */
export function mandelbrot(width: i32, height: i32, maxIter: i32, x0: f32, y0: f32, dx: f32, out: usize): void {
  const teams = numTeams();
  const threads = numThreads();
  const thread = threadId();
  for (let row = teamId(); row < height; row += teams) {
    const cy = y0 + <f32>row * dx;
    const rowStart = out + ((<usize>row * <usize>width) << 2);
    for (let col = thread; col < width; col += threads) {
      const cx = x0 + <f32>col * dx;
      let zx: f32 = 0.0;
      let zy: f32 = 0.0;
      let iter = 0;
      while (iter < maxIter && zx * zx + zy * zy <= 4.0) {
        const t = zx * zx - zy * zy + cx;
        zy = 2.0 * zx * zy + cy;
        zx = t;
        iter++;
      }
      store<u32>(rowStart + (<usize>col << 2), <u32>iter);
    }
  }
}

/**
 * Partial dot products of two f32 vectors of length n: each team sums x[i] * y[i] over its
 * contiguous block in f32, thread k of the team over elements k, k + numThreads(), ... of it, and
 * stores the sum at partials + (teamId * numThreads + k) * 4: one partial per team on the host,
 * one per thread on a GPU. The host adds the partials.
 */
export function dot_partial(n: i32, x: usize, y: usize, partials: usize): void {
  const teams = numTeams();
  const team = teamId();
  const block = (n + teams - 1) / teams;
  const start = team * block;
  const end = min(n, start + block);
  const threads = numThreads();
  const thread = threadId();
  let sum: f32 = 0.0;
  for (let i = start + thread; i < end; i += threads) {
    const offset = <usize>i << 2;
    sum += load<f32>(x + offset) * load<f32>(y + offset);
  }
  store<f32>(partials + ((<usize>team * <usize>threads + <usize>thread) << 2), sum);
}

/**
 * output = the transpose of input (width x height f32, row-major; output is height x width), by
 * square tiles of numThreads(0) x numThreads(0) threads through team memory: each thread reads
 * one element of its team's tile along a row of input, the team meets at a barrier, and each
 * thread writes one element along a row of output, so both the reads and the writes are
 * contiguous. Team memory holds tile x (tile + 1) f32 (the extra column keeps a GPU's memory
 * banks apart). Launch with teams [ceil(width / tile), ceil(height / tile)], threads [tile,
 * tile] and teamMemoryBytes tile * (tile + 1) * 4.
 */
export function transpose(width: i32, height: i32, input: usize, output: usize): void {
  const tile = numThreads(0);
  const tx = threadId(0);
  const ty = threadId(1);
  const column = teamId(0) * tile;
  const row = teamId(1) * tile;
  const team = teamMemory();
  const pitch = tile + 1;
  if (column + tx < width && row + ty < height) {
    store<f32>(team + (<usize>(ty * pitch + tx) << 2), load<f32>(input + (<usize>((row + ty) * width + column + tx) << 2)));
  }
  barrier();
  if (row + tx < height && column + ty < width) {
    store<f32>(output + (<usize>((column + ty) * height + row + tx) << 2), load<f32>(team + (<usize>(tx * pitch + ty) << 2)));
  }
}

/** The same transpose without team memory: each thread reads along a row and writes along a column of output. */
export function transpose_naive(width: i32, height: i32, input: usize, output: usize): void {
  const tile = numThreads(0);
  const x = teamId(0) * tile + threadId(0);
  const y = teamId(1) * tile + threadId(1);
  if (x < width && y < height) store<f32>(output + (<usize>(x * height + y) << 2), load<f32>(input + (<usize>(y * width + x) << 2)));
}

/**
 * mandelbrot four pixels at a time (wasm SIMD: four f32 lanes): the same counts as mandelbrot,
 * bit for bit. A lane that has left the disc keeps its count and its z (selectLanes) while its
 * neighbours iterate on; the loop ends when no lane is inside or at maxIter. A thread takes
 * groups of four neighbouring pixels of a row. Wasm devices only (WGSL has no v128).
 */
export function mandelbrot_simd(width: i32, height: i32, maxIter: i32, x0: f32, y0: f32, dx: f32, out: usize): void {
  const teams = numTeams();
  const threads = numThreads();
  const thread = threadId();
  const four = f32x4.splat(4.0);
  const two = f32x4.splat(2.0);
  const left = f32x4.splat(x0);
  const step = f32x4.splat(dx);
  for (let row = teamId(); row < height; row += teams) {
    const cy = f32x4.splat(y0 + <f32>row * dx);
    const rowStart = out + ((<usize>row * <usize>width) << 2);
    for (let col = thread * 4; col < width; col += threads * 4) {
      // x0 + col * dx per lane, as mandelbrot computes it.
      const cx = f32x4.add(left, f32x4.mul(f32x4.convert_i32x4_s(laneIndices(col)), step));
      let zx = f32x4.splat(0.0);
      let zy = f32x4.splat(0.0);
      let counts = i32x4.splat(0);
      for (let iter = 0; iter < maxIter; iter++) {
        const xx = f32x4.mul(zx, zx);
        const yy = f32x4.mul(zy, zy);
        const inside = f32x4.le(f32x4.add(xx, yy), four);
        if (!anyLane(inside)) break;
        counts = countWhere(counts, inside);
        const t = f32x4.add(f32x4.sub(xx, yy), cx);
        zy = selectLanes(f32x4.add(f32x4.mul(f32x4.mul(two, zx), zy), cy), zy, inside);
        zx = selectLanes(t, zx, inside);
      }
      if (col + 4 <= width) {
        storeI32x4(rowStart, col, counts);
      } else {
        // The row's last pixels: as many lanes as are left.
        const at = rowStart + (<usize>col << 2);
        store<i32>(at, i32x4.extract_lane(counts, 0));
        if (col + 1 < width) store<i32>(at, i32x4.extract_lane(counts, 1), 4);
        if (col + 2 < width) store<i32>(at, i32x4.extract_lane(counts, 2), 8);
      }
    }
  }
}

/**
 * c = a * b for n x n f32 matrices, row-major. Row i of c by team i mod numTeams, its columns
 * over the team's threads; each element sums a[i][k] * b[k][j] for k = 0, 1, ... in f32, in that
 * order (rows of b along the columns of c: both read along rows). Four steps of k at a time, the
 * sum kept in a register between them (the same additions in the same order).
 */
export function matmul(n: i32, a: usize, b: usize, c: usize): void {
  const teams = numTeams();
  const threads = numThreads();
  const thread = threadId();
  const rowBytes = <usize>n << 2;
  for (let i = teamId(); i < n; i += teams) {
    const aRow = a + <usize>i * rowBytes;
    const cRow = c + <usize>i * rowBytes;
    for (let j = thread; j < n; j += threads) store<f32>(cRow + (<usize>j << 2), 0.0);
    let k = 0;
    for (; k + 4 <= n; k += 4) {
      const at = aRow + (<usize>k << 2);
      const a0 = load<f32>(at);
      const a1 = load<f32>(at, 4);
      const a2 = load<f32>(at, 8);
      const a3 = load<f32>(at, 12);
      const b0 = b + <usize>k * rowBytes;
      for (let j = thread; j < n; j += threads) {
        const col = <usize>j << 2;
        let sum = load<f32>(cRow + col) + a0 * load<f32>(b0 + col);
        sum = sum + a1 * load<f32>(b0 + rowBytes + col);
        sum = sum + a2 * load<f32>(b0 + 2 * rowBytes + col);
        store<f32>(cRow + col, sum + a3 * load<f32>(b0 + 3 * rowBytes + col));
      }
    }
    for (; k < n; k++) {
      const aik = load<f32>(aRow + (<usize>k << 2));
      const bRow = b + <usize>k * rowBytes;
      for (let j = thread; j < n; j += threads) {
        const col = <usize>j << 2;
        store<f32>(cRow + col, load<f32>(cRow + col) + aik * load<f32>(bRow + col));
      }
    }
  }
}

/**
 * matmul four columns at a time (wasm SIMD): the same sums in the same order, so the same c bit
 * for bit. A thread takes groups of four columns; thread 0 also the last n mod 4. Wasm devices
 * only (WGSL has no v128).
 */
export function matmul_simd(n: i32, a: usize, b: usize, c: usize): void {
  const teams = numTeams();
  const threads = numThreads();
  const thread = threadId();
  const rowBytes = <usize>n << 2;
  const full = n & ~3;
  const zero = f32x4.splat(0.0);
  for (let i = teamId(); i < n; i += teams) {
    const aRow = a + <usize>i * rowBytes;
    const cRow = c + <usize>i * rowBytes;
    for (let j = thread * 4; j < full; j += threads * 4) storeF32x4(cRow, j, zero);
    if (thread == 0) for (let j = full; j < n; j++) store<f32>(cRow + (<usize>j << 2), 0.0);
    let k = 0;
    for (; k + 4 <= n; k += 4) {
      const at = aRow + (<usize>k << 2);
      const a0 = load<f32>(at);
      const a1 = load<f32>(at, 4);
      const a2 = load<f32>(at, 8);
      const a3 = load<f32>(at, 12);
      const l0 = f32x4.splat(a0);
      const l1 = f32x4.splat(a1);
      const l2 = f32x4.splat(a2);
      const l3 = f32x4.splat(a3);
      const b0 = b + <usize>k * rowBytes;
      const b1 = b0 + rowBytes;
      const b2 = b1 + rowBytes;
      const b3 = b2 + rowBytes;
      for (let j = thread * 4; j < full; j += threads * 4) {
        let sum = f32x4.add(loadF32x4(cRow, j), f32x4.mul(l0, loadF32x4(b0, j)));
        sum = f32x4.add(sum, f32x4.mul(l1, loadF32x4(b1, j)));
        sum = f32x4.add(sum, f32x4.mul(l2, loadF32x4(b2, j)));
        storeF32x4(cRow, j, f32x4.add(sum, f32x4.mul(l3, loadF32x4(b3, j))));
      }
      if (thread == 0) {
        for (let j = full; j < n; j++) {
          const col = <usize>j << 2;
          let sum = load<f32>(cRow + col) + a0 * load<f32>(b0 + col);
          sum = sum + a1 * load<f32>(b1 + col);
          sum = sum + a2 * load<f32>(b2 + col);
          store<f32>(cRow + col, sum + a3 * load<f32>(b3 + col));
        }
      }
    }
    for (; k < n; k++) {
      const aik = load<f32>(aRow + (<usize>k << 2));
      const lanes = f32x4.splat(aik);
      const bRow = b + <usize>k * rowBytes;
      for (let j = thread * 4; j < full; j += threads * 4) {
        storeF32x4(cRow, j, f32x4.add(loadF32x4(cRow, j), f32x4.mul(lanes, loadF32x4(bRow, j))));
      }
      if (thread == 0) {
        for (let j = full; j < n; j++) {
          const col = <usize>j << 2;
          store<f32>(cRow + col, load<f32>(cRow + col) + aik * load<f32>(bRow + col));
        }
      }
    }
  }
}
