/**
 * Allocator for a range of device addresses. It keeps plain JS metadata only and never touches
 * the memory it hands out.
 *
 * Data structures: the range is tiled by blocks, each live or free. Two balanced trees (treaps)
 * hold them: `byAddress` has every block ordered by start, so an address finds its block and a
 * block its neighbours; `freeBySize` has the free blocks ordered by (size, start), so the best
 * fit is one ceiling search and the largest free block is the rightmost node. Free blocks are
 * coalesced with free neighbours as they are freed, so no two free blocks are ever adjacent.
 * alloc, free, sizeOf and contains are O(log n) expected in the number of blocks.
 */
import { errors } from '../../errors.js';

/** Where an allocator hands out addresses. */
export interface AllocatorOptions {
  /** First address of the range; a multiple of `alignment`. */
  start: number;
  /**
   * End of the range (exclusive). Rounded down to a multiple of `alignment` past `start`, so a
   * shorter tail is never handed out.
   */
  end: number;
  /** Alignment of every block's address and size: a power of two, at least 16. Default 64. */
  alignment?: number;
}

interface Block {
  /** Address of the first byte; the key of `byAddress`. */
  start: number;
  /** Bytes, a multiple of the alignment. */
  size: number;
  free: boolean;
}

/** Every block is aligned at least this much, so kernels may use 128-bit loads on any block. */
const MIN_ALIGNMENT = 16;
const DEFAULT_ALIGNMENT = 64;

/**
 * Best-fit allocator over `[start, end)` with immediate coalescing. Every block's address and
 * size are multiples of the alignment; among free blocks of the best size the lowest address
 * wins, and a block is cut from the low end of the free block that holds it.
 */
export class DeviceAllocator {
  /** First address handed out. */
  readonly start: number;
  /** End of the usable range (exclusive): `options.end` rounded down to the alignment. */
  readonly end: number;
  readonly alignment: number;
  /** Bytes under management: `end - start`, always `usedBytes + freeBytes`. */
  readonly capacity: number;

  private readonly byAddress = new BlockTree(compareByAddress);
  private readonly freeBySize = new BlockTree(compareBySize);
  private used = 0;
  private live = 0;

  constructor(options: AllocatorOptions) {
    const { start, end, alignment = DEFAULT_ALIGNMENT } = options;
    if (!isPowerOfTwo(alignment) || alignment < MIN_ALIGNMENT) {
      throw errors.invalidArgument(
        `options.alignment must be a power of two >= ${MIN_ALIGNMENT}, got ${String(alignment)}`,
      );
    }
    if (!Number.isSafeInteger(start) || start < 0 || start % alignment !== 0) {
      throw errors.invalidArgument(
        `options.start must be a non-negative multiple of the alignment (${alignment}), got ${String(start)}`,
      );
    }
    if (!Number.isSafeInteger(end) || end - start < alignment) {
      throw errors.invalidArgument(
        `options.end must be an integer at least ${alignment} bytes past start (${hex(start)}), got ${String(end)}`,
      );
    }
    this.alignment = alignment;
    this.start = start;
    this.end = start + Math.floor((end - start) / alignment) * alignment;
    this.capacity = this.end - start;
    this.reset();
  }

  /** Bytes in live blocks, counting each block's rounded size. */
  get usedBytes(): number {
    return this.used;
  }

  /** Bytes in free blocks. */
  get freeBytes(): number {
    return this.capacity - this.used;
  }

  /** Size of the largest free block: the largest `alloc` that can succeed now (0 when full). */
  get largestFreeBlock(): number {
    return this.freeBySize.last()?.size ?? 0;
  }

  /** Number of live blocks. */
  get liveBlocks(): number {
    return this.live;
  }

