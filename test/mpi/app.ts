/**
 * The application rank of the MPI tests (test/mpi.test.ts), run under mpirun beside
 * `offload proxy --mpi` ranks. argv[2] picks the scenario:
 *   conformance  the conformance suite on the first MPI proxy's device (node:test, TAP on stdout)
 *   p2p          a copy between the devices of two proxy ranks; prints how many bytes the
 *                application's own channels carried meanwhile
 *   shared       several application ranks on one proxy: each writes its own pattern into its
 *                buffer id 1 and reads it back
 *   fail         uses a proxy, then exits with status 3
 */
import assert from 'node:assert/strict';
import { Offload } from '../../src/index.js';
import type { RemoteDevice } from '../../src/plugins/remote/device.js';
import { conformance } from '../conformance/suite.js';
import { fixtureBundle } from '../helpers/fixtures.js';

const scenario = process.argv[2];
const MiB = 1024 * 1024;

if (scenario === 'conformance') {
  conformance('remote device over MPI', async () => {
    const runtime = await Offload.init({ host: { threads: 1, memoryBytes: 16 * MiB } });
    const device = runtime.devices.find((d) => d.info.location.startsWith('mpi:'))!;
    return { runtime, device, peer: runtime.devices[0], bundle: await fixtureBundle() };
  });
} else if (scenario === 'p2p') {
  const runtime = await Offload.init({ host: false });
  const [a, b] = runtime.devices;
  const bytes = 16 * MiB;
  const data = new Uint8Array(bytes).map((_, i) => (i * 7) & 0xff);
  const src = await a!.alloc(bytes);
  const dst = await b!.alloc(bytes);
  await a!.queue().write(src, data).done;
  const channels = [a!, b!].map((d) => (d.plugin as RemoteDevice).connection.transport.stats);
  const before = channels.reduce((sum, s) => sum + s.bytesSent + s.bytesReceived, 0);
  await a!.queue().copy(dst, src).done;
  const carried = channels.reduce((sum, s) => sum + s.bytesSent + s.bytesReceived, 0) - before;
  const back = new Uint8Array(bytes);
  await b!.queue().read(dst, back).done;
  assert.ok(Buffer.from(back).equals(Buffer.from(data)), 'the copy arrived intact');
  console.log(JSON.stringify({ locations: runtime.devices.map((d) => d.info.location), carried }));
  await runtime.shutdown();
} else if (scenario === 'shared') {
  const runtime = await Offload.init({ host: false });
  const rank = Number(process.env.OMPI_COMM_WORLD_RANK);
  const device = runtime.devices[0]!;
  const buffer = await device.alloc(MiB);
  const mine = new Uint8Array(MiB).fill(rank + 1);
  const q = device.queue();
  for (let round = 0; round < 20; round++) {
    q.write(buffer, mine);
    const back = new Uint8Array(MiB);
    q.read(buffer, back);
    await q.finish();
    assert.ok(back.every((v) => v === rank + 1), `rank ${rank} read another client's bytes`);
  }
  console.log(JSON.stringify({ rank, ok: true, devices: runtime.devices.length }));
  await runtime.shutdown();
} else if (scenario === 'fail') {
  // Uses a proxy, then fails: the job must end with a non-zero status.
  const runtime = await Offload.init({ host: false });
  await runtime.devices[0]!.alloc(64);
  process.exit(3);
} else {
  console.error(`unknown scenario '${scenario}'`);
  process.exitCode = 2;
}
