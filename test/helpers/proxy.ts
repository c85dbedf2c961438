/** Real `offload proxy` child processes on 127.0.0.1, for remote-device tests. */
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { spawnProxy, type SpawnedProxy } from '../../src/proxy/spawn.js';

const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

export interface ProxyProcess extends SpawnedProxy {
  token: string;
}

export interface ProxyOptions {
  token?: string;
  threads?: number;
  memory?: string;
  /** OFFLOAD_WEBGPU for the proxy (`fallback` serves a software WebGPU device too). Default: off. */
  webgpu?: string;
}

export async function startProxy(options: ProxyOptions = {}): Promise<ProxyProcess> {
  const token = options.token ?? randomBytes(16).toString('hex');
  const proxy = await spawnProxy({
    cli: ['--import', 'tsx', main],
    token,
    env: { ...process.env, OFFLOAD_HOST_THREADS: String(options.threads ?? 2), OFFLOAD_HOST_MEMORY: options.memory ?? '256M', OFFLOAD_PROXIES: '', OFFLOAD_WEBGPU: options.webgpu ?? 'off' },
  });
  return { ...proxy, token };
}
