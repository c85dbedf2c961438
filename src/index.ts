/** offload-ts: an offloading runtime for TypeScript. See README.md and docs/architecture.md. */
export { Offload, Runtime } from './api/runtime.js';
export { Device, type AllocOptions } from './api/device.js';
export { DeviceBuffer, Buffer, DevicePointer, type TypedArrayType } from './api/buffer.js';
export {
  Queue,
  Event,
  type CopyOptions,
  type Grid,
  type ItemsGrid,
  type LaunchGrid,
  type KernelArgument,
  type RecordOptions,
  type RectCopy,
  type RectSide,
  type WaitOptions,
} from './api/queue.js';
export { Kernel, type KernelInfo } from './api/kernel.js';
export type { SuggestedGrid } from './api/items.js';
export { Library } from './api/library.js';
export { OffloadError, ErrorCode } from './errors.js';
export type {
  DeviceCapabilities,
  DeviceInfo,
  DeviceKind,
  MemoryInfo,
  MemoryKind,
  PluginName,
} from './plugins/interface.js';
export type { KernelPrint, RuntimeOptions } from './runtime/options.js';
export type { ContextOptions } from './api/runtime.js';
export type { DeviceMetrics, RuntimeMetrics } from './runtime/device-counters.js';
export type { TraceDocument, TraceEvent } from './runtime/trace.js';
export { HostFunctions, type HostCall, type HostFunction } from './api/host-functions.js';
export type { GridSize } from './api/grid.js';
export { map, type MapSpec, type MapType, type MapBuilder, type HostView } from './omp/map.js';
export type { TargetArgument } from './omp/mapper.js';
export {
  spread,
  type Chunk,
  type SpreadArgument,
  type SpreadKernel,
  type SpreadLoss,
  type SpreadOptions,
  type SpreadRange,
  type SpreadResult,
  type SpreadShare,
} from './omp/spread.js';
export type { ParamInfo, ParamType, EntryInfo, ImageFormat } from './image/manifest.js';
