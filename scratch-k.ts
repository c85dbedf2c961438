import { Offload } from './src/index.js';
import { cachedBundle } from './src/cli/kernel-cache.js';
const rt = await Offload.init({ host: { memoryBytes: 256 * 1024 * 1024 } });
const device = rt.devices.find((d) => d.info.plugin === 'host')!;
const lib = await rt.register((await cachedBundle(['/tmp/s4/k/k.ts'], { label: 's4k' })).path);
const q = device.queue();
const n = 2 ** 24;
const w = device.info.computeUnits;
const T = Number(process.env.T ?? 16) * w;
const [ki, kl, kb] = [await device.kernel(lib, 's_items'), await device.kernel(lib, 's_loop1'), await device.kernel(lib, 's_block')];
const x = await device.alloc(n * 4), y = await device.alloc(n * 4);
q.write(x, Float32Array.from({ length: n }, (_, i) => (i % 1000) / 1000));
q.write(y, new Float32Array(n).fill(1));
await q.finish();
console.log('items grid', device.suggestGrid(ki, { items: n }), 'T', T);
const variants: [string, () => Promise<unknown>][] = [
  ['items', () => q.launch(ki, { items: n }, [0.5, x, y]).done],
  ['loop1', () => q.launch(kl, { teams: T }, [0.5, x, y, n, 1, 1]).done],
  ['block', () => q.launch(kb, { teams: T }, [n, 0.5, x, y]).done],
];
const times: Record<string, number[]> = {};
const R = Number(process.env.R ?? 41);
for (let rep = 0; rep < R; rep++)
  for (let v = 0; v < variants.length; v++) {
    const [name, run] = variants[(v + rep) % variants.length]!;
    const t = performance.now();
    await run();
    (times[name] ??= []).push(performance.now() - t);
  }
for (const [name, ts] of Object.entries(times)) { ts.sort((a, b) => a - b); console.log(name, 'median ms', ts[R >> 1].toFixed(2), 'min', ts[0].toFixed(2)); }
await rt.shutdown();
