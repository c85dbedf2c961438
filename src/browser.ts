/**
 * offload-ts in a page: the package's "browser" condition leads here. The same public surface as
 * index.ts; what differs is below it, where package.json's "browser" field puts the page's files
 * in place of Node's: bundles by URL (platform-files.browser.ts), WebGPU through navigator.gpu
 * (plugins/webgpu/gpu.browser.ts), proxies over WebSocket only (transport/connect.browser.ts),
 * and the host device on Web Workers (plugins/host/host-threads.browser.ts). Nothing here imports
 * a Node built-in.
 */
export * from './index.js';
