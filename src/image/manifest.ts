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
}

/** Image formats a device may load. Only `wasm` exists today. */
export type ImageFormat = 'wasm' | 'wgsl' | 'ptx';

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
}

export interface Manifest {
  /** A name for diagnostics (the build's output name). */
  name: string;
  images: ImageInfo[];
  entries: EntryInfo[];
}

/** A decoded bundle: the manifest plus each image's bytes (views into the bundle). */
export interface Bundle {
  manifest: Manifest;
  images: { info: ImageInfo; bytes: Uint8Array }[];
}
