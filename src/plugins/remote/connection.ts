/**
 * A client connection to one proxy: sends requests without waiting, matches replies by id, routes
 * the `ready` and `data` frames of bulk transfers, and turns a broken connection into DEVICE_LOST
 * for every pending and later request at once.
 *
 * Ownership: the connection owns its transport; `close()` closes it and rejects what is pending.
 */
import { errors, type OffloadError } from '../../errors.js';
import type { DeviceInfo } from '../interface.js';
import { connectMpi, mpiRankOf } from '../../transport/mpi.js';
import { connectTcp } from '../../transport/tcp.js';
import type { Frame } from '../../transport/frame.js';
import type { Transport } from '../../transport/transport.js';
import { fromWireError, Meta, PROTOCOL_VERSION } from '../../proxy/protocol.js';

/** Callbacks of a request that streams: `ready` (rendezvous write may start), `data` (read chunks). */
export interface StreamHandlers {
  onReady?(): void;
  onData?(offset: number, payload: Uint8Array): void;
  /** Where the `data` frame at `offset` may land directly (a view of `length` bytes), if anywhere. */
  dataTarget?(offset: number, length: number): Uint8Array | undefined;
}

interface Pending extends StreamHandlers {
  resolve(frame: Frame): void;
  reject(error: OffloadError): void;
}

export interface ConnectOptions {
  token: string;
  /** Attach to an existing session (a proxy linking to a peer on behalf of a client). */
  attach?: string;
  timeoutMs?: number;
}

export class RemoteConnection {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private lostError: OffloadError | undefined;
  private readonly lostListeners: ((error: OffloadError) => void)[] = [];
  /** The session secret a peer proxy presents to act on this client's buffers. */
  session = '';
  devices: DeviceInfo[] = [];

  private constructor(
    readonly transport: Transport,
    readonly address: string,
    /** Kept so that this proxy's peers can be told how to reach it on the client's behalf. */
    readonly token: string,
  ) {
    transport.onFrame = (frame) => this.onFrame(frame);
    transport.payloadSink = (meta, length) => {
      if (meta.op !== 'data' || typeof meta.id !== 'number' || typeof meta.offset !== 'number') return undefined;
      return this.pending.get(meta.id)?.dataTarget?.(meta.offset, length);
    };
    transport.onClose = (reason) => this.fail(reason ?? errors.deviceLost(`the connection to proxy ${address} was closed`));
  }

  /** Connects and says hello; rejects with UNAUTHORIZED for a wrong token, DEVICE_LOST if unreachable. */
  static async open(address: string, options: ConnectOptions): Promise<RemoteConnection> {
    // `mpi:N` is a proxy rank of this MPI job; anything else a TCP address.
    const transport = mpiRankOf(address) === undefined ? await connectTcp(address, { timeoutMs: options.timeoutMs }) : connectMpi(address);
    const connection = new RemoteConnection(transport, address, options.token);
    const hello: Record<string, unknown> = { op: 'hello', version: PROTOCOL_VERSION, token: options.token };
    if (options.attach) hello.attach = options.attach;
    try {
      const reply = await connection.request(hello);
      const meta = new Meta(reply);
      connection.session = meta.string('session');
      connection.devices = meta.array('devices') as DeviceInfo[];
      return connection;
    } catch (error) {
      transport.close();
      throw error;
    }
  }

  get lost(): OffloadError | undefined {
    return this.lostError;
  }

  onLost(listener: (error: OffloadError) => void): void {
    this.lostListeners.push(listener);
  }

  /** Sends a request; resolves with its reply frame, rejects with the reply's error. */
  request(meta: Record<string, unknown>, payload?: Uint8Array, handlers: StreamHandlers = {}): Promise<Frame> {
    if (this.lostError) return Promise.reject(this.lostError);
    const id = this.nextId++;
    const reply = new Promise<Frame>((resolve, reject) => this.pending.set(id, { resolve, reject, ...handlers }));
    this.transport.send({ ...meta, id }, payload);
    return reply;
  }

  /** Sends a frame that gets no reply (chunks of a write). Returns false above the high-water mark. */
  post(meta: Record<string, unknown>, payload?: Uint8Array): boolean {
    return this.transport.send(meta, payload);
  }

  drained(): Promise<void> {
    return this.transport.drained();
  }

  /** Id the next request will get (lets a caller route frames before the request is sent). */
  peekId(): number {
    return this.nextId;
  }

  private onFrame(frame: Frame): void {
    try {
      const meta = new Meta(frame);
      const op = meta.op;
      const pending = this.pending.get(meta.uint('id'));
      if (!pending) throw errors.protocol(`proxy ${this.address} answered request ${meta.uint('id')}, which is not pending`);
      if (op === 'reply') {
        this.pending.delete(meta.uint('id'));
        const error = meta.error('error');
        if (error) pending.reject(fromWireError(error, this.address));
        else pending.resolve(frame);
      } else if (op === 'ready' && pending.onReady) {
        pending.onReady();
      } else if (op === 'data' && pending.onData) {
        pending.onData(meta.uint('offset'), frame.payload);
      } else {
        throw errors.protocol(`unexpected '${op}' frame from proxy ${this.address}`);
      }
    } catch (error) {
      this.transport.close(error as OffloadError);
    }
  }

  private fail(reason: OffloadError): void {
    if (this.lostError) return;
    this.lostError =
      reason.code === 'DEVICE_LOST' || reason.code === 'UNAUTHORIZED'
        ? reason
        : errors.deviceLost(`the connection to proxy ${this.address} failed: ${reason.message}`);
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const request of pending) request.reject(this.lostError);
    for (const listener of this.lostListeners) listener(this.lostError);
  }

  close(): void {
    this.transport.close();
  }
}
