/** Mapping semantics on the host device. */
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { mappingSuite } from './suite.js';

mappingSuite('host device', async () => ({
  runtime: (info) => Offload.init({ host: { threads: 2, memoryBytes: 16 * 1024 * 1024 }, info }),
  device: (runtime) => runtime.devices[0]!,
  bundle: await fixtureBundle(),
}));
