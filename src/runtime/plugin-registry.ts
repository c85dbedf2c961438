/**
 * Plugins register as prioritised async factories, as tfjs registers backends: the runtime
 * creates them in priority order (highest first). A factory returns `undefined` when its
 * plugin is not available here (no GPU adapter, no proxies named); a factory that throws is a
 * configuration error and fails `Offload.init` with that error.
 */
import type { Plugin } from '../plugins/interface.js';
import { errors } from '../errors.js';
import { HostPlugin } from '../plugins/host/plugin.js';
import { proxyList, RemotePlugin } from '../plugins/remote/plugin.js';
import { findAdapter, noteUnavailable, webgpuOptionsFromEnv } from '../plugins/webgpu/adapter.js';
import { WebGpuPlugin } from '../plugins/webgpu/plugin.js';
import { inMpiJob, MPI_DEFAULT_TOKEN, mpiAddress, MpiHub, mpiUnavailable } from '../transport/mpi.js';
import { tlsFromEnv } from '../transport/tls-files.js';
import type { RuntimeOptions } from './options.js';
import { traceFile } from './trace.js';

export type PluginFactory = (options: RuntimeOptions) => Plugin | undefined | Promise<Plugin | undefined>;

interface Registration {
  name: string;
  factory: PluginFactory;
  priority: number;
}

const registrations: Registration[] = [];

/** Registers (or replaces) the factory of plugin `name`. Higher priority is created first. */
export function registerPlugin(name: string, factory: PluginFactory, priority: number): void {
  const existing = registrations.findIndex((r) => r.name === name);
  if (existing >= 0) registrations.splice(existing, 1);
  registrations.push({ name, factory, priority });
  registrations.sort((a, b) => b.priority - a.priority);
}

export function registeredPlugins(): readonly Registration[] {
  return registrations;
}

// The host plugin is always there: local devices come first in the device table.
registerPlugin('host', (options) => (options.host === false ? undefined : new HostPlugin(options.host ?? {})), 100);

// The WebGPU device follows the host device.
registerPlugin(
  'webgpu',
  async (options) => {
    const settings = options.webgpu ?? webgpuOptionsFromEnv();
    if (settings === false) {
      noteUnavailable('the WebGPU plugin is turned off (OFFLOAD_WEBGPU=off or { webgpu: false })');
      return undefined;
    }
    const found = await findAdapter(settings);
    noteUnavailable('reason' in found ? found.reason : undefined);
    return 'adapter' in found ? new WebGpuPlugin(found.adapter, settings.memoryBytes) : undefined;
  },
  75,
);

// Remote devices come after every local one.
registerPlugin(
  'remote',
  async (options) => {
    const proxies = proxyList(options.proxies);
    let token = options.token ?? process.env.OFFLOAD_TOKEN;
    if (proxies.length > 0 && (token === undefined || token === '')) {
      throw errors.invalidArgument(`proxies ${proxies.join(', ')} are named but no token is given (options.token or OFFLOAD_TOKEN)`);
    }
    // Under mpirun, the job's proxy ranks follow the named proxies (a job shares one trust domain).
    if (options.mpi !== false && inMpiJob() && mpiUnavailable() === undefined) {
      const ranks = await MpiHub.get('app').proxies();
      proxies.push(...ranks.map(mpiAddress));
      token ||= MPI_DEFAULT_TOKEN;
    }
    if (proxies.length === 0) return undefined;
    return new RemotePlugin({
      proxies,
      token: token!,
      peerTimeoutMs: options.peerTimeoutMs,
      connectTimeoutMs: options.connectTimeoutMs,
      signal: options.signal,
      trace: traceFile(options.trace) !== undefined,
      tls: options.tls ?? (await tlsFromEnv()),
    });
  },
  50,
);

/** Removes the factory of plugin `name` (runtimes already created keep their plugins). */
export function unregisterPlugin(name: string): void {
  const index = registrations.findIndex((r) => r.name === name);
  if (index >= 0) registrations.splice(index, 1);
}
