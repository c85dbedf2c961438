/**
 * What a proxy keeps of one client connection, for its request handlers (handlers.ts): the
 * client's Session once logged in (its context, buffers, images, kernels and quotas; session.ts),
 * the queues, events and gates the client named on this connection, the host calls waiting for
 * its answer, its streamed writes in progress, and, for a peer proxy's link, the one buffer it
 * was granted. Handlers read and change it; the connection (connection.ts) never does.
 *
 * Ownership: one per connection (handlers.ts, `serveClient`); `release()`, when the connection
 * closes, fails what waits on the client and frees the session (unless it is a peer link's).
 */
import { errors, type OffloadError } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import type { Device } from '../api/device.js';
import type { Event, Queue } from '../api/queue.js';
import type { Runtime } from '../api/runtime.js';
import type { KernelPrint } from '../runtime/options.js';
import type { HostCall } from '../api/host-functions.js';
import type { Frame } from '../transport/frame.js';
import { decodeHostCallResult } from '../protocol/decode-request.js';
import type { Deferred } from '../protocol/gate.js';
import type { ProxyConnection } from './connection.js';
import type { PeerLinks } from './peer-links.js';
import type { Session } from './session.js';
import type { ServingDirectory } from './metrics.js';

/** Queues refused at creation whose error is kept for the requests that name them. */
const MAX_QUEUE_REFUSALS = 256;
/** A frame's payload up to this size is not charged to --proxy-memory while it arrives (see payloadTarget). */
export const SMALL_FRAME_BYTES = 64 * 1024;
/** Unsent frames past which a kernel's print lines are dropped (see forwardPrint). */
const PRINT_BACKLOG_BYTES = 4 * 1024 * 1024;

/** A rendezvous write in progress: chunks land straight in device memory. */
export interface IncomingWrite {
  buffer: Buffer;
  offset: number;
  bytes: number;
  received: number;
  writes: Promise<void>[];
  /** Settles once every chunk has arrived and been written (or the transfer failed). */
  landed: Deferred;
  /** Device memory the chunks land in directly, from `ready` on (host-addressable devices). */
  direct?: Uint8Array;
}

export class ClientSession {
  /** The client's session, once logged in (a peer link: the session of the client that granted it). */
  session: Session | undefined;
  /** Set while the session of an accepted hello is being made. */
  loggingIn = false;
  /** For a peer proxy's link: the one buffer of the client's session it may write into. */
  granted: number | undefined;
  readonly queues = new Map<number, Queue>();
  /** Queues refused at creation, by client id, and why (see refusedQueue). */
  private readonly queueRefusals = new Map<number, OffloadError>();
  /** The client's id of each of those queues, by the proxy queue's own id (print lines name the latter). */
  readonly clientQueueIds = new Map<number, number>();
  readonly events = new Map<number, Event>();
  lastEvent = 0;
  /** Gates of `wait-host` requests, until the client's `signal`. */
  readonly gates = new Map<number, Deferred>();
  /** Host calls sent to the client and not answered yet, by call id. */
  private readonly hostCalls = new Map<number, { resolve: (value: number) => void; reject: (error: Error) => void }>();
  private nextHostCall = 1;
  /** Streamed writes waiting for their chunks, by request id. */
  readonly incoming = new Map<number, IncomingWrite>();
  /** Per device, a queue for chunk transfers while the client's queue is parked at a gate. */
  private readonly sideQueues = new Map<Device, Queue>();
  /** Gives back the pending bytes counted for the frame being received (its payload is buffered until whole). */
  private frameGiveBack: (() => void) | undefined;
  /** Print lines dropped since the last one sent (see forwardPrint). */
  private printsDropped = 0;

  constructor(
    /** The connection the client's frames come on and its replies go out by. */
    readonly connection: ProxyConnection,
    /** The proxy's runtime: what the devices are (each session works in a context of it). */
    readonly runtime: Runtime,
    readonly directory: ServingDirectory,
    readonly peers: PeerLinks,
  ) {}

