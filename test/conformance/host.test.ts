/**
 * The conformance suite on the host device, with a second host device as the copy peer: as
 * configured by default (short kernels inline, the others on the workers), and with every launch
 * inline on the calling thread (OFFLOAD_HOST_INLINE=always), which must behave the same.
 */
import { conformance } from './suite.js';
import { Offload } from '../../src/index.js';
import { registerPlugin, unregisterPlugin } from '../../src/runtime/plugin-registry.js';
import { HostPlugin } from '../../src/plugins/host/plugin.js';
import type { InlineMode } from '../../src/plugins/host/inline.js';
import { fixtureBundle } from '../helpers/fixtures.js';

async function hostTarget(inline: InlineMode) {
  // A second, small host device in the same runtime: a real peer for cross-device copies.
  registerPlugin('host-peer', () => new HostPlugin({ threads: 1, memoryBytes: 16 * 1024 * 1024, inline }), 90);
  try {
    const runtime = await Offload.init({ host: { threads: 2, memoryBytes: 256 * 1024 * 1024, inline } });
    return { runtime, device: runtime.devices[0]!, peer: runtime.devices[1], bundle: await fixtureBundle() };
  } finally {
    unregisterPlugin('host-peer');
  }
}

conformance('host device', () => hostTarget('auto'));

// Its device says it lacks concurrentQueues: launches run one at a time on the calling thread.
conformance('host device, every launch inline', () => hostTarget('always'));
