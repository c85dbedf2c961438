/** The conformance suite on the host device, with a second host device as the copy peer. */
import { conformance } from './suite.js';
import { Offload } from '../../src/index.js';
import { registerPlugin, unregisterPlugin } from '../../src/runtime/plugin-registry.js';
import { HostPlugin } from '../../src/plugins/host/plugin.js';
import { fixtureBundle } from '../helpers/fixtures.js';

conformance('host device', async () => {
  // A second, small host device in the same runtime: a real peer for cross-device copies.
  registerPlugin('host-peer', () => new HostPlugin({ threads: 1, memoryBytes: 16 * 1024 * 1024 }), 90);
  try {
    const runtime = await Offload.init({ host: { threads: 2, memoryBytes: 256 * 1024 * 1024 } });
    return { runtime, device: runtime.devices[0]!, peer: runtime.devices[1], bundle: await fixtureBundle() };
  } finally {
    unregisterPlugin('host-peer');
  }
});
