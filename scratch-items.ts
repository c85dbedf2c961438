import { Offload } from './src/index.js';
import { benchBundle } from './bench/kernel-bundle.js';
const rt = await Offload.init({ host: { memoryBytes: 256 * 1024 * 1024 } });
const device = rt.devices.find((d) => d.info.plugin === 'host')!;
const lib = await rt.register(await benchBundle());
const q = device.queue();
const n = 2 ** 24;
const w = device.info.computeUnits;
const block = await device.kernel(lib, 'saxpy');
const items = await device.kernel(lib, 'saxpy_items');
const mi = await device.kernel(lib, 'mandelbrot_items');
const mb = await device.kernel(lib, 'mandelbrot');
console.log('workers', w, 'suggest', device.suggestGrid(items, { items: n }));
const x = await device.alloc(n * 4), y = await device.alloc(n * 4);
q.write(x, Float32Array.from({ length: n }, (_, i) => (i % 1000) / 1000));
q.write(y, new Float32Array(n).fill(1));
const [width, height, maxIter, x0, y0] = [1024, 768, 256, -2.2, -1.125];
const dx = 3 / width;
const out = await device.alloc(width * height * 4);
await q.finish();
const variants: [string, () => Promise<unknown>][] = [
  ['items', () => q.launch(items, { items: n }, [0.5, x, y]).done],
  ['block8', () => q.launch(block, { teams: 8 * w }, [n, 0.5, x, y]).done],
  ['block16', () => q.launch(block, { teams: 16 * w }, [n, 0.5, x, y]).done],
  ['mitems', () => q.launch(mi, { items: [width, height] }, [maxIter, x0, y0, dx, out]).done],
  ['mblock16', () => q.launch(mb, { teams: 16 * w }, [width, height, maxIter, x0, y0, dx, out]).done],
];
const times: Record<string, number[]> = {};
const R = Number(process.env.R ?? 31);
for (let rep = 0; rep < R; rep++)
  for (let v = 0; v < variants.length; v++) {
    const [name, run] = variants[(v + rep) % variants.length]!;
    const t = performance.now();
    await run();
    (times[name] ??= []).push(performance.now() - t);
  }
for (const [name, ts] of Object.entries(times)) { ts.sort((a, b) => a - b); console.log(name, 'median ms', ts[R >> 1].toFixed(2), 'min', ts[0].toFixed(2)); }
await rt.shutdown();
