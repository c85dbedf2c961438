/**
 * A proxy server in this process whose clients connect over in-memory LoopbackTransport pairs:
 * the remote plugin's connector hands it one end and the server serves the other, so requests go
 * through the real protocol code on both sides with no sockets. Registered as a plugin of its
 * own ('remote-loopback'), after the local devices.
 */
import { RemotePlugin } from '../../src/plugins/remote/plugin.js';
import { ProxyServer } from '../../src/proxy/server.js';
import { registerPlugin, unregisterPlugin } from '../../src/runtime/plugin-registry.js';
import { LoopbackTransport } from '../../src/transport/loopback.js';

export interface LoopbackProxy {
  server: ProxyServer;
  /** The addresses the connector was asked for, in order. */
  connected: string[];
  /** Unregisters the plugin and shuts the server down. */
  stop(): Promise<void>;
}

export async function startLoopbackProxy(
  options: { threads?: number; memoryBytes?: number; address?: string } = {},
): Promise<LoopbackProxy> {
  const token = 'loopback-token-0123456789';
  const server = await ProxyServer.start({
    listen: '127.0.0.1:0',
    token,
    runtime: {
      host: { threads: options.threads ?? 1, memoryBytes: options.memoryBytes ?? 64 * 1024 * 1024 },
      webgpu: false,
    },
  });
  const connected: string[] = [];
  const connect = async (address: string) => {
    connected.push(address);
    const [client, proxySide] = LoopbackTransport.pair(
      new LoopbackTransport('proxy'),
      new LoopbackTransport(`loopback client ${connected.length}`),
    );
    server.serve(proxySide);
    return client;
  };
  registerPlugin(
    'remote-loopback',
    () => new RemotePlugin({ proxies: [options.address ?? 'memory:proxy'], token, connect }),
    40,
  );
  return {
    server,
    connected,
    stop: async () => {
      unregisterPlugin('remote-loopback');
      await server.shutdown();
    },
  };
}
