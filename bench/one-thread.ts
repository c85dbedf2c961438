/**
 * The launch round trip with both ends in this one thread: a proxy server made here (the same
 * code `offload proxy` runs) and a client of it over TCP on 127.0.0.1, against a bare ping-pong
 * whose two sockets are in this thread too. Nothing switches between processes: each row costs
 * the code's own CPU and its system calls only. Set beside the rows of two processes pinned to
 * one core, it says how much of what those add the runtime's code costs when warm, and how much
 * comes with each switch between the two processes.
 */
import net from 'node:net';
import type * as ServerModule from '../src/proxy/server.js';
import { benchBundle } from './kernel-bundle.js';
import { measure, type Plan } from './measure.js';
import { Offload, runtimeModule } from './offload.js';
import type { Row } from './suite.js';

/** Two sockets of this thread joined over 127.0.0.1: `ping` sends one byte and resolves when the other end's byte comes back. */
async function pingPair(): Promise<{ ping: () => Promise<void>; close: () => void }> {
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    socket.on('data', () => socket.write('P'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  client.setNoDelay(true);
  await new Promise((resolve) => client.once('connect', resolve));
  let answered: (() => void) | undefined;
  client.on('data', () => answered?.());
  return {
    ping: () =>
      new Promise<void>((resolve) => {
        answered = resolve;
        client.write('P');
      }),
    close: () => {
      client.destroy();
      server.close();
    },
  };
}

export async function oneThreadRoundTrip(plan: Plan): Promise<Row> {
  const { ProxyServer } = await runtimeModule<typeof ServerModule>('proxy/server');
  const token = 'one-thread-bench-0123456789';
  const server = await ProxyServer.start({
    listen: '127.0.0.1:0',
    token,
    runtime: { host: { threads: 1, memoryBytes: 256 * 1024 * 1024 }, webgpu: false },
  });
  const pair = await pingPair();
  const runtime = await Offload.init({ host: false, webgpu: false, proxies: [server.address], token });
  try {
    const device = runtime.devices[0]!;
    const empty = await device.kernel(await runtime.register(await benchBundle()), 'empty');
    const queue = device.queue();
    const rounds = plan.quick ? 300 : 1000;
    // Not timed: V8 optimises the frame paths only after thousands of round trips.
    for (let i = 0; i < (plan.quick ? 1000 : 10_000); i++) await queue.launch(empty, { teams: 1 }, []).done;
    for (let i = 0; i < 3000; i++) await pair.ping();
    const [launch, ping] = await measure(plan, [
      {
        label: 'await queue.launch(empty, { teams: 1 }, []).done, the proxy server in this thread',
        count: rounds,
        run: async () => {
          for (let i = 0; i < rounds; i++) await queue.launch(empty, { teams: 1 }, []).done;
        },
      },
      {
        label: 'one byte between two sockets of this thread over bare TCP, and one byte back',
        count: rounds,
        run: async () => {
          for (let i = 0; i < rounds; i++) await pair.ping();
        },
      },
    ]);
    return {
      name: 'remote empty-kernel launch round trip vs TCP ping-pong, both ends in this one thread (no switch between processes)',
      unit: 'us',
      offload: launch!,
      baseline: ping!,
      goal: "none: the code's own CPU and system calls, warm (beside the rows of two processes on one core)",
    };
  } finally {
    await runtime.shutdown();
    await server.shutdown();
    pair.close();
  }
}
