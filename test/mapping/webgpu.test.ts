/** Mapping semantics on the WebGPU device (skipped, with the reason, where there is no adapter). */
import { describe } from 'node:test';
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { WEBGPU_LACKS, webgpuSkipReason } from '../helpers/webgpu.js';
import { mappingSuite } from './suite.js';

const skip = await webgpuSkipReason();
if (skip) {
  describe('mapping: WebGPU device', { skip, timeout: 1000 }, () => {});
} else {
  mappingSuite('WebGPU device', async () => ({
    runtime: (info) =>
      Offload.init({
        host: { threads: 1, memoryBytes: 16 * 1024 * 1024 },
        webgpu: { fallback: true },
        proxies: [],
        info,
      }),
    device: (runtime) => runtime.devices.find((device) => device.info.plugin === 'webgpu')!,
    bundle: await fixtureBundle(),
    noTraps: WEBGPU_LACKS.traps,
  }));
}
