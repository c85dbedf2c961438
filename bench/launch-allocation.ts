/**
 * `node --import tsx bench/launch-allocation.ts [launches]`: what a pipelined empty launch on
 * the host device allocates, by V8's sampling heap profiler (every 64 bytes, collected objects
 * included): on an idle queue (each launch runs inline at once), behind a host function that
 * holds the queue (each launch waits in the queue, then runs inline), and with
 * OFFLOAD_HOST_INLINE=never (each launch waits, then goes to the workers; a tenth as many).
 * Bytes per launch, and the functions that allocated them. Measures dist/, as `npm run bench` does.
 */
import { Session } from 'node:inspector/promises';
import { benchBundle } from './kernel-bundle.js';
import { Offload } from './offload.js';

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

const inlineLaunches = Number(process.argv[2] ?? 50_000);
const session = new Session();
session.connect();
await session.post('HeapProfiler.enable');
for (const inline of ['auto', 'never'] as const) {
  const runtime = await Offload.init({ host: { inline }, webgpu: false, proxies: [] });
  const device = runtime.devices.find((candidate) => candidate.info.plugin === 'host');
  if (!device) throw new Error('the runtime has no host device');
  const empty = await device.kernel(await runtime.register(await benchBundle()), 'empty');
  const queue = device.queue();
  const grid = { teams: 1 };
  const args: [] = [];
  const launches = inline === 'never' ? inlineLaunches / 10 : inlineLaunches;
  const pipeline = async (held: boolean): Promise<void> => {
    if (held) queue.hostFunction(() => new Promise((resolve) => setTimeout(resolve, 5)));
    for (let i = 0; i < launches; i++) queue.launch(empty, grid, args);
    await queue.finish();
  };
  for (const held of inline === 'never' ? [true] : [false, true]) {
    for (let warm = 0; warm < 3; warm++) await pipeline(held);
    await session.post('HeapProfiler.startSampling', {
      samplingInterval: 64,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    } as never);
    await pipeline(held);
    const { profile } = await session.post('HeapProfiler.stopSampling');
    const bySite = new Map<string, number>();
    const walk = (node: ProfileNode): void => {
      if (node.selfSize > 0) {
        const { functionName, url, lineNumber } = node.callFrame;
        const site = `${functionName || '(anonymous)'} ${url.split('/').slice(-2).join('/')}:${lineNumber + 1}`;
        bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
      }
      node.children.forEach(walk);
    };
    walk(profile.head);
    const total = [...bySite.values()].reduce((sum, bytes) => sum + bytes, 0);
    const where =
      inline === 'never' ? 'on the workers' : held ? 'behind a host function holding the queue' : 'on an idle queue';
    console.log(
      `${where}: ${(total / launches).toFixed(0)} bytes a launch (${launches.toLocaleString('en-US')} launches)`,
    );
    for (const [site, bytes] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, 6))
      console.log(`  ${(bytes / launches).toFixed(1).padStart(7)}  ${site}`);
  }
  await runtime.shutdown();
}
session.disconnect();
