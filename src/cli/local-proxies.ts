/** `--proxies N` of the `offload` commands: N `offload proxy` children on free local ports, with a fresh token. */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { spawnProxy, type SpawnedProxy } from '../proxy/spawn.js';

export interface LocalProxies {
  proxies: SpawnedProxy[];
  token: string;
  stop(): Promise<void>;
}

export async function startLocalProxies(count: number): Promise<LocalProxies | undefined> {
  if (count === 0) return undefined;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'offload-proxies-'));
  const token = randomBytes(24).toString('hex');
  const tokenFile = path.join(dir, 'token');
  await writeFile(tokenFile, token, { mode: 0o600 });
  // This command line again for the proxies: the same node flags (tsx when run from source) and script.
  const cli = [...process.execArgv, process.argv[1]!];
  const started = await Promise.allSettled(Array.from({ length: count }, () => spawnProxy({ cli, tokenFile, inheritStderr: true })));
  const proxies = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const stop = async () => {
    await Promise.all(proxies.map((proxy) => proxy.stop()));
    await rm(dir, { recursive: true, force: true });
  };
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }
  for (const proxy of proxies) console.log(`proxy    ${proxy.address} (a local 'offload proxy' process)`);
  return { proxies, token, stop };
}
