/**
 * A hostile proxy for client-side tests: a bare TCP listener that answers the client's hello
 * (with one fake host device), its queue requests and its images (each kernel loads as the
 * bundle declares it), never answers a launch, and otherwise sends whatever the test writes
 * through `client()`. Close it with `close()`.
 */
import { listenTcp } from '../../src/transport/tcp.js';
import type { Transport } from '../../src/transport/transport.js';

/** What the fake proxy says of its device in the hello reply (only the fields the client reads). */
export const FAKE_DEVICE = {
  name: 'fake',
  kind: 'cpu',
  plugin: 'host',
  imageFormats: ['wasm'],
  memoryBytes: 1 << 20,
  computeUnits: 1,
  maxTeams: 1,
  maxThreadsPerTeam: 1,
  maxTeamDims: [1, 1, 1],
  maxThreadDims: [1, 1, 1],
  maxTeamMemoryBytes: 0,
  memoryKinds: ['device'],
  launchTimeouts: false,
  kernelPrint: true,
  hostCalls: true,
  capabilities: {
    i64: true,
    f64: true,
    traps: true,
    concurrentQueues: true,
    atomics: true,
    mappedMemory: false,
    maxTeamMemoryBytes: 0,
  },
};

export interface FakeProxy {
  address: string;
  /** The connection of the (one) client, once it has connected. */
  client(): Transport;
  close(): Promise<void>;
}

export async function fakeProxy(): Promise<FakeProxy> {
  let client: Transport | undefined;
  const images = new Map<unknown, { name: string; kind: string; params: unknown[] }[]>();
  const listener = await listenTcp('127.0.0.1:0', (transport) => {
    client = transport;
    transport.onFrame = (frame) => {
      const { op, id } = frame.meta;
      if (op === 'hello' || op === 'queue')
        transport.send({ op: 'reply', id, ...(op === 'hello' ? { devices: [FAKE_DEVICE], peers: [] } : {}) });
      if (op === 'register') {
        images.set(frame.meta.image, frame.meta.entries as { name: string; kind: string; params: unknown[] }[]);
        transport.send({ op: 'reply', id });
      }
      if (op === 'load') {
        const kernels = (images.get(frame.meta.image) ?? [])
          .filter((entry) => entry.kind === 'kernel')
          .map(({ name, params }) => ({ name, params, format: 'wasm', staticBytes: 0 }));
        transport.send({ op: 'reply', id, kernels });
      }
    };
  });
  return {
    address: listener.address,
    client: () => {
      if (!client) throw new Error('no client has connected to the fake proxy');
      return client;
    },
    close: () => listener.close(),
  };
}
