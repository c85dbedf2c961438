import { Offload } from './src/index.js';
import { cachedBundle } from './src/cli/kernel-cache.js';
const rt = await Offload.init({ host: { memoryBytes: 256 * 1024 * 1024 } });
const device = rt.devices.find((d) => d.info.plugin === 'host')!;
const lib = await rt.register((await cachedBundle(['/tmp/s4/k/k.ts'], { label: 's4k' })).path);
const q = device.queue();
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
const b = new Uint32Array(width * height);
const times: Record<string, number[]> = {};
const v: [string, () => unknown][] = [['plain64', () => plain(b)]];
for (const k of ['m_items', 'm_items2', 'm_items64']) { const kk = await device.kernel(lib, k); v.push([k, () => q.launch(kk, { items: [width, height] }, [maxIter, x0, y0, dx, out]).done]); }
for (let r = 0; r < 9; r++) for (const [n, run] of v) { const t = performance.now(); await run(); if (r >= 2) (times[n] ??= []).push(performance.now() - t); }
for (const [n, ts] of Object.entries(times)) { ts.sort((p, q) => p - q); console.log(n, ts[3].toFixed(1)); }
await rt.shutdown();
