import { Offload } from './src/index.js';
import { benchBundle } from './bench/kernel-bundle.js';
const rt = await Offload.init({ host: { memoryBytes: 256 * 1024 * 1024 } });
const device = rt.devices.find((d) => d.info.plugin === 'host')!;
const lib = await rt.register(await benchBundle());
const q = device.queue();
const mi = await device.kernel(lib, 'mandelbrot_items');
const [width, height, maxIter, x0, y0] = [1024, 768, 256, -2.2, -1.125];
const dx = 3 / width;
const out = await device.alloc(width * height * 4);
function plain(out: Uint32Array) {
  for (let row = 0; row < height; row++) {
    const cy = y0 + row * dx;
    for (let col = 0; col < width; col++) {
      const cx = x0 + col * dx;
      let zx = 0, zy = 0, iter = 0;
      while (iter < maxIter && zx * zx + zy * zy <= 4) { const t = zx * zx - zy * zy + cx; zy = 2 * zx * zy + cy; zx = t; iter++; }
      out[row * width + col] = iter;
    }
  }
}
const f = Math.fround;
function plain32(out: Uint32Array) {
  const X0 = f(x0), Y0 = f(y0), DX = f(dx);
  for (let row = 0; row < height; row++) {
    const cy = f(Y0 + f(f(row) * DX));
    for (let col = 0; col < width; col++) {
      const cx = f(X0 + f(f(col) * DX));
      let zx = 0, zy = 0, iter = 0;
      while (iter < maxIter && f(f(zx * zx) + f(zy * zy)) <= 4) { const t = f(f(f(zx * zx) - f(zy * zy)) + cx); zy = f(f(f(2 * zx) * zy) + cy); zx = t; iter++; }
      out[row * width + col] = iter;
    }
  }
}
const a = new Uint32Array(width * height), b = new Uint32Array(width * height), c = new Uint32Array(width * height);
const times: Record<string, number[]> = {};
const v: [string, () => unknown][] = [
  ['items', () => q.launch(mi, { items: [width, height] }, [maxIter, x0, y0, dx, out]).done],
  ['plain64', () => plain(b)],
  ['plain32', () => plain32(c)],
];
for (let r = 0; r < 9; r++) for (const [n, run] of v) { const t = performance.now(); await run(); if (r >= 2) (times[n] ??= []).push(performance.now() - t); }
q.read(out, a); await q.finish();
const sum = (x: Uint32Array) => x.reduce((s, v) => s + v, 0);
console.log('iterations', sum(a), sum(b), sum(c), 'differ64', a.filter((x, i) => x !== b[i]).length, 'differ32', a.filter((x, i) => x !== c[i]).length);
for (const [n, ts] of Object.entries(times)) { ts.sort((p, q) => p - q); console.log(n, ts[3].toFixed(1)); }
await rt.shutdown();
