/** offload-ts: an offloading runtime for TypeScript. See README.md and DESIGN.md. */
export { Offload, Runtime } from './api/runtime.js';
export { Device, type AllocOptions } from './api/device.js';
export { Buffer, DevicePointer } from './api/buffer.js';
export { Queue, Event, type CopyOptions, type Grid, type KernelArgument, type WaitOptions } from './api/queue.js';
export { Kernel } from './api/kernel.js';
export { Library } from './api/library.js';
export { OffloadError, ErrorCode } from './errors.js';
export type { DeviceInfo, MemoryKind } from './plugins/interface.js';
export type { KernelPrint, RuntimeOptions } from './runtime/options.js';
export type { ContextOptions } from './api/runtime.js';
export { map, type MapSpec, type MapType, type MapBuilder, type HostView } from './runtime/mapping/map.js';
export type { TargetArgument } from './runtime/mapping/mapper.js';
export type { ParamInfo, ParamType, EntryInfo } from './image/manifest.js';
