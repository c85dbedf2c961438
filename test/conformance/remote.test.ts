/**
 * The conformance suite on a remote host device served by a real `offload proxy` child process
 * on 127.0.0.1, with the local host device as the copy peer (copies staged through the client).
 */
import { conformance } from './suite.js';
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { startProxy } from '../helpers/proxy.js';

conformance('remote device over TCP', async () => {
  const proxy = await startProxy({ threads: 2, memory: '256M' });
  const runtime = await Offload.init({
    host: { threads: 1, memoryBytes: 16 * 1024 * 1024 },
    proxies: [proxy.address],
    token: proxy.token,
  });
  const device = runtime.devices.find((candidate) => candidate.info.plugin === 'remote')!;
  return { runtime, device, peer: runtime.devices[0], bundle: await fixtureBundle(), cleanup: () => proxy.stop() };
});
