/**
 * The conformance suite on the WebGPU device (Dawn; lavapipe on machines without a GPU), with
 * the host device as the copy peer. Skipped, with the reason, where there is no adapter.
 */
import { describe } from 'node:test';
import { conformance } from './suite.js';
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { webgpuSkipReason } from '../helpers/webgpu.js';

const skip = await webgpuSkipReason();
if (skip) {
  describe('conformance: WebGPU device', { skip, timeout: 1000 }, () => {});
} else {
  conformance('WebGPU device', async () => {
    const runtime = await Offload.init({
      host: { threads: 1, memoryBytes: 16 * 1024 * 1024 },
      webgpu: { fallback: true },
      proxies: [],
    });
    const device = runtime.devices.find((candidate) => candidate.info.plugin === 'webgpu')!;
    return { runtime, device, peer: runtime.devices[0], bundle: await fixtureBundle() };
  });
}
