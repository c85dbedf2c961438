/**
 * The conformance suite on a remote host device served by a proxy in this process over the
 * in-memory loopback transport (no sockets: the remote plugin's connector hands it one end of
 * a LoopbackTransport pair), with the local host device as the copy peer.
 */
import { conformance } from './suite.js';
import { Offload } from '../../src/index.js';
import { fixtureBundle } from '../helpers/fixtures.js';
import { startLoopbackProxy } from '../helpers/loopback-proxy.js';

conformance('remote device over the in-memory loopback transport', async () => {
  const proxy = await startLoopbackProxy({ threads: 2, memoryBytes: 256 * 1024 * 1024 });
  const runtime = await Offload.init({
    host: { threads: 1, memoryBytes: 16 * 1024 * 1024 },
    webgpu: false,
    proxies: [],
    mpi: false,
  });
  const device = runtime.devices.find((candidate) => candidate.info.plugin === 'remote')!;
  return { runtime, device, peer: runtime.devices[0], bundle: await fixtureBundle(), cleanup: () => proxy.stop() };
});
