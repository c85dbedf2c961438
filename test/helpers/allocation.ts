/** What a test's code allocates, for the tests of the allocation-free launch paths. */
import { Session } from 'node:inspector/promises';

/** Bytes the program allocates while `run` runs, by V8's sampling heap profiler (every 64 bytes, collected objects included). */
export async function bytesAllocated(run: () => Promise<void>): Promise<number> {
  const session = new Session();
  session.connect();
  try {
    await session.post('HeapProfiler.enable');
    await session.post('HeapProfiler.startSampling', {
      samplingInterval: 64,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    } as never);
    await run();
    const { profile } = await session.post('HeapProfiler.stopSampling');
    let bytes = 0;
    const walk = (node: typeof profile.head): void => {
      bytes += node.selfSize;
      node.children.forEach(walk);
    };
    walk(profile.head);
    return bytes;
  } finally {
    session.disconnect();
  }
}
