/**
 * `--proxies N` of the `offload` commands: N `offload proxy` children on free local ports, with a
 * fresh token, each one the others' peer (so copies between them go proxy to proxy).
 */
import { randomBytes } from 'node:crypto';
import { freeLocalPorts, spawnProxy, type SpawnedProxy } from '../proxy/spawn.js';

export interface LocalProxies {
  proxies: SpawnedProxy[];
  token: string;
  stop(): Promise<void>;
}

export interface LocalProxyOptions {
  /** Node arguments that run the `offload` CLI. Default: this command line again (same node flags, same script). */
  cli?: string[];
  env?: NodeJS.ProcessEnv;
  /** Print a line per proxy on stdout (default true). */
  announce?: boolean;
}

export async function startLocalProxies(
  count: number,
  options: LocalProxyOptions = {},
): Promise<LocalProxies | undefined> {
  if (count === 0) return undefined;
  const token = randomBytes(24).toString('hex');
  const cli = options.cli ?? [...process.execArgv, process.argv[1]!];
  const addresses = (await freeLocalPorts(count)).map((port) => `127.0.0.1:${port}`);
  const started = await Promise.allSettled(
    addresses.map((listen) => {
      const peers = addresses.filter((address) => address !== listen);
      return spawnProxy({
        cli,
        token,
        env: options.env,
        inheritStderr: true,
        listen,
        args: peers.length > 0 ? ['--peers', peers.join(',')] : [],
      });
    }),
  );
  const proxies = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const stop = async () => {
    await Promise.all(proxies.map((proxy) => proxy.stop()));
  };
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }
  if (options.announce !== false)
    for (const proxy of proxies) console.log(`proxy    ${proxy.address} (a local 'offload proxy' process)`);
  return { proxies, token, stop };
}
