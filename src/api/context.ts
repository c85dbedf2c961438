/**
 * State shared by every object of one runtime: whether it is open, its image registry, its
 * OFFLOAD_INFO log, its default launch time limit, and what shutdown must wait for. Internal;
 * not exported from the package.
 */
import { errors } from '../errors.js';
import type { ImageRegistry } from '../runtime/image-registry.js';
import type { InfoLog } from '../runtime/info-log.js';
import type { Tracer } from '../runtime/trace.js';
import { printToStderr, type KernelPrint } from '../runtime/options.js';
import { type HostCall, HostFunctions } from './host-functions.js';

export interface Drainable {
  /** Settles when everything the object has enqueued has completed; never rejects. */
  drain(): Promise<void>;
}

export class RuntimeContext {
  private closed = false;
  private nextQueueId = 0;
  /**
   * Queues with work pending, which shutdown waits for. Only those: an idle queue is the
   * program's alone, so a queue it drops can be collected (and its device queue released).
   */
  readonly busy = new Set<Drainable>();

  constructor(
    readonly registry: ImageRegistry,
    readonly info: InfoLog,
    /** Set when OFFLOAD_TRACE or `Offload.init({ trace })` asks for a trace. */
    readonly tracer: Tracer | undefined,
    /** Time limit of launches that give none (OFFLOAD_LAUNCH_TIMEOUT); undefined: none. */
    readonly launchTimeoutMs: number | undefined,
    /** Where kernels' print() lines go (Offload.init({ print })). */
    readonly print: (line: KernelPrint) => void = printToStderr,
    /** The functions kernels may call (runtime.hostFunctions). */
    readonly hostFunctions = new HostFunctions(),
    /** Where kernels' host calls go: the context's functions, or (a proxy's context) its client's. */
    readonly hostCall: (call: HostCall) => Promise<number> = (call) => hostFunctions.call(call),
  ) {}

  get isClosed(): boolean {
    return this.closed;
  }

  close(): void {
    this.closed = true;
  }

  /** Throws DEVICE_LOST once the runtime was shut down. */
  checkOpen(device?: number): void {
    if (this.closed) throw errors.deviceLost('the runtime was shut down; create a new one with Offload.init()', device);
  }

  queueId(): number {
    return this.nextQueueId++;
  }
}
