/**
 * What one client owns on a proxy: a context of the proxy's runtime (its own device memory,
 * libraries, buffers and queues; see Runtime.createContext) and the names its client gave them.
 * A session outlives none of its client's connections: when the client's main connection
 * closes, however it closes, every peer link attached to the session is closed and the context
 * is shut down, which frees everything the client made.
 */
import type { Tracer } from '../runtime/trace.js';
import { totalmem } from 'node:os';
import { getHeapStatistics } from 'node:v8';
import { errors } from '../errors.js';
import { dropped } from '../runtime/debug.js';
import type { Buffer } from '../api/buffer.js';
import type { Kernel } from '../api/kernel.js';
import type { Library } from '../api/library.js';
import type { Runtime } from '../api/runtime.js';
import type { Transport } from '../transport/transport.js';
import type { OffloadError } from '../errors.js';
import type { KernelPrint } from '../runtime/options.js';
import type { HostCall } from '../api/host-functions.js';

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
  /** Bytes of those images (the proxy keeps each for the session's life). */
  imageBytes: number;
  /** Bytes the proxy holds for requests not yet done: small writes' data, small reads' results. */
  pendingBytes: number;
}

export const DEFAULT_QUOTAS: SessionQuotas = {
  memoryBytes: 2 ** 53,
  buffers: 65_536,
  queues: 4096,
  images: 256,
  imageBytes: 256 * 1024 * 1024,
  pendingBytes: 256 * 1024 * 1024,
};

/** The `offload proxy` option of each quota, for messages. */
const QUOTA_OPTIONS: Record<keyof SessionQuotas, string> = {
  memoryBytes: '--quota-memory',
  buffers: '--quota-buffers',
  queues: '--quota-queues',
  images: '--quota-images',
  imageBytes: '--quota-image-bytes',
  pendingBytes: '--quota-pending',
};

/**
 * What the proxy holds of its own memory for one unit of each quota: estimates of its records
 * (a buffer's objects and map entries, a queue's, an image's instances besides its bytes), and
 * the bytes themselves for images and pending data. Device memory is the devices' to bound.
 */
const PROXY_BYTES: Record<keyof SessionQuotas, number> = {
  memoryBytes: 0,
  buffers: 1024,
  queues: 16 * 1024,
  // An image's instances on each worker and on the proxy's thread, and the pages of its static
  // data it writes into its context's memory.
  images: 256 * 1024,
  // Its bytes, kept while registered, and the machine code V8 compiles from them: images were
  // measured at 2.6 times what one byte per byte and 64 KiB per image counted.
  imageBytes: 3,
  pendingBytes: 1,
};

/**
 * The proxy's own memory that all its clients together may make it hold (ProxyServerOptions.
 * proxyMemoryBytes): per-client quotas alone would let many clients exhaust it.
 */
export class ProxyMemory {
  held = 0;
  constructor(readonly limit: number) {}
}

/**
 * Whoever holds one of the proxy's tokens: the quotas bound what all its sessions (one per
 * connection logged in with that token) hold together, so a tenant gains nothing by connecting
 * more often. `name`: the token's name in the --tenants file (none for the single --token-file).
 */
export class Tenant {
  /** What the tenant's sessions hold now, together. */
  readonly usage: SessionQuotas = { memoryBytes: 0, buffers: 0, queues: 0, images: 0, imageBytes: 0, pendingBytes: 0 };
  /** Its sessions' share of the proxy's memory (ProxyMemory.held), together. */
  proxyBytes = 0;
  constructor(readonly name?: string) {}
}

/** The default ProxyMemory limit: half of what the JS heap may grow to, at most a quarter of the machine's memory. */
export function defaultProxyMemoryBytes(): number {
  return Math.floor(Math.min(getHeapStatistics().heap_size_limit / 2, totalmem() / 4));
}

export class Session {
  readonly buffers = new Map<number, Buffer>();
  /**
   * Write grants by buffer id: the capability a peer proxy presents (instead of any token) to
   * write into that one buffer for this client, and nothing else. Made at allocation, dropped at free.
   */
  readonly grants = new Map<number, string>();
  /** Images by client id; each is a one-image library registered in the session's context. */
  readonly images = new Map<number, Library>();
  /** Each image's size in bytes, counted against the imageBytes quota while it is registered. */
  readonly imageBytes = new Map<number, number>();
  /** Loaded kernels by `${image}/${device}/${name}`. */
  readonly kernels = new Map<string, Kernel>();
  /** Connections attached to the session besides the owner's (peer proxies). */
  readonly attached = new Set<Transport>();

  /** What the session holds now, counted against its quotas. */
  readonly usage: SessionQuotas = { memoryBytes: 0, buffers: 0, queues: 0, images: 0, imageBytes: 0, pendingBytes: 0 };
  /** Its share of the proxy's memory (ProxyMemory.held); given back whole when the session ends. */
  private proxyBytes = 0;
  private released = false;
  /** The spans of the client's work here, kept when its hello asked for them ('trace' fetches them). */
  tracer: Tracer | undefined;

  constructor(
    readonly client: string,
    /** The session's context: everything the client makes lives in it. */
    readonly runtime: Runtime,
    readonly quotas: SessionQuotas = DEFAULT_QUOTAS,
    private readonly memory = new ProxyMemory(defaultProxyMemoryBytes()),
    /** Whose token the session logged in with: its quotas are shared with the tenant's other sessions. */
    readonly tenant = new Tenant(),
  ) {}

