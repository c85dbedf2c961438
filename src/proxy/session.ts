/**
 * What one client owns on a proxy: a context of the proxy's runtime (its own device memory,
 * libraries, buffers and queues; see Runtime.createContext) and the names its client gave them.
 * A session outlives none of its client's connections: when the client's main connection
 * closes, however it closes, every peer link attached to the session is closed and the context
 * is shut down, which frees everything the client made.
 */
import { errors } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import type { Kernel } from '../api/kernel.js';
import type { Library } from '../api/library.js';
import type { Runtime } from '../api/runtime.js';
import type { Transport } from '../transport/transport.js';

/** How long a leaving client's work may still run before its context is stopped anyway. */
const LEAVING_GRACE_MS = 2000;

/**
 * What one session may hold at once. Over a quota a request fails with OUT_OF_MEMORY naming it
 * (and the `offload proxy` option that sets it); the proxy never runs out of its own memory first.
 */
export interface SessionQuotas {
  /** Bytes of device memory allocated, over all the proxy's devices. */
  memoryBytes: number;
  /** Live buffers (each costs the proxy a few hundred bytes of its own heap besides). */
  buffers: number;
  queues: number;
  /** Registered images. */
  images: number;
  /** Bytes the proxy holds for requests not yet done: small writes' data, small reads' results. */
  pendingBytes: number;
}

export const DEFAULT_QUOTAS: SessionQuotas = {
  memoryBytes: 2 ** 53,
  buffers: 65_536,
  queues: 4096,
  images: 256,
  pendingBytes: 256 * 1024 * 1024,
};

/** The `offload proxy` option of each quota, for messages. */
const QUOTA_OPTIONS: Record<keyof SessionQuotas, string> = {
  memoryBytes: '--quota-memory',
  buffers: '--quota-buffers',
  queues: '--quota-queues',
  images: '--quota-images',
  pendingBytes: '--quota-pending',
};

export class Session {
  readonly buffers = new Map<number, Buffer>();
  /**
   * Write grants by buffer id: the capability a peer proxy presents (instead of any token) to
   * write into that one buffer for this client, and nothing else. Made at allocation, dropped at free.
   */
  readonly grants = new Map<number, string>();
  /** Images by client id; each is a one-image library registered in the session's context. */
  readonly images = new Map<number, Library>();
  /** Loaded kernels by `${image}/${device}/${name}`. */
  readonly kernels = new Map<string, Kernel>();
  /** Connections attached to the session besides the owner's (peer proxies). */
  readonly attached = new Set<Transport>();

  /** What the session holds now, counted against its quotas. */
  readonly usage: SessionQuotas = { memoryBytes: 0, buffers: 0, queues: 0, images: 0, pendingBytes: 0 };

  constructor(
    readonly client: string,
    /** The session's context: everything the client makes lives in it. */
    readonly runtime: Runtime,
    readonly quotas: SessionQuotas = DEFAULT_QUOTAS,
  ) {}

  /**
   * Counts `amount` more of `what` against the session's quota, or throws OUT_OF_MEMORY naming
   * the quota. Returns what gives it back (call it once).
   */
  take(what: keyof SessionQuotas, amount = 1): () => void {
    const limit = this.quotas[what];
    if (this.usage[what] + amount > limit) {
      throw errors.outOfMemory(
        `this client would hold ${this.usage[what] + amount} ${what === 'memoryBytes' || what === 'pendingBytes' ? 'bytes' : what} ` +
          `(${what}); the proxy allows ${limit} per client (offload proxy ${QUOTA_OPTIONS[what]})`,
      );
    }
    this.usage[what] += amount;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.usage[what] -= amount;
    };
  }

  buffer(id: number): Buffer {
    const buffer = this.buffers.get(id);
    if (!buffer) throw errors.invalidBuffer(`buffer ${id} is not a live buffer of this client`);
    return buffer;
  }

  image(id: number): Library {
    const image = this.images.get(id);
    if (!image) throw errors.notFound(`image ${id} was not registered by this client`);
    return image;
  }

  /** Frees everything the client owned. Never throws. */
  async release(): Promise<void> {
    for (const link of this.attached) link.close();
    this.attached.clear();
    this.buffers.clear();
    this.kernels.clear();
    this.images.clear();
    await this.runtime.shutdown({ graceMs: LEAVING_GRACE_MS }).catch(() => {});
  }
}
