/**
 * The plugins that come with offload-ts, loaded for their registration (each module calls
 * registerPlugin when it loads). The runtime reads the registrations from here, so that the
 * built-in plugins are registered before anything reads them, and a plugin of one's own
 * registered later (under a name of its own, or replacing one) takes its place as any other.
 *
 * Imported for its value, never for its side effect alone: a bare `import` would stay in the
 * published .d.ts and pull the WebGPU types into every program's type-check.
 */
import './host/plugin.js';
import './webgpu/plugin.js';
import './remote/plugin.js';

export { registeredPlugins } from '../runtime/plugin-registry.js';
