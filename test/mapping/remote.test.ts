/** Mapping semantics on a remote host device behind a real `offload proxy` child process. */
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { startProxy } from '../helpers/proxy.js';
import { mappingSuite } from './suite.js';

mappingSuite('remote device over TCP', async () => {
  const proxy = await startProxy({ threads: 1, memory: '64M' });
  return {
    runtime: (info) => Offload.init({ host: false, proxies: [proxy.address], token: proxy.token, info }),
    device: (runtime) => runtime.devices[0]!,
    bundle: await fixtureBundle(),
    cleanup: () => proxy.stop(),
  };
});
