/**
 * The plugins that come with offload-ts, in a page (package.json's "browser" field puts this
 * file in place of builtin.ts there): the host device on Web Workers (in a cross-origin isolated
 * page; host-threads.browser.ts), WebGPU through `navigator.gpu`, and proxies over WebSocket.
 */
import './host/plugin.js';
import './webgpu/plugin.js';
import './remote/plugin.js';

export { registeredPlugins } from '../runtime/plugin-registry.js';
