/**
 * The page program of `npm run bench -- browser` (bench/suites/browser.ts bundles it for
 * headless Chromium): on each device the page finds, empty-kernel launch round trips and 64 MiB
 * writes and reads, and round trips of a raw WebSocket message to an echo server, each timed
 * with the page's clock as bench/measure.ts times Node's (warm-up runs, then repetitions in
 * alternation). The result goes to `#out` as JSON (`PageFigures`).
 */
import { Offload, type Device, type Kernel } from '../../src/index.js';

export interface PageSeries {
  label: string;
  count: number;
  seconds: number[];
}

export interface PageFigures {
  devices: { plugin: string; name: string; launch: PageSeries; write: PageSeries; read: PageSeries }[];
  ping: PageSeries;
  error?: string;
}

const MiB = 1024 * 1024;
const params = new URLSearchParams(location.search);
const warmup = Number(params.get('warmup') ?? '1');
const repetitions = Number(params.get('repetitions') ?? '3');
const rounds = Number(params.get('rounds') ?? '300');
const copyBytes = Number(params.get('copyMiB') ?? '64') * MiB;

interface Contender {
  label: string;
  count: number;
  run(): Promise<void>;
}

async function measure(contenders: Contender[]): Promise<PageSeries[]> {
  for (const contender of contenders) for (let i = 0; i < warmup; i++) await contender.run();
  const series = contenders.map(({ label, count }) => ({ label, count, seconds: [] as number[] }));
  for (let r = 0; r < repetitions; r++) {
    for (const [index, contender] of contenders.entries()) {
      const start = performance.now();
      await contender.run();
      series[index]!.seconds.push((performance.now() - start) / 1000);
    }
  }
  return series;
}

async function onDevice(device: Device, empty: Kernel): Promise<PageFigures['devices'][number]> {
  const queue = device.queue();
  const buffer = await device.alloc(copyBytes);
  const src = new Uint8Array(copyBytes).fill(0xa5);
  const dst = new Uint8Array(copyBytes);
  const [launch, write, read] = await measure([
    {
      label: `await queue.launch(empty).done on the page's ${device.info.plugin} device, one after the other`,
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await queue.launch(empty, { teams: 1 }, []).done;
      },
    },
    {
      label: `queue.write(buffer, ${copyBytes / MiB} MiB) + finish() in the page`,
      count: copyBytes,
      run: () => (queue.write(buffer, src), queue.finish()),
    },
    {
      label: `queue.read(buffer, ${copyBytes / MiB} MiB) + finish() in the page`,
      count: copyBytes,
      run: () => (queue.read(buffer, dst), queue.finish()),
    },
  ]);
  await buffer.free();
  await queue.destroy();
  return { plugin: device.info.plugin, name: device.info.name, launch: launch!, write: write!, read: read! };
}

/** A raw WebSocket to the echo server: one 16-byte binary message there and back per round. */
async function pingPong(url: string): Promise<PageSeries> {
  const socket = new WebSocket(url);
  socket.binaryType = 'arraybuffer';
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = () => reject(new Error(`cannot open ${url}`));
  });
  let answer: (() => void) | undefined;
  socket.onmessage = () => answer?.();
  const message = new Uint8Array(16);
  const once = () =>
    new Promise<void>((resolve) => {
      answer = resolve;
      socket.send(message);
    });
  const [series] = await measure([
    {
      label: 'a 16-byte message over a raw WebSocket from the page to an echo server and back',
      count: rounds,
      run: async () => {
        for (let i = 0; i < rounds; i++) await once();
      },
    },
  ]);
  socket.close();
  return series!;
}

const out = document.getElementById('out')!;
try {
  const runtime = await Offload.init({
    webgpu: { fallback: true },
    proxies: params.getAll('proxy'),
    token: params.get('token') ?? undefined,
  });
  const library = await runtime.register('kernels.offload');
  const devices: PageFigures['devices'] = [];
  for (const device of runtime.devices) devices.push(await onDevice(device, await device.kernel(library, 'empty')));
  await runtime.shutdown();
  const figures: PageFigures = { devices, ping: await pingPong(params.get('echo')!) };
  out.textContent = JSON.stringify(figures);
} catch (error) {
  out.textContent = JSON.stringify({
    error: error instanceof Error ? `${error.message}\n${error.stack}` : String(error),
  });
}