  /** True once the peer presented the right token (its session may still be in the making). */
  get loggedIn(): boolean {
    return this.session !== undefined || this.loggingIn;
  }

  get attached(): boolean {
    return this.granted !== undefined;
  }

  /** A peer link's login: it works in `session`, and may write into its buffer `buffer` only. */
  attach(session: Session, buffer: number): void {
    this.session = session;
    this.granted = buffer;
    session.attached.add(this.connection.transport);
  }

  /** Queues this client holds (its own and the side queues of chunked transfers). */
  get queueCount(): number {
    return this.queues.size + this.sideQueues.size;
  }

  /**
   * Where a frame's payload lands: in device memory for a streamed write's next chunk; else it
   * is buffered until the frame is whole, and counted meanwhile as the session's pending bytes
   * (and the proxy's memory): over the quota, the connection is closed with OUT_OF_MEMORY.
   */
  payloadTarget(meta: Record<string, unknown>, length: number): Uint8Array | undefined {
    const target = this.chunkTarget(meta, length);
    if (target !== undefined || !this.session) return target;
    try {
      // A small frame (every request but a payload's) counts against the tenant's quota only:
      // connections that fill --proxy-memory with frames they never finish must not close a
      // client's next request. All small frames together hold at most
      // --max-connections x SMALL_FRAME_BYTES.
      this.frameGiveBack = this.session.take('pendingBytes', length, length > SMALL_FRAME_BYTES);
    } catch (error) {
      this.connection.refuse(0, error as OffloadError);
    }
    return undefined;
  }

  /** The frame being received is whole (or never will be): its pending bytes count no more. */
  frameWhole(): void {
    this.frameGiveBack?.();
    this.frameGiveBack = undefined;
  }

  /** Where a `chunk` frame's payload lands: straight in device memory when that is possible and the chunk is the next one. */
  private chunkTarget(meta: Record<string, unknown>, length: number): Uint8Array | undefined {
    if (meta.op !== 'chunk' || typeof meta.id !== 'number') return undefined;
    const write = this.incoming.get(meta.id);
    if (!write?.direct || meta.offset !== write.received || write.received + length > write.bytes) return undefined;
    return write.direct.subarray(write.received, write.received + length);
  }

  /** A chunk of streamed write `id`: the next bytes, in order. */
  chunk(id: number, offset: number, payload: Uint8Array): void {
    const write = this.incoming.get(id);
    if (!write) throw errors.protocol(`chunk for write ${id}, which is not waiting for data`);
    if (offset !== write.received || write.received + payload.byteLength > write.bytes || payload.byteLength === 0) {
      throw errors.protocol(
        `chunk of write ${id} at offset ${offset} (${payload.byteLength} bytes) does not continue it at ${write.received} of ${write.bytes}`,
      );
    }
    const landed =
      write.direct !== undefined &&
      payload.buffer === write.direct.buffer &&
      payload.byteOffset === write.direct.byteOffset + write.received;
    if (!landed) {
      const side = this.sideQueue(write.buffer.device);
      write.writes.push(side.write(write.buffer, payload, { offset: write.offset + write.received }).done);
    }
    write.received += payload.byteLength;
    if (write.received === write.bytes)
      Promise.all(write.writes).then(
        () => write.landed.resolve(),
        (error: unknown) => write.landed.reject(error),
      );
  }

  /** The device's queue for chunks while the client's queue is parked. */
  sideQueue(device: Device): Queue {
    let queue = this.sideQueues.get(device);
    if (!queue) this.sideQueues.set(device, (queue = device.queue()));
    return queue;
  }

