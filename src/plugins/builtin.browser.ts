/**
 * The plugins that come with offload-ts, in a page (package.json's "browser" field puts this
 * file in place of builtin.ts there): WebGPU through `navigator.gpu`, and proxies over
 * WebSocket. The host device needs Node's worker threads and is not in the page's build.
 */
import './webgpu/plugin.js';
import './remote/plugin.js';

export { registeredPlugins } from '../runtime/plugin-registry.js';
