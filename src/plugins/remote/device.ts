/**
 * A device served by a proxy, made to look local. Memory operations and image loads wait for
 * the proxy's answer (the API awaits them anyway); queue operations are pipelined (queue.ts).
 */
import type { OffloadError } from '../../errors.js';
import type { ImageFormat, ParamInfo } from '../../image/manifest.js';
import {
  decodeAllocReply,
  decodeGlobalReply,
  decodeLoadReply,
  decodeMemoryInfoReply,
} from '../../protocol/decode-reply.js';
import {
  BOOLEAN_CAPABILITIES,
  type DeviceCapabilities,
  type Allocation,
  type DeviceImage,
  type DeviceInfo,
  type LoadedImage,
  type LoadedKernel,
  type MemoryInfo,
  type MemoryKind,
  type PluginDevice,
  type PluginQueue,
} from '../interface.js';
import type { RemoteConnection } from './connection.js';
import { RemoteQueue } from './queue.js';

export class RemoteAllocation implements Allocation {
  constructor(
    /** The buffer's id in the client's session on the proxy. */
    readonly id: number,
    readonly bytes: number,
    readonly kind: MemoryKind,
    readonly address: number | undefined,
    /** The proxy's write grant for this buffer: what another proxy presents to copy into it. */
    readonly grant: string,
  ) {}
}

export class RemoteKernel implements LoadedKernel {
  constructor(
    readonly name: string,
    readonly params: readonly ParamInfo[],
    readonly image: number,
    readonly format: ImageFormat,
    readonly staticBytes: number,
  ) {}
}

class RemoteImage implements LoadedImage {
  constructor(
    readonly id: number,
    readonly kernels: ReadonlyMap<string, RemoteKernel>,
  ) {}
}

/**
 * What a connection shares between its devices: id counters and the images already sent, so
 * that an image travels once per proxy however many of its devices load it.
 */
export class ConnectionState {
  private nextIds = { buffer: 1, image: 1, queue: 1, event: 1, gate: 1 };
  /** Image bytes (the registry hands the same view for the same library) -> image id and users. */
  readonly images = new Map<Uint8Array, { id: number; registered: Promise<void>; devices: number }>();

  constructor(readonly connection: RemoteConnection) {}

  next(kind: keyof ConnectionState['nextIds']): number {
    return this.nextIds[kind]++;
  }
}

/**
 * What a proxy says its device can do, each field checked (a proxy is a peer like any other: a
 * missing or mistyped field reads as lacking), and no mapped memory: a buffer across a network
 * cannot be a view of the program's memory.
 */
function remoteCapabilities(told: unknown): DeviceCapabilities {
  const fields = typeof told === 'object' && told !== null ? (told as Record<string, unknown>) : {};
  const capabilities = Object.fromEntries(BOOLEAN_CAPABILITIES.map((name) => [name, fields[name] === true])) as Record<
    (typeof BOOLEAN_CAPABILITIES)[number],
    boolean
  >;
  const teamMemory = fields.maxTeamMemoryBytes;
  return {
    ...capabilities,
    mappedMemory: false,
    maxTeamMemoryBytes:
      typeof teamMemory === 'number' && Number.isSafeInteger(teamMemory) && teamMemory >= 0 ? teamMemory : 0,
  };
}

export class RemoteDevice implements PluginDevice {
  readonly info: DeviceInfo;

  constructor(
    readonly state: ConnectionState,
    /** The device's index on its proxy. */
    readonly index: number,
    remote: DeviceInfo,
  ) {
    const address = state.connection.address;
    // Host-visible kinds ('host', 'shared') make no sense across a network: only device memory.
    this.info = {
      ...remote,
      plugin: 'remote',
      location: address,
      memoryKinds: ['device'],
      name: `${remote.name} @ ${address}`,
      capabilities: remoteCapabilities(remote.capabilities),
    };
  }

  get connection(): RemoteConnection {
    return this.state.connection;
  }

  get lost(): OffloadError | undefined {
    return this.connection.lost;
  }

  async loadImage(image: DeviceImage): Promise<LoadedImage> {
    let sent = this.state.images.get(image.bytes);
    if (!sent) {
      const id = this.state.next('image');
      const { offset: _offset, size: _size, ...info } = image.info;
      const registered = this.connection
        .request({ op: 'register', image: id, name: image.name, info, entries: image.entries }, image.bytes)
        .then(() => {});
      sent = { id, registered, devices: 0 };
      this.state.images.set(image.bytes, sent);
      registered.catch(() => this.state.images.delete(image.bytes));
    }
    await sent.registered;
    const reply = await this.connection.request({ op: 'load', image: sent.id, device: this.index });
    sent.devices++;
    const told = decodeLoadReply(reply, this.connection.address);
    const kernels = new Map<string, RemoteKernel>();
    for (const { name, params, format, staticBytes } of told)
      kernels.set(name, new RemoteKernel(name, params, sent.id, format, staticBytes));
    return new RemoteImage(sent.id, kernels);
  }

  async unloadImage(image: LoadedImage): Promise<void> {
    const { id } = image as RemoteImage;
    for (const [bytes, sent] of this.state.images) {
      if (sent.id !== id || --sent.devices > 0) continue;
      // The last device using the image: the proxy drops it (it unloads from every device).
      this.state.images.delete(bytes);
      await this.connection.request({ op: 'unload', image: id });
    }
  }

  async alloc(bytes: number, kind: MemoryKind): Promise<Allocation> {
    const id = this.state.next('buffer');
    const { address, grant } = decodeAllocReply(
      await this.connection.request({ op: 'alloc', device: this.index, buffer: id, bytes, kind }),
    );
    return new RemoteAllocation(id, bytes, kind, address, grant);
  }

  /** The proxy's device as this client may use it: within its memory quota there. */
  async memoryInfo(): Promise<MemoryInfo> {
    return decodeMemoryInfoReply(
      await this.connection.request({ op: 'memory-info', device: this.index }),
      this.connection.address,
    );
  }

  /** A device global of a loaded image: the proxy names it as one of this client's buffers there. */
  async global(image: LoadedImage, name: string): Promise<Allocation | undefined> {
    const id = this.state.next('buffer');
    const { bytes, address } = decodeGlobalReply(
      await this.connection.request({
        op: 'global',
        image: (image as RemoteImage).id,
        device: this.index,
        name,
        buffer: id,
      }),
    );
    return new RemoteAllocation(id, bytes, 'device', address, '');
  }

  async free(alloc: Allocation): Promise<void> {
    await this.connection.request({ op: 'free', buffer: (alloc as RemoteAllocation).id });
  }

  createQueue(): PluginQueue {
    if (this.lost) throw this.lost;
    return new RemoteQueue(this);
  }

  /** Whether `other` is a device of the same proxy connection (copies stay inside the proxy). */
  sameProxy(other: PluginDevice): other is RemoteDevice {
    return other instanceof RemoteDevice && other.state === this.state;
  }
}
