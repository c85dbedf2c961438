/**
 * The scheduling state of `runtime.spread` (src/omp/spread.ts): each device's part, and the work
 * queue it takes its chunks from.
 */
import type { Buffer } from '../api/buffer.js';
import type { Device } from '../api/device.js';
import { pluginDevice } from '../api/internal.js';
import type { Kernel } from '../api/kernel.js';
import type { Queue } from '../api/queue.js';
import { OffloadError } from '../errors.js';
import { MAX_ITEMS, type Chunk } from './spread-arguments.js';

/**
 * One of a device's chunk pipelines: its own queue and sections, so that one lane's copies go over
 * the wire while another lane's chunk runs (a device runs `chunksInFlight` lanes).
 */
export class Lane {
  queue: Queue | undefined;
  /** By argument index: each part's buffer (grown as chunks grow). */
  readonly buffers = new Map<number, Buffer>();
  /** The chunk it is running, if any. */
  current: Chunk | undefined;
}

/** A device's state in a spread. */
export class Worker {
  kernel: Kernel | undefined;
  /** By argument index: the broadcast buffers its lanes share. */
  readonly buffers = new Map<number, Buffer>();
  readonly lanes: Lane[];
  units = 0;
  chunks = 0;
  setupMs = 0;
  /** Time with at least one chunk in flight (the union of its chunks' times, lanes overlapping). */
  busyMs = 0;
  private accountedUntil = 0;
  lost: OffloadError | undefined;
  rerun = 0;

  constructor(
    readonly device: Device,
    lanes: number,
  ) {
    this.lanes = Array.from({ length: lanes }, () => new Lane());
  }

  /** Whether a chunk of it is in flight. */
  get running(): boolean {
    return this.lanes.some((lane) => lane.current !== undefined);
  }

  /** A chunk of `count` units, run from `began` to `now` (chunks end in time order), completed. */
  completed(count: number, began: number, now: number): void {
    this.busyMs += Math.max(0, now - Math.max(began, this.accountedUntil));
    this.accountedUntil = now;
    this.units += count;
    this.chunks++;
  }

  /** Units a millisecond, from its chunks so far; undefined before its first. */
  get rate(): number | undefined {
    return this.chunks === 0 || this.busyMs <= 0 ? undefined : this.units / this.busyMs;
  }
}

export function isLoss(error: unknown, device: Device): boolean {
  return error instanceof OffloadError && error.code === 'DEVICE_LOST' && pluginDevice(device).lost !== undefined;
}

/** The work queue: the range not yet handed out, and chunks put back by lost devices. */
export class ChunkQueue {
  private cursor = 0;
  private readonly returned: Chunk[] = [];
  private wake: (() => void) | undefined;
  private changed: Promise<void>;

  constructor(
    readonly units: number,
    private readonly minChunk: number,
    private readonly maxChunk: number | undefined,
    private readonly unit: 'team' | 'item',
  ) {
    this.changed = this.renew();
  }

  private renew(): Promise<void> {
    return new Promise((resolve) => (this.wake = resolve));
  }

  /** Wakes workers waiting for chunks a lost device may put back. */
  notify(): void {
    this.wake?.();
    this.changed = this.renew();
  }

  get waitForChange(): Promise<void> {
    return this.changed;
  }

  /** The next chunk for `worker`; 'wait' while others still run chunks that may come back; undefined when all is done. */
  take(worker: Worker, workers: readonly Worker[]): Chunk | 'wait' | undefined {
    const size = this.size(worker, workers);
    const back = this.returned.shift();
    if (back) {
      if (back.count <= size) return back;
      this.returned.unshift({ first: back.first + size, count: back.count - size });
      return { first: back.first, count: size };
    }
    if (this.cursor < this.units) {
      const count = Math.min(size, this.units - this.cursor);
      const chunk = { first: this.cursor, count };
      this.cursor += count;
      return chunk;
    }
    return workers.some((other) => other.running) ? 'wait' : undefined;
  }

  /** A lost device's chunk, to be run again. */
  putBack(chunk: Chunk): void {
    this.returned.push(chunk);
  }

  private size(worker: Worker, workers: readonly Worker[]): number {
    const live = workers.filter((other) => !other.lost);
    const left = this.units - this.cursor + this.returned.reduce((sum, chunk) => sum + chunk.count, 0);
    const limit = Math.min(this.maxChunk ?? Infinity, this.unit === 'team' ? worker.device.info.maxTeams : MAX_ITEMS);
    const rate = worker.rate;
    let size: number;
    if (rate === undefined) {
      // A probe: a sixteenth of an equal share, to measure the device on.
      size = Math.ceil(this.units / (live.length * 16));
    } else {
      const measured = live.map((other) => other.rate).filter((r): r is number => r !== undefined);
      const typical = measured.reduce((sum, r) => sum + r, 0) / measured.length;
      const total = live.reduce((sum, other) => sum + (other.rate ?? typical), 0);
      size = Math.ceil((left * (rate / total)) / 2);
    }
    return Math.max(1, Math.min(limit, Math.max(this.minChunk, size)));
  }
}