  /**
   * Sends a line the client's kernel printed, as it is printed: before the launch's reply, which
   * goes out only once the launch's event completes. Named by the client's queue id.
   */
  forwardPrint(line: KernelPrint): void {
    const queue = this.clientQueueIds.get(line.queue);
    if (queue === undefined) return;
    // Lines a client does not read are dropped past PRINT_BACKLOG_BYTES of unsent frames: launches
    // read before reading stopped would otherwise each leave their print budget in the proxy.
    if ((this.connection.transport.queuedBytes?.() ?? 0) > PRINT_BACKLOG_BYTES) {
      this.printsDropped++;
      return;
    }
    if (this.printsDropped > 0) {
      const text = `${this.printsDropped} print line(s) dropped: the client did not read them`;
      this.connection.send({ op: 'print', queue, kernel: line.kernel, team: -1, text });
      this.printsDropped = 0;
    }
    this.connection.send({ op: 'print', queue, kernel: line.kernel, team: line.team, text: line.text });
  }

  /**
   * Sends a kernel's host call to the client, whose program runs the function, and resolves
   * with its answer ('host-call-result'). A call of a queue the client has destroyed, or once
   * the client is gone, fails; at most one call per worker of the device waits at a time.
   */
  forwardHostCall(call: HostCall): Promise<number> {
    const queue = this.clientQueueIds.get(call.queue);
    if (queue === undefined || this.connection.transport.closed)
      return Promise.reject(new Error('the client that launched the kernel is gone'));
    const id = this.nextHostCall++;
    return new Promise<number>((resolve, reject) => {
      this.hostCalls.set(id, { resolve, reject });
      this.connection.send({ op: 'host-call', call: id, queue, kernel: call.kernel, name: call.name, args: call.args });
    });
  }

  /** The client's answer to a host call (an unknown call is a protocol error: the client made it up). */
  hostCallResult(frame: Frame): void {
    const result = decodeHostCallResult(frame);
    const pending = this.hostCalls.get(result.call);
    if (pending === undefined)
      throw errors.protocol(`'host-call-result' for call ${result.call}, which is not waiting`);
    this.hostCalls.delete(result.call);
    if (result.error) return pending.reject(new Error(result.error.message));
    pending.resolve(result.value ?? Number.NaN);
  }

  device(index: number): Device {
    const device = this.session!.runtime.devices[index];
    if (!device) throw errors.notFound(`this proxy has no device ${index}`);
    return device;
  }

  queue(id: number): Queue {
    const queue = this.queues.get(id);
    if (!queue)
      throw this.queueRefusals.get(id) ?? errors.invalidArgument(`queue ${id} does not exist on this connection`);
    return queue;
  }

  /**
   * Queue `id` was not made (over --quota-queues): requests naming it fail with `error`, not as
   * naming no queue. The latest MAX_QUEUE_REFUSALS are remembered.
   */
  refusedQueue(id: number, error: OffloadError): void {
    if (this.queueRefusals.size >= MAX_QUEUE_REFUSALS)
      this.queueRefusals.delete(this.queueRefusals.keys().next().value!);
    this.queueRefusals.set(id, error);
  }

  ownerOnly(what: string): void {
    if (this.attached) throw errors.unauthorized(`a peer link may not ${what}`);
  }

  /** The connection closed: everything waiting on the client fails, and what it made is freed. */
  async release(): Promise<void> {
    this.frameWhole();
    this.peers.close();
    const session = this.session;
    this.session = undefined;
    for (const gate of this.gates.values()) gate.reject(errors.deviceLost('the client connection closed'));
    for (const call of this.hostCalls.values()) call.reject(new Error('the client connection closed'));
    this.hostCalls.clear();
    for (const write of this.incoming.values())
      write.landed.reject(errors.deviceLost('the client connection closed during a write'));
    this.incoming.clear();
    this.gates.clear();
    const queues = [...this.queues.values(), ...this.sideQueues.values()];
    this.sideQueues.clear();
    this.queues.clear();
    this.clientQueueIds.clear();
    this.events.clear();
    // A peer link's queues are its own; the owner's context shutdown (below) drains the rest.
    if (this.attached) await Promise.all(queues.map((queue) => queue.destroy()));
    if (!session) return;
    if (this.attached) session.attached.delete(this.connection.transport);
    else await this.directory.close(session);
  }
}
