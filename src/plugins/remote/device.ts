/**
 * A device served by a proxy, made to look local. Memory operations and image loads wait for
 * the proxy's answer (the API awaits them anyway); queue operations are pipelined (queue.ts).
 */
import { errors, type OffloadError } from '../../errors.js';
import type { ParamInfo } from '../../image/manifest.js';
import { Meta } from '../../proxy/protocol.js';
import type {
  Allocation,
  DeviceImage,
  DeviceInfo,
  LoadedImage,
  LoadedKernel,
  MemoryKind,
  PluginDevice,
  PluginQueue,
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
    this.info = { ...remote, plugin: 'remote', location: address, memoryKinds: ['device'], name: `${remote.name} @ ${address}` };
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
      const registered = this.connection.request({ op: 'register', image: id, name: image.name, info, entries: image.entries }, image.bytes).then(() => {});
      sent = { id, registered, devices: 0 };
      this.state.images.set(image.bytes, sent);
      registered.catch(() => this.state.images.delete(image.bytes));
    }
    await sent.registered;
    const reply = new Meta(await this.connection.request({ op: 'load', image: sent.id, device: this.index }));
    sent.devices++;
    const kernels = new Map<string, RemoteKernel>();
    for (const kernel of reply.array('kernels') as { name: string; params: ParamInfo[] }[]) {
      kernels.set(kernel.name, new RemoteKernel(kernel.name, kernel.params, sent.id));
    }
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
    const reply = new Meta(await this.connection.request({ op: 'alloc', device: this.index, buffer: id, bytes, kind }));
    return new RemoteAllocation(id, bytes, kind, reply.uint('address'), reply.string('grant'));
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

  static check(device: PluginDevice, what: string): RemoteDevice {
    if (!(device instanceof RemoteDevice)) throw errors.invalidArgument(`${what} is not a remote device`);
    return device;
  }
}
