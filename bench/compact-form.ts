/**
 * Whether the compact form of launch frames (src/protocol/compact.ts) pays for itself: the
 * remote launch round trip from a client that offers it against one that does not (the same
 * proxy, so JSON both ways for the second), and the four codec steps of a round trip in this
 * process alone (encode and decode of the launch and of its reply). The form, its negotiation
 * and its tests are kept only while these rows show a gain.
 */
import type { Device, Kernel, Runtime } from '../src/index.js';
import type * as RemotePluginModule from '../src/plugins/remote/plugin.js';
import type * as RegistryModule from '../src/runtime/plugin-registry.js';
import type * as ConnectModule from '../src/transport/connect.js';
import type * as FrameModule from '../src/transport/frame.js';
import type * as CompactModule from '../src/protocol/compact.js';
import { benchBundle } from './kernel-bundle.js';
import { measure, type Plan } from './measure.js';
import { Offload, runtimeModule } from './offload.js';
import type { Row } from './suite.js';

/** A runtime whose one remote device is `address`'s, reached by a client that leaves the compact form out of its hello. */
async function jsonClient(address: string, token: string): Promise<Runtime> {
  const { RemotePlugin } = await runtimeModule<typeof RemotePluginModule>('plugins/remote/plugin');
  const { registerPlugin, unregisterPlugin } = await runtimeModule<typeof RegistryModule>('runtime/plugin-registry');
  const { connectTo } = await runtimeModule<typeof ConnectModule>('transport/connect');
  const connect = async (to: string) => {
    const transport = await connectTo(to, { timeoutMs: 10_000 });
    const send = transport.send.bind(transport);
    // What a client without the form sends: the same hello, no offer.
    transport.send = (meta, payload) => {
      if (meta.op !== 'hello') return send(meta, payload);
      const { compact: _offer, ...hello } = meta;
      return send(hello, payload);
    };
    return transport;
  };
  registerPlugin('remote-json-bench', () => new RemotePlugin({ proxies: [address], token, connect }), 40);
  try {
    return await Offload.init({ host: false, webgpu: false, proxies: [] });
  } finally {
    unregisterPlugin('remote-json-bench');
  }
}

/** The round trip with and without the compact form, against one proxy. */
export async function compactRoundTrip(
  device: Device,
  empty: Kernel,
  address: string,
  token: string,
  plan: Plan,
): Promise<Row> {
  const runtime = await jsonClient(address, token);
  try {
    const jsonDevice = runtime.devices.find((d) => d.info.plugin === 'remote');
    if (!jsonDevice) throw new Error('the JSON client found no remote device');
    const jsonEmpty = await jsonDevice.kernel(await runtime.register(await benchBundle()), 'empty');
    const rounds = plan.quick ? 300 : 1000;
    const compactQueue = device.queue();
    const jsonQueue = jsonDevice.queue();
    // Not timed: V8 optimises each form's paths only after thousands of round trips.
    for (let i = 0; i < (plan.quick ? 1000 : 10_000); i++) {
      await compactQueue.launch(empty, { teams: 1 }, []).done;
      await jsonQueue.launch(jsonEmpty, { teams: 1 }, []).done;
    }
    const [compact, json] = await measure(plan, [
      {
        label: 'awaited empty launches, one after the other, launch and reply frames compact',
        count: rounds,
        run: async () => {
          for (let i = 0; i < rounds; i++) await compactQueue.launch(empty, { teams: 1 }, []).done;
        },
      },
      {
        label: 'the same from a client that does not offer the compact form (JSON both ways), same proxy',
        count: rounds,
        run: async () => {
          for (let i = 0; i < rounds; i++) await jsonQueue.launch(jsonEmpty, { teams: 1 }, []).done;
        },
      },
    ]);
    return {
      name: 'remote launch round trip: compact launch frames vs JSON',
      unit: 'us',
      offload: compact!,
      baseline: json!,
      goal: { op: '<=', value: 0.95, note: 'the compact form is kept only while it pays' },
    };
  } finally {
    await runtime.shutdown();
  }
}

/** The four codec steps of a launch round trip, in this process: compact against JSON. */
export async function compactCodec(plan: Plan): Promise<Row> {
  const { encodeFrame, FrameDecoder } = await runtimeModule<typeof FrameModule>('transport/frame');
  const { compactMeta } = await runtimeModule<typeof CompactModule>('protocol/compact');
  const rounds = plan.quick ? 20_000 : 200_000;
  const launch = {
    op: 'launch',
    id: 1,
    queue: 3,
    image: 1,
    kernel: 'saxpy',
    teams: 64,
    threads: 1,
    args: [10_000, 2.5, { buffer: 4, offset: 0 }, { buffer: 5, offset: 64 }],
  };
  const steps = (codec: typeof compactMeta | undefined) => {
    const decoder = new FrameDecoder(undefined, undefined, () => codec);
    let sink = 0;
    return () => {
      for (let i = 0; i < rounds; i++) {
        launch.id = i;
        sink += decoder.push(encodeFrame(launch, undefined, codec)).length;
        sink += decoder.push(encodeFrame({ op: 'reply', id: i }, undefined, codec)).length;
      }
      if (sink === 0) throw new Error('no frame decoded');
    };
  };
  const [compact, json] = await measure(plan, [
    {
      label: `${rounds.toLocaleString('en-US')} x encode + decode a launch and its reply, compact`,
      count: rounds,
      run: steps(compactMeta),
    },
    { label: 'the same as JSON', count: rounds, run: steps(undefined) },
  ]);
  return {
    name: 'launch round trip frames encoded and decoded in one process: compact vs JSON',
    unit: 'us',
    offload: compact!,
    baseline: json!,
    goal: 'none: the share of the round trip above that the codec is',
  };
}
