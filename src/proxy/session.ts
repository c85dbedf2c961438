/**
 * What one client owns on a proxy: a context of the proxy's runtime (its own device memory,
 * libraries, buffers and queues; see Runtime.createContext) and the names its client gave them.
 * A session outlives none of its client's connections: when the client's main connection
 * closes, however it closes, every peer link attached to the session is closed and the context
 * is shut down, which frees everything the client made.
 */
import { randomBytes } from 'node:crypto';
import { errors } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import type { Kernel } from '../api/kernel.js';
import type { Library } from '../api/library.js';
import type { Runtime } from '../api/runtime.js';
import type { Transport } from '../transport/transport.js';

/** How long a leaving client's work may still run before its context is stopped anyway. */
const LEAVING_GRACE_MS = 2000;

export class Session {
  /** The capability a peer proxy presents to write into this session's buffers. */
  readonly secret = randomBytes(24).toString('hex');
  readonly buffers = new Map<number, Buffer>();
  /** Images by client id; each is a one-image library registered in the session's context. */
  readonly images = new Map<number, Library>();
  /** Loaded kernels by `${image}/${device}/${name}`. */
  readonly kernels = new Map<string, Kernel>();
  /** Connections attached to the session besides the owner's (peer proxies). */
  readonly attached = new Set<Transport>();

  constructor(
    readonly client: string,
    /** The session's context: everything the client makes lives in it. */
    readonly runtime: Runtime,
  ) {}

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
