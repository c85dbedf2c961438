/**
 * The plugins that come with offload-ts, loaded for their registration (each module calls
 * registerPlugin): the runtime imports this once. A plugin of one's own registers the same way.
 */
import './host/plugin.js';
import './webgpu/plugin.js';
import './remote/plugin.js';
