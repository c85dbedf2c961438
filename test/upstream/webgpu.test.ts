/** LLVM's mapping and liboffload API tests on the WebGPU device (skipped, with the reason, where there is no adapter). */
import { describe } from 'node:test';
import { Offload, type Runtime } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { WEBGPU_LACKS, webgpuSkipReason } from '../helpers/webgpu.js';
import { upstreamMappingSuite } from './mapping.js';
import { upstreamOffloadApiSuite } from './offload-api.js';

const skip = await webgpuSkipReason();
const init = (info?: (line: string) => void) =>
  Offload.init({ host: { threads: 1, memoryBytes: 16 * 1024 * 1024 }, webgpu: { fallback: true }, proxies: [], info });
const gpu = (runtime: Runtime) => runtime.devices.find((device) => device.info.plugin === 'webgpu')!;

if (skip) {
  describe('llvm upstream tests: WebGPU device', { skip, timeout: 1000 }, () => {});
} else {
  upstreamMappingSuite('WebGPU device', async () => ({
    runtime: init,
    device: gpu,
    bundle: await fixtureBundle(),
    lacks: { aliasing: WEBGPU_LACKS.aliasing, unalignedPointers: WEBGPU_LACKS.unalignedPointers },
  }));
  upstreamOffloadApiSuite('WebGPU device', async () => ({
    runtime: () => init(),
    device: gpu,
    bundle: await fixtureBundle(),
  }));
}
