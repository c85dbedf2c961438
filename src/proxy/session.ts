/**
 * What one client owns on a proxy: its buffers, images and kernels, by the ids it chose. A
 * session outlives none of its client's connections: when the client's main connection closes,
 * everything is freed and every peer link attached to the session is closed too.
 */
import { randomBytes } from 'node:crypto';
import { errors } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import type { Kernel } from '../api/kernel.js';
import type { Library } from '../api/library.js';
import type { Transport } from '../transport/transport.js';

export class Session {
  /** The capability a peer proxy presents to write into this session's buffers. */
  readonly secret = randomBytes(24).toString('hex');
  readonly buffers = new Map<number, Buffer>();
  /** Images by client id; each is a one-image library registered on the proxy's runtime. */
  readonly images = new Map<number, Library>();
  /** Loaded kernels by `${image}/${device}/${name}`. */
  readonly kernels = new Map<string, Kernel>();
  /** Connections attached to the session besides the owner's (peer proxies). */
  readonly attached = new Set<Transport>();

  constructor(readonly client: string) {}

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
    const buffers = [...this.buffers.values()];
    this.buffers.clear();
    this.kernels.clear();
    await Promise.all(buffers.map((buffer) => buffer.free().catch(() => {})));
    const images = [...this.images.values()].reverse();
    this.images.clear();
    for (const image of images) await image.unregister().catch(() => {});
  }
}
