/**
 * Plugins register as prioritised async factories, as tfjs registers backends: the runtime
 * creates them in priority order (highest first). A factory returns `undefined` when its
 * plugin is not available here (no GPU adapter, no proxies named). A factory throws an
 * OffloadError for a configuration error (INVALID_ARGUMENT, naming the option), which fails
 * `Offload.init` as it is; anything else it throws is a bug and fails init as INTERNAL.
 *
 * This file holds the registrations only: each plugin's module registers itself (the host
 * plugin at 100, WebGPU at 75, remote at 50); src/plugins/builtin.ts loads those modules, and
 * the runtime reads the registrations through it.
 */
import type { Plugin } from '../plugins/interface.js';
import type { RuntimeOptions } from './options.js';

export type PluginFactory = (options: RuntimeOptions) => Plugin | undefined | Promise<Plugin | undefined>;

/**
 * Why a factory made nothing, where that is the platform's doing and not the options' (the host
 * device in a page that is not cross-origin isolated): `runtime.diagnostics` says it, and
 * OFFLOAD_DEBUG. Undefined when the options alone explain it.
 */
export type PluginUnavailable = (options: RuntimeOptions) => string | undefined;

interface Registration {
  name: string;
  factory: PluginFactory;
  priority: number;
  unavailable?: PluginUnavailable;
}

const registrations: Registration[] = [];

/** Registers (or replaces) the factory of plugin `name`. Higher priority is created first. */
export function registerPlugin(
  name: string,
  factory: PluginFactory,
  priority: number,
  unavailable?: PluginUnavailable,
): void {
  const existing = registrations.findIndex((r) => r.name === name);
  if (existing >= 0) registrations.splice(existing, 1);
  registrations.push({ name, factory, priority, ...(unavailable && { unavailable }) });
  registrations.sort((a, b) => b.priority - a.priority);
}

export function registeredPlugins(): readonly Registration[] {
  return registrations;
}

/** Removes the factory of plugin `name` (runtimes already created keep their plugins). */
export function unregisterPlugin(name: string): void {
  const index = registrations.findIndex((r) => r.name === name);
  if (index >= 0) registrations.splice(index, 1);
}
