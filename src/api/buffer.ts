import { errors } from '../errors.js';
import type { Allocation, MemoryKind } from '../plugins/interface.js';
import type { Device } from './device.js';
import type { LibraryRecord } from '../runtime/image-registry.js';

/**
 * Memory on a device. Owned by whoever allocated it until `free()`; the runtime frees what is
 * left at shutdown. Freeing while queued operations still use the buffer is allowed: the buffer
 * is refused by new operations at once and its memory is returned once those operations finish.
 */
export class DeviceBuffer {
  private isFreed = false;
  private uses = 0;
  private idleWaiters: (() => void)[] = [];

  /** @internal Use `device.alloc()` (or `library.global()`, which passes the library that owns it). */
  constructor(
    readonly device: Device,
    /** @internal */ readonly allocation: Allocation,
    /** @internal For a device global: the library whose image holds it (it lives as long as that is registered). */
    readonly owner?: LibraryRecord,
  ) {}

  /** True for a device global (`library.global()`): module-level data of a loaded image, never freed by the program. */
  get isGlobal(): boolean {
    return this.owner !== undefined;
  }

  get byteLength(): number {
    return this.allocation.bytes;
  }

  get kind(): MemoryKind {
    return this.allocation.kind;
  }

  /** True once freed (for a device global: once its library was unregistered). */
  get freed(): boolean {
    return this.isFreed || this.owner?.unregistered === true;
  }

  /** Frees the memory. A second call rejects with INVALID_BUFFER, as does a device global's. */
  async free(): Promise<void> {
    this.device.context.checkOpen(this.device.id);
    if (this.owner) {
      throw errors.invalidBuffer(
        `${this.describe()} is a device global of library '${this.owner.name}': it lives until the library is unregistered`,
        this.device.id,
      );
    }
    if (this.isFreed) throw errors.invalidBuffer(`${this.describe()} was already freed`, this.device.id);
    this.isFreed = true;
    if (this.uses > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    await this.device.release(this);
  }

  /** `await using buffer = await device.alloc(n)` frees it at the end of the block (unless freed already). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (!this.isFreed && !this.owner && !this.device.context.isClosed) await this.free();
  }

  /** @internal Keeps the memory alive until `done` settles. */
  use(done: Promise<unknown>): void {
    this.beginUse();
    const settle = (): void => this.endUse();
    done.then(settle, settle);
  }

  /** @internal Keeps the memory alive until `endUse()` (a launch's, which settles by callback). */
  beginUse(): void {
    this.uses++;
  }

  /** @internal Ends what `beginUse()` began. */
  endUse(): void {
    if (--this.uses === 0 && this.idleWaiters.length > 0) for (const wake of this.idleWaiters.splice(0)) wake();
  }

  /** @internal A direct view of the bytes, where the device's memory is host memory (see PluginDevice.hostView). */
  directView(offset: number, bytes: number): Uint8Array | undefined {
    return this.device.plugin.hostView?.(this.allocation, offset, bytes);
  }

  /**
   * The buffer's bytes themselves, as a live view (zero copy; olMemAlloc SHARED, cudaHostAlloc
   * mapped): for a buffer allocated with `{ kind: 'shared' }` on a device whose
   * `info.capabilities.mappedMemory` is true (the host device). Writes through it are seen by
   * kernels and reads see what they wrote; the program orders them itself (finish a queue before
   * reading what it wrote). `type` makes a typed view (`hostView(Float32Array)`): the buffer's
   * length must be a multiple of its element size. The view must not be used after `free()`.
   * @throws OffloadError UNSUPPORTED for other buffers, INVALID_BUFFER once freed.
   */
  hostView(): Uint8Array;
  hostView<T extends ArrayBufferView>(type: TypedArrayType<T>): T;
  hostView(type?: TypedArrayType<ArrayBufferView>): ArrayBufferView {
    const device = this.device.id;
    if (this.isFreed) throw errors.invalidBuffer(`hostView: ${this.describe()} was freed`, device);
    if (this.kind !== 'shared' || !this.device.info.capabilities.mappedMemory) {
      throw errors.unsupported(
        `hostView: ${this.describe()} is '${this.kind}' memory of device ${device} (${this.device.info.name}); only 'shared' buffers of a device ` +
          `with mapped memory (info.capabilities.mappedMemory: the host device) are views of the program's memory; copy with queue.read/write instead`,
        device,
      );
    }
    const bytes = this.directView(0, this.byteLength);
    if (!bytes)
      throw errors.unsupported(
        `hostView: device ${device} (${this.device.info.name}) gives no view of its memory`,
        device,
      );
    if (type === undefined || type === Uint8Array) return bytes;
    const size = (type as { BYTES_PER_ELEMENT?: unknown }).BYTES_PER_ELEMENT;
    if (typeof type !== 'function' || typeof size !== 'number') {
      throw errors.invalidArgument(
        `hostView: type must be a TypedArray constructor (Float32Array, ...), got ${typeof type === 'function' ? type.name : typeof type}`,
        device,
      );
    }
    if (this.byteLength % size !== 0) {
      throw errors.invalidArgument(
        `hostView: ${this.describe()} is not a whole number of ${type.name} elements (${size} bytes each)`,
        device,
      );
    }
    return new type(bytes.buffer, bytes.byteOffset, this.byteLength / size);
  }

  /**
   * A pointer `byteOffset` bytes into this buffer, to pass where a kernel takes a pointer (as
   * `x + i` in C). The offset is checked against the buffer's length when the launch is enqueued.
   */
  at(byteOffset: number): DevicePointer {
    return new DevicePointer(this, byteOffset);
  }

  /** @internal */
  describe(): string {
    return `buffer of ${this.byteLength} bytes on device ${this.device.id}`;
  }
}

/** A TypedArray constructor (Float32Array, BigInt64Array, ...), for `buffer.hostView(type)`. */
export interface TypedArrayType<T extends ArrayBufferView> {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
  readonly name: string;
}

/** A position inside a Buffer, made by `buffer.at(offset)`; a kernel pointer argument. */
export class DevicePointer {
  /** @internal Use `buffer.at()`. */
  constructor(
    readonly buffer: Buffer,
    readonly byteOffset: number,
  ) {}
}

/**
 * @deprecated Use `DeviceBuffer`: the old name shadows Node's global `Buffer` wherever it is
 * imported. Kept for one release; the same class.
 */
export const Buffer = DeviceBuffer;
/** @deprecated Use `DeviceBuffer` (see the value `Buffer`). */
export type Buffer = DeviceBuffer;