  /**
   * Counts `amount` more of `what` against the tenant's quota (what all its sessions hold) and
   * the proxy's memory, or throws OUT_OF_MEMORY naming the limit and the tenant's own use only.
   * Returns what gives it back (once, however often called).
   */
  take(what: keyof SessionQuotas, amount = 1, proxyCharged = true): () => void {
    const limit = this.quotas[what];
    const held = this.tenant.usage[what];
    if (held + amount > limit) {
      const unit = what === 'memoryBytes' || what === 'pendingBytes' || what === 'imageBytes' ? 'bytes' : what;
      throw errors.outOfMemory(
        `this token's clients would hold ${held + amount} ${unit} (${what}) together; the proxy allows ${limit} ` +
          `per token, however many connections use it (offload proxy ${QUOTA_OPTIONS[what]})`,
      );
    }
    const cost = proxyCharged ? PROXY_BYTES[what] * amount : 0;
    if (cost > 0 && this.memory.held + cost > this.memory.limit) {
      // Says nothing of what the other clients hold: only that the proxy as a whole is full.
      throw errors.outOfMemory(
        `${what} of ${amount} would take ${cost} bytes more of the proxy's own memory, which its clients together have filled ` +
          `past its limit of ${this.memory.limit} (offload proxy --proxy-memory); try again once some is freed`,
      );
    }
    // The last eighth of the proxy's memory is kept for tenants holding less than an eighth: one
    // tenant (however many connections it has) filling it cannot refuse every other's next request.
    const reserve = this.memory.limit / 8;
    if (cost > 0 && this.tenant.proxyBytes + cost > reserve && this.memory.held + cost > this.memory.limit - reserve) {
      throw errors.outOfMemory(
        `${what} of ${amount} would take ${cost} bytes more of the proxy's own memory; this token's clients hold more than ` +
          `an eighth of its limit of ${this.memory.limit}, and the last eighth is kept for clients holding less ` +
          `(offload proxy --proxy-memory); try again once some is freed`,
      );
    }
    this.usage[what] += amount;
    if (!this.released) {
      this.tenant.usage[what] += amount;
      this.memory.held += cost;
      this.proxyBytes += cost;
      this.tenant.proxyBytes += cost;
    }
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.give(what, amount, cost);
    };
  }

  /**
   * Takes each of `items` (see take), all or none: when one is over its limit, those taken
   * before it are given back and its error is thrown. Returns what gives each back.
   */
  takeAll(...items: [what: keyof SessionQuotas, amount: number][]): (() => void)[] {
    const taken: (() => void)[] = [];
    try {
      for (const [what, amount] of items) taken.push(this.take(what, amount));
    } catch (error) {
      for (const give of taken) give();
      throw error;
    }
    return taken;
  }

  /** Gives back `amount` of `what` taken before (see take), which cost the proxy `cost` bytes. */
  give(what: keyof SessionQuotas, amount = 1, cost = PROXY_BYTES[what] * amount): void {
    this.usage[what] -= amount;
    if (this.released) return; // release() gave back the session's whole share
    this.tenant.usage[what] -= amount;
    this.memory.held -= cost;
    this.proxyBytes -= cost;
    this.tenant.proxyBytes -= cost;
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
    if (!this.released) {
      this.released = true;
      // What the session still holds is freed with its context: the tenant's other sessions may use it.
      for (const what of Object.keys(this.usage) as (keyof SessionQuotas)[])
        this.tenant.usage[what] -= this.usage[what];
      this.memory.held -= this.proxyBytes;
      this.tenant.proxyBytes -= this.proxyBytes;
      this.proxyBytes = 0;
    }
    for (const link of this.attached) link.close();
    this.attached.clear();
    this.buffers.clear();
    this.kernels.clear();
    this.images.clear();
    this.imageBytes.clear();
    await this.runtime
      .shutdown({ graceMs: LEAVING_GRACE_MS })
      .catch(dropped(`proxy session of ${this.client}`, 'shutting its context down'));
  }
}

/** How a proxy authenticates clients and finds sessions (implemented by ProxyServer). */
export interface SessionDirectory {
  /**
   * Checks a login from `peer`, by token (compared in constant time) or by write grant: the
   * session a grant belongs to and its buffer, or the error to answer (a wrong token, a grant that
   * does not exist). A right token is never refused, however many wrong ones came before.
   */
  login(
    peer: string,
    credentials: { token?: string; grant?: string },
  ): OffloadError | { grant?: { session: Session; buffer: number }; tenant?: Tenant };
  /**
   * A new session for `client`, in a context of its own; its kernels' print() lines go to
   * `print`, their host calls to `hostCall`; `traced`: its work's spans are kept for it;
   * `tenant`: whose token it logged in with (its quotas are shared with the tenant's other sessions).
   */
  open(
    client: string,
    print: (line: KernelPrint) => void,
    hostCall: (call: HostCall) => Promise<number>,
    traced?: boolean,
    tenant?: Tenant,
  ): Promise<Session>;
  close(session: Session): Promise<void>;
  /** How long a failed login from `peer` waits before it is answered (failing logins are slowed down, never locked out). */
  failedLoginDelayMs(peer: string): number;
  /** A new write grant for buffer `buffer` of `session` (kept in session.grants too). */
  grant(session: Session, buffer: number): string;
  revoke(session: Session, buffer: number): void;
  /** Whether this proxy may open a peer link to `address` (its --peers, or a rank of its own MPI job). */
  mayLink(address: string): boolean;
  /** Its --peers, as the hello reply tells clients (so they stage copies to other proxies themselves). */
  readonly peerList: readonly string[] | 'any';
  /** The proxy-wide cap on a launch's run time, if any. */
  readonly launchTimeoutMs: number | undefined;
  /** How long a new connection has to log in. */
  readonly loginTimeoutMs: number;
  /** A client silent this long is gone (its session ends). */
  readonly peerTimeoutMs: number;
}
