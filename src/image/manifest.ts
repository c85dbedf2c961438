/**
 * The manifest of a bundle (DESIGN section 4): which images it holds and which entries
 * (kernels) they provide, with parameter types read from the compiler.
 */

/** Scalar and pointer parameter types of the kernel ABI. `ptr` is a byte offset into device memory. */
export type ParamType = 'i32' | 'i64' | 'f32' | 'f64' | 'ptr';
export const PARAM_TYPES: readonly ParamType[] = ['i32', 'i64', 'f32', 'f64', 'ptr'];

export interface ParamInfo {
  name: string;
  type: ParamType;
}

export interface EntryInfo {
  name: string;
  kind: 'kernel' | 'global';
  params: ParamInfo[];
  /**
   * Why the kernel runs on wasm devices only, as the build noted it (a kernel in C, C++ or Rust
   * has no WGSL translation): a device that runs no wasm quotes it when it refuses the kernel.
   */
  wasmOnly?: string;
}

/**
 * The parameters `offload build` appends to a per-item kernel (its source's first parameter is
 * `i: item`): the item counts along x, y and z, which a `{ items }` launch passes.
 */
export const ITEM_COUNT_PARAMS = ['offload_items_x', 'offload_items_y', 'offload_items_z'] as const;

/**
 * What a bounds-checked build (`offload build --checked`) adds for each `ptr<T>` parameter `p`:
 * `offload_bytes_p`, the bytes of p's buffer from the pointer, which the launch passes.
 */
export const POINTER_BYTES_PREFIX = 'offload_bytes_';

/**
 * The fault word of a translated WGSL kernel (docs/wgsl-abi.md, "Faults"): `offload_fault`, an
 * `array<atomic<u32>, 8>` at @group(1) @binding(0) that the device zeroes before a dispatch and
 * reads after it. The first invocation to fault (its `count` was 0) records what happened; the
 * device writes the loop budget. Words, by index:
 */
export const FAULT_WORDS = {
  count: 0,
  kind: 1,
  param: 2,
  index: 3,
  elements: 4,
  elementType: 5,
  budget: 6,
  spent: 7,
} as const;
export const FAULT_BINDING_NAME = 'offload_fault';
/** `kind`: an index outside its buffer (a checked build), or a loop past its budget. */
export const FAULT_KINDS = { none: 0, bounds: 1, budget: 2 } as const;
/** `elementType`: T of the `ptr<T>` that faulted, by index. */
export const FAULT_ELEMENT_TYPES = ['i8', 'u8', 'i16', 'u16', 'i32', 'u32', 'i64', 'u64', 'f32', 'f64'] as const;

/** Whether a parameter is one the launch passes (item counts, pointer lengths), not the program. */
export function isLaunchParam(name: string): boolean {
  return name.startsWith(POINTER_BYTES_PREFIX) || (ITEM_COUNT_PARAMS as readonly string[]).includes(name);
}

/** Whether a kernel's parameters end with the item counts: a per-item kernel. */
export function isPerItem(params: readonly { name: string; type: string }[]): boolean {
  const n = params.length;
  if (n < 3) return false;
  for (let i = 0; i < 3; i++) {
    const param = params[n - 3 + i]!;
    if (param.name !== ITEM_COUNT_PARAMS[i] || param.type !== 'i32') return false;
  }
  return true;
}

/** Image formats a device may load: `wasm` (host device), `wgsl` (WebGPU device). */
export type ImageFormat = 'wasm' | 'wgsl' | 'ptx';
export const IMAGE_FORMATS: readonly ImageFormat[] = ['wasm', 'wgsl', 'ptx'];

export interface ImageInfo {
  format: ImageFormat;
  /** Target triple, e.g. `wasm32-unknown-offload`. */
  triple: string;
  /** Byte offset of the image inside the bundle's payload (after the manifest). */
  offset: number;
  /** Size of the image in bytes. */
  size: number;
  /**
   * wasm only: the static data region [staticBase, staticBase + staticSize) the module's active
   * data segments write into. A device must reserve that range of its memory while the image is
   * loaded. staticSize 0 means the image has no static data.
   */
  staticBase: number;
  staticSize: number;
  /** wasm only: the smallest device memory, in 64 KiB pages, the module's memory import accepts. */
  minPages: number;
  /** wgsl only: the source file the image came from, for compiler messages. */
  source?: string;
  /** wgsl only: how each kernel of the image takes its arguments (the WGSL kernel ABI, docs/wgsl-abi.md). */
  kernels?: WgslKernelInfo[];
}

/**
 * A WGSL kernel: a `@compute` entry point whose group-0 storage buffers are its pointer
 * parameters and whose group-0 uniform buffer holds its scalar parameters.
 */
export interface WgslKernelInfo {
  /** The entry point (and kernel) name. */
  name: string;
  /** The parameters in launch order (the manifest entry's order), each with where it goes. */
  params: WgslParamInfo[];
  /** The uniform buffer of the scalars: its binding and byte size; absent without scalars. */
  uniform?: { binding: number; bytes: number };
  /**
   * The workgroup size along x, or along [x, y, z]: each a fixed number, or the name of the
   * override constant the device sets to the launch's threads along that axis.
   */
  workgroupSize: WorkgroupSize;
  /** The override constant the device sets to the launch's `teamMemoryBytes`, when the module declares one. */
  teamMemory?: string;
  /** Whether the entry point uses the fault word (FAULT_WORDS), which the device binds and reads. */
  fault?: boolean;
}

export type WorkgroupSize = number | string | (number | string)[];

export type WgslParamInfo =
  | { name: string; type: 'ptr'; binding: number; readOnly: boolean }
  /** A scalar at `offset` in the uniform buffer; `i32` stands for WGSL i32 and u32 (the bits travel). */
  | { name: string; type: 'i32' | 'f32'; offset: number };

export interface Manifest {
  /** A name for diagnostics (the build's output name). */
  name: string;
  images: ImageInfo[];
  entries: EntryInfo[];
  /**
   * Why each kernel of the wasm image that has no WGSL translation stayed wasm-only (the build's
   * notes), so that launching it on a device that runs only WGSL says so; absent when none.
   */
  notes?: TranslationNote[];
}

/** Why a kernel stays wasm-only: where (file:line as shown) and what. */
export interface TranslationNote {
  kernel: string;
  file: string;
  line: number;
  reason: string;
}

/** A note as the build prints it: `file:line: kernel 'name' is not translated to WGSL (...): it <reason>`. */
export function formatTranslationNote(note: TranslationNote): string {
  return `${note.file}:${note.line}: kernel '${note.kernel}' is not translated to WGSL (it runs on wasm devices only): it ${note.reason}`;
}

/** A decoded bundle: the manifest plus each image's bytes (views into the bundle). */
export interface Bundle {
  manifest: Manifest;
  images: { info: ImageInfo; bytes: Uint8Array }[];
}