  /**
   * Returns the address of a new block of at least `bytes`: rounded up to the alignment, and
   * 0 bytes gives a unique block of `alignment` bytes. Throws INVALID_ARGUMENT unless `bytes` is
   * a non-negative safe integer, and OUT_OF_MEMORY when no free block is large enough.
   */
  alloc(bytes: number): number {
    if (!Number.isSafeInteger(bytes) || bytes < 0) {
      throw errors.invalidArgument(`bytes must be a non-negative safe integer, got ${String(bytes)}`);
    }
    // Division and multiplication by a power of two are exact, even past 2^32.
    const size = Math.max(1, Math.ceil(bytes / this.alignment)) * this.alignment;
    // start -1 sorts before every block of the same size: the lowest address of the best size.
    const fit = this.freeBySize.ceiling({ start: -1, size, free: true });
    if (fit === undefined) {
      throw errors.outOfMemory(
        `cannot allocate ${bytes} bytes (${size} after alignment): the largest free block is ` +
          `${this.largestFreeBlock} bytes, ${this.freeBytes} bytes are free in total`,
      );
    }
    // The size is part of freeBySize's key, so the block leaves that tree before it changes;
    // its start does not change, so it keeps its place in byAddress.
    this.freeBySize.remove(fit);
    if (fit.size > size) {
      const rest: Block = { start: fit.start + size, size: fit.size - size, free: true };
      this.byAddress.insert(rest);
      this.freeBySize.insert(rest);
      fit.size = size;
    }
    fit.free = false;
    this.used += size;
    this.live += 1;
    return fit.start;
  }

  /**
   * Frees the block at `address` and returns its size. Throws INVALID_BUFFER when `address` is
   * not the start of a live block (a double free, a foreign or an interior pointer).
   */
  free(address: number): number {
    let block = this.liveBlockAt(address);
    if (block === undefined) throw errors.invalidBuffer(this.describeNonBlock(address));
    const size = block.size;
    this.used -= size;
    this.live -= 1;

    // Blocks tile the range, so the neighbours are the blocks just before and just after.
    const previous = this.byAddress.floor(probe(block.start - 1));
    if (previous?.free) {
      this.freeBySize.remove(previous);
      this.byAddress.remove(block);
      previous.size += block.size;
      block = previous;
    }
    const next = this.byAddress.ceiling(probe(block.start + block.size));
    if (next?.free) {
      this.freeBySize.remove(next);
      this.byAddress.remove(next);
      block.size += next.size;
    }
    block.free = true;
    this.freeBySize.insert(block);
    return size;
  }

  /** Size of the live block starting at `address`, or undefined when there is none. */
  sizeOf(address: number): number | undefined {
    return this.liveBlockAt(address)?.size;
  }

  /**
   * Whether `[address, address + bytes)` lies entirely inside one live block. With `bytes` 0,
   * whether `address` lies inside a live block. False for anything but non-negative integers.
   */
  contains(address: number, bytes: number): boolean {
    if (!Number.isSafeInteger(address) || !Number.isSafeInteger(bytes) || address < 0 || bytes < 0) return false;
    const block = this.byAddress.floor(probe(address));
    if (block === undefined || block.free) return false;
    const blockEnd = block.start + block.size;
    return address < blockEnd && address + bytes <= blockEnd;
  }

  /** Frees every block at once (device reset): one free block covers the range again. */
  reset(): void {
    const whole: Block = { start: this.start, size: this.capacity, free: true };
    this.byAddress.clear();
    this.freeBySize.clear();
    this.byAddress.insert(whole);
    this.freeBySize.insert(whole);
    this.used = 0;
    this.live = 0;
  }

  private liveBlockAt(address: number): Block | undefined {
    if (!Number.isSafeInteger(address)) return undefined;
    const block = this.byAddress.floor(probe(address));
    return block !== undefined && block.start === address && !block.free ? block : undefined;
  }

