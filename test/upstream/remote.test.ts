/** LLVM's mapping and liboffload API tests on a remote device behind a real `offload proxy` child process. */
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { startProxy } from '../helpers/proxy.js';
import { upstreamMappingSuite } from './mapping.js';
import { upstreamOffloadApiSuite } from './offload-api.js';

const proxy = await startProxy({ threads: 1, memory: '64M' });
let suites = 2;
/** Each suite stops the shared proxy when it is the last one done. */
const done = async () => {
  if (--suites === 0) await proxy.stop();
};

upstreamMappingSuite('remote device over TCP', async () => ({
  runtime: (info) => Offload.init({ host: false, proxies: [proxy.address], token: proxy.token, info }),
  device: (runtime) => runtime.devices[0]!,
  bundle: await fixtureBundle(),
  cleanup: done,
}));

upstreamOffloadApiSuite('remote device over TCP', async () => ({
  runtime: () => Offload.init({ host: false, proxies: [proxy.address], token: proxy.token }),
  device: (runtime) => runtime.devices[0]!,
  bundle: await fixtureBundle(),
  cleanup: done,
}));
