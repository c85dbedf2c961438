/** LLVM's mapping and liboffload API tests on the host device. */
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { upstreamMappingSuite } from './mapping.js';
import { upstreamOffloadApiSuite } from './offload-api.js';

const host = { threads: 2, memoryBytes: 32 * 1024 * 1024 };

upstreamMappingSuite('host device', async () => ({
  runtime: (info) => Offload.init({ host, proxies: [], info }),
  device: (runtime) => runtime.devices[0]!,
  bundle: await fixtureBundle(),
}));

upstreamOffloadApiSuite('host device', async () => ({
  runtime: () => Offload.init({ host, proxies: [] }),
  device: (runtime) => runtime.devices[0]!,
  bundle: await fixtureBundle(),
}));
