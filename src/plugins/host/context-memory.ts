/**
 * A host device context's memory: a shared `WebAssembly.Memory` of its own, grown as the context
 * allocates, and its allocator; a device pointer is a byte offset into it. The contexts of one
 * device share its workers and, together, may hold no more than its memory size.
 */
import { errors } from '../../errors.js';
import { PAGE_BYTES, STATIC_WINDOW_END } from '../../image/wasm-abi.js';
import type { Allocation, MemoryInfo, MemoryKind } from '../interface.js';
import { DeviceAllocator } from './allocator.js';
import type { WorkerPool } from './worker-pool.js';

export class HostAllocation implements Allocation {
  constructor(
    readonly bytes: number,
    readonly kind: MemoryKind,
    readonly address: number,
  ) {}
}

/**
 * Zeroes [start, end) of `heap`, a view of shared memory. Uint8Array.fill on shared memory runs
 * byte by byte (35 ms for 128 MiB on a 2-vCPU VM); 8-byte words fill it 7x faster.
 */
export function zero(heap: Uint8Array, start: number, end: number): void {
  const first = Math.min(end, Math.ceil(start / 8) * 8); // addresses reach 4 GiB: no 32-bit bit operations
  const last = Math.max(first, Math.floor(end / 8) * 8);
  heap.fill(0, start, first);
  if (last > first) new BigInt64Array(heap.buffer, heap.byteOffset + first, (last - first) / 8).fill(0n);
  heap.fill(0, last, end);
}

/** One context's memory and its allocations (HostDevice holds one per context). */
export class ContextMemory {
  /** The context's memory, dropped when the context ends (so that it can be collected). */
  wasm: WebAssembly.Memory | undefined;
  /**
   * A view of the context's memory as far as it has grown (empty once the context ended). The
   * memory grows with allocation (see allocate), and a view taken before stays valid for the
   * bytes it covered: a shared memory is never detached.
   */
  heap: Uint8Array;
  private readonly allocator: DeviceAllocator;
  /** The end of the highest block this context has allocated: its share of WorkerPool.heldBytes. */
  private highWater = STATIC_WINDOW_END;

  constructor(
    /** The device's memory size (DeviceInfo.memoryBytes), which its contexts together may hold. */
    private readonly deviceBytes: number,
    private readonly pool: WorkerPool,
  ) {
    const pages = (deviceBytes + STATIC_WINDOW_END) / PAGE_BYTES;
    // The memory starts at the static window and grows only as far as the context allocates: a
    // kernel's access past that traps, so a context can touch (commit) no more than it holds.
    // A memory of the device's full size would let a kernel of a 64-byte buffer commit all of it,
    // in every context.
    this.wasm = new WebAssembly.Memory({ initial: STATIC_WINDOW_END / PAGE_BYTES, maximum: pages, shared: true });
    this.heap = new Uint8Array(this.wasm.buffer);
    this.allocator = new DeviceAllocator({ start: STATIC_WINDOW_END, end: pages * PAGE_BYTES, alignment: 64 });
  }

  /** What this context holds of the device's memory: its share of WorkerPool.heldBytes. */
  get heldBytes(): number {
    return this.highWater - STATIC_WINDOW_END;
  }

  /** `bytes` of this context's memory, within what its contexts together may hold. */
  allocate(bytes: number): number {
    const address = this.allocator.alloc(bytes);
    const end = address + this.allocator.sizeOf(address)!;
    if (end > this.highWater) {
      // Every context has a memory of the device's full size, committed as it is touched; the
      // contexts together may hold no more than one device's worth (see WorkerPool.heldBytes).
      const growth = end - this.highWater;
      if (this.pool.heldBytes + growth > this.deviceBytes) {
        this.allocator.free(address);
        throw errors.outOfMemory(
          `cannot allocate ${bytes} bytes: the host device's ${this.deviceBytes} bytes are held by its ` +
            `${this.pool.contexts} contexts (${this.pool.heldBytes} bytes; a context holds memory up to the highest address it ` +
            'has allocated, until it ends)',
        );
      }
      this.pool.heldBytes += growth;
      this.highWater = end;
      this.grow(end);
    }
    return address;
  }

  /** Grows the memory to cover `end` (a page multiple past it); running kernels see it at once. */
  private grow(end: number): void {
    const memory = this.wasm;
    if (!memory) return;
    const pages = Math.ceil(end / PAGE_BYTES) - memory.buffer.byteLength / PAGE_BYTES;
    if (pages <= 0) return;
    memory.grow(pages);
    this.heap = new Uint8Array(memory.buffer);
  }

  hostView(alloc: Allocation, offset: number, bytes: number): Uint8Array {
    // The heap would hand out any range (other allocations', or a short view past its end): the
    // callers check, and a range outside the allocation is refused here too.
    if (!(offset >= 0 && bytes >= 0 && offset + bytes <= alloc.bytes))
      throw errors.outOfBounds(
        `a view of ${bytes} bytes at offset ${offset} does not lie inside its allocation of ${alloc.bytes} bytes`,
      );
    const start = (alloc as HostAllocation).address + offset;
    return this.heap.subarray(start, start + bytes);
  }

  /**
   * This context's free bytes: those free below its high-water mark, plus what the device's
   * contexts together have not yet taken (see allocate). The largest block is the allocator's,
   * within that.
   */
  memoryInfo(): MemoryInfo {
    const total = this.deviceBytes;
    const heldHere = this.highWater - STATIC_WINDOW_END;
    const freeBytes = Math.max(0, heldHere - this.allocator.usedBytes) + Math.max(0, total - this.pool.heldBytes);
    return {
      totalBytes: total,
      freeBytes,
      largestFreeBlockBytes: Math.min(this.allocator.largestFreeBlock, freeBytes),
    };
  }

  release(address: number): void {
    const size = this.allocator.free(address);
    // Zeroed before it is handed out again: a new buffer never shows what the last one held.
    // (Zeroing at free touches only pages that were used; zeroing at alloc would commit fresh ones.)
    zero(this.heap, address, address + size);
  }

  /** The context ended: its memory is dropped (so that it can be collected), and the heap is empty. */
  drop(): void {
    this.wasm = undefined;
    this.heap = new Uint8Array(0);
  }
}