  /** Why `address` cannot be freed, for the INVALID_BUFFER message. */
  private describeNonBlock(address: number): string {
    const where = hex(address);
    if (!Number.isSafeInteger(address) || address < this.start || address >= this.end) {
      return `${where} is not a device address: outside [${hex(this.start)}, ${hex(this.end)})`;
    }
    const block = this.byAddress.floor(probe(address));
    if (block !== undefined && !block.free) {
      return `${where} points ${address - block.start} bytes into the live block at ${hex(block.start)}; only a block's start can be freed`;
    }
    return `${where} is not allocated (already freed?)`;
  }
}

function isPowerOfTwo(value: number): boolean {
  return Number.isSafeInteger(value) && value > 0 && 2 ** Math.round(Math.log2(value)) === value;
}

/** Addresses in messages are hex; anything that is not an address is shown as it is. */
function hex(address: number): string {
  return Number.isSafeInteger(address) && address >= 0 ? `0x${address.toString(16)}` : String(address);
}

/** A search key for `byAddress`, which compares starts only. */
function probe(start: number): Block {
  return { start, size: 0, free: false };
}

function compareByAddress(a: Block, b: Block): number {
  return a.start - b.start;
}

function compareBySize(a: Block, b: Block): number {
  return a.size - b.size || a.start - b.start;
}

interface TreapNode {
  block: Block;
  /** Heap order on random priorities keeps the expected depth O(log n) whatever the key order. */
  priority: number;
  left: TreapNode | null;
  right: TreapNode | null;
}

/**
 * An ordered set of blocks under `compare`, as a treap. Keys must be unique, and a block's key
 * fields must not change while it is in the tree.
 */
class BlockTree {
  private root: TreapNode | null = null;

  constructor(private readonly compare: (a: Block, b: Block) => number) {}

  clear(): void {
    this.root = null;
  }

  insert(block: Block): void {
    const [below, above] = this.split(this.root, block);
    const node: TreapNode = { block, priority: Math.random(), left: null, right: null };
    this.root = merge(merge(below, node), above);
  }

  remove(block: Block): void {
    this.root = this.removeFrom(this.root, block);
  }

  /** The greatest block that is not after `key`. */
  floor(key: Block): Block | undefined {
    let node = this.root;
    let found: Block | undefined;
    while (node !== null) {
      if (this.compare(node.block, key) <= 0) {
        found = node.block;
        node = node.right;
      } else {
        node = node.left;
      }
    }
    return found;
  }

  /** The least block that is not before `key`. */
  ceiling(key: Block): Block | undefined {
    let node = this.root;
    let found: Block | undefined;
    while (node !== null) {
      if (this.compare(node.block, key) >= 0) {
        found = node.block;
        node = node.left;
      } else {
        node = node.right;
      }
    }
    return found;
  }

  last(): Block | undefined {
    let node = this.root;
    if (node === null) return undefined;
    while (node.right !== null) node = node.right;
    return node.block;
  }

  /** Splits `node` into the blocks before `key` and the rest. */
  private split(node: TreapNode | null, key: Block): [TreapNode | null, TreapNode | null] {
    if (node === null) return [null, null];
    if (this.compare(node.block, key) < 0) {
      const [below, above] = this.split(node.right, key);
      node.right = below;
      return [node, above];
    }
    const [below, above] = this.split(node.left, key);
    node.left = above;
    return [below, node];
  }

  private removeFrom(node: TreapNode | null, block: Block): TreapNode | null {
    if (node === null) return null;
    const order = this.compare(block, node.block);
    if (order === 0) return merge(node.left, node.right);
    if (order < 0) node.left = this.removeFrom(node.left, block);
    else node.right = this.removeFrom(node.right, block);
    return node;
  }
}

/** Joins two treaps where every key of `low` is before every key of `high`. */
function merge(low: TreapNode | null, high: TreapNode | null): TreapNode | null {
  if (low === null) return high;
  if (high === null) return low;
  if (low.priority > high.priority) {
    low.right = merge(low.right, high);
    return low;
  }
  high.left = merge(low, high.left);
  return high;
}
