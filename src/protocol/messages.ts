/**
 * Every frame the remote plugin and the proxy exchange, as types (see wire.ts for the protocol's
 * rules). One interface per direction maps each `op` to its fields; the unions below are built
 * from them, so an encoder that names an op or a field that is not here does not compile, and
 * the proxy's dispatch switch narrows each request to its own fields.
 *
 * Client -> proxy: the requests (each answered by exactly one `reply` of the same `id`), and two
 * frames that answer nothing: `chunk` (a streamed write's bytes) and `host-call-result`.
 * Proxy -> client: `reply`, `ready` and `data` (bulk transfers), `print` and `host-call` (a
 * kernel's output and its calls of the program's host functions).
 */
import type { DeviceInfo } from '../plugins/interface.js';
import type { EntryInfo, ImageFormat, ImageInfo, ParamInfo } from '../image/manifest.js';
import type { WireError } from './wire.js';
import { MAX_FILL_PATTERN_BYTES } from '../units.js';
import {
  args,
  array,
  byteArray,
  flag,
  gridSize,
  object,
  optional,
  string,
  uint,
  wireError,
  type Fields,
  type FieldsOf,
} from './fields.js';

/** A grid size on the wire: one number (a 1-D size), or 1 to 3 of them. */
export type WireGridSize = number | [number] | [number, number] | [number, number, number];

/** A reply with no fields of its own (beyond op and id). */
type NoFields = Record<never, never>;

/** The fields of a rectangle's device side (the host side travels packed: rows one after another). */
const rect = {
  width: uint,
  height: uint,
  depth: uint,
  offset: uint,
  rowPitch: uint,
  slicePitch: uint,
};

/**
 * The request ops and their fields (besides `op` and `id`), each declared once: the `Requests`
 * type, the proxy's decoder (decode-request.ts) and the compact form of a launch (compact.ts)
 * follow from this table, so a new field is one line here (and its use). Payloads travel beside
 * the fields: noted per op.
 */
export const REQUESTS = {
  /** The first frame: a client logs in with the token, a peer proxy's link with a write grant. */
  /** `compact`: the client speaks the compact form of launch frames (protocol/compact.ts). */
  /** `pid`, `started`: the client's process, told only over loopback (transport/co-location.ts). */
  hello: {
    version: uint,
    token: optional(string),
    grant: optional(string),
    trace: flag,
    compact: flag,
    pid: optional(uint),
    started: optional(uint),
  },
  ping: {},
  /** Payload: the image's bytes. */
  register: {
    image: uint,
    name: string,
    info: object<Omit<ImageInfo, 'offset' | 'size'>>(),
    entries: array<EntryInfo>(),
  },
  load: { image: uint, device: uint },
  unload: { image: uint },
  alloc: { device: uint, buffer: uint, bytes: uint, kind: string },
  /** Names a device global of a loaded image as the client's buffer `buffer`. */
  global: { image: uint, device: uint, name: string, buffer: uint },
  free: { buffer: uint },
  queue: { queue: uint, device: uint },
  'queue-destroy': { queue: uint },
  /** Payload: the bytes (at most EAGER_BYTES), or none with `stream` (they follow as `chunk` frames after `ready`). */
  write: { queue: uint, buffer: uint, offset: uint, bytes: uint, stream: flag },
  read: { queue: uint, buffer: uint, offset: uint, bytes: uint },
  copy: { queue: uint, src: uint, srcOffset: uint, dst: uint, dstOffset: uint, bytes: uint },
  /** A copy to a buffer of the same client on another proxy, which this proxy sends itself (with the buffer's write grant). */
  'send-peer': {
    queue: uint,
    src: uint,
    srcOffset: uint,
    bytes: uint,
    peer: string,
    grant: string,
    device: uint,
    dst: uint,
    dstOffset: uint,
  },
  /** The compact form carries every field of a launch: each kind here must have one (compact.ts checks). */
  launch: {
    queue: uint,
    image: uint,
    teams: gridSize,
    threads: gridSize,
    timeoutMs: optional(uint),
    teamMemoryBytes: optional(uint),
    kernel: string,
    args,
  },
  record: { queue: uint, event: uint, timing: flag },
  wait: { queue: uint, event: uint },
  /** Parks the queue at gate `gate` until the client's `signal` of it. */
  'wait-host': { queue: uint, gate: uint },
  signal: { gate: uint, error: wireError },
  sync: { queue: uint },
  /** `pattern`: 1 to MAX_FILL_PATTERN_BYTES bytes, each an integer 0..255. */
  fill: { queue: uint, buffer: uint, offset: uint, bytes: uint, pattern: byteArray(MAX_FILL_PATTERN_BYTES) },
  /** Payload: the rows, packed. */
  'write-rect': { queue: uint, buffer: uint, ...rect },
  'read-rect': { queue: uint, buffer: uint, ...rect },
  'copy-rect': {
    queue: uint,
    width: uint,
    height: uint,
    depth: uint,
    src: uint,
    srcOffset: uint,
    srcRowPitch: uint,
    srcSlicePitch: uint,
    dst: uint,
    dstOffset: uint,
    dstRowPitch: uint,
    dstSlicePitch: uint,
  },
  'memory-info': { device: uint },
  trace: {},
} satisfies Record<string, Fields>;

/** The request ops and their fields, as types (from REQUESTS). */
export type Requests = { [Op in keyof typeof REQUESTS]: FieldsOf<(typeof REQUESTS)[Op]> };

/** The device side of a rectangle (the host side travels packed: rows one after another). */
export type WireRect = FieldsOf<typeof rect>;

export type RequestOp = keyof Requests;

/** One request as an encoder writes it: `op` and the op's fields (the connection adds the `id`). */
export type OutgoingRequest = { [Op in RequestOp]: { op: Op } & Requests[Op] }[RequestOp];

/** One request as it travels: `op`, the client's `id`, and the op's fields. */
export type Request = { [Op in RequestOp]: { op: Op; id: number } & Requests[Op] }[RequestOp];

/** The request of op `Op`. */
export type RequestOf<Op extends RequestOp> = Extract<Request, { op: Op }>;

/** Frames from the client that are not requests (no reply). */
export interface ClientNotes {
  /** Bytes of streamed write `id` from `offset` on (payload: the bytes, at most CHUNK_BYTES). */
  chunk: { id: number; offset: number };
  /** The program's answer to host call `call`: a number (null for NaN and infinities), or the error its function threw. */
  'host-call-result': { call: number; value?: number | null; error?: WireError };
}

export type ClientNote = { [Op in keyof ClientNotes]: { op: Op } & ClientNotes[Op] }[keyof ClientNotes];

/** A kernel as a proxy's device loaded it (the `load` reply lists them). */
export interface LoadedKernelInfo {
  name: string;
  params: ParamInfo[];
  format: ImageFormat;
  staticBytes: number;
}

/** What a successful reply carries besides `id`, per request op (payloads: read, read-rect, trace). */
export interface ReplyBodies {
  /** `compact`: the proxy took the client's offer; launch frames may travel compact both ways from now on. */
  /** `pid`, `started`: the proxy's process, told only to a client over loopback (transport/co-location.ts). */
  hello: {
    devices: DeviceInfo[];
    peers: readonly string[] | 'any';
    now: number;
    compact?: true;
    pid?: number;
    started?: number;
  };
  load: { kernels: LoadedKernelInfo[] };
  alloc: { address: number; grant: string };
  global: { bytes: number; address: number };
  /** A timed record's time on the proxy's clock (microseconds); untimed: nothing. */
  record: { time?: number };
  /** The device's memory as this client may use it (MemoryInfo). */
  'memory-info': { totalBytes: number; freeBytes: number; largestFreeBlockBytes: number };
  /** Payload: the spans, a JSON array. */
  trace: { dropped: number };
}

export type ReplyBody = ReplyBodies[keyof ReplyBodies] | NoFields;

/** A reply as the proxy writes it: `id`, then `error` or the op's body. */
export type ReplyFrame = { op: 'reply'; id: number; error?: WireError } & ReplyBody;

/** The frames a proxy sends, by op. */
export interface ProxyFrames {
  /** The answer to request `id` (0: the connection itself, with why it is closed); `error` on failure. */
  reply: { id: number; error?: WireError };
  /** Streamed write `id` may send its chunks now: the queue has reached it. */
  ready: { id: number };
  /** Bytes of read `id` from `offset` on (payload: the bytes). */
  data: { id: number; offset: number };
  /** A line a kernel printed on the client's queue `queue`. */
  print: { queue: number; kernel: string; team: number; text: string };
  /** A kernel on the client's queue `queue` calls the program's host function `name` (arguments: NaN and infinities as null). */
  'host-call': { call: number; queue: number; kernel: string; name: string; args: (number | null)[] };
}

export type ProxyFrame = { [Op in keyof ProxyFrames]: { op: Op } & ProxyFrames[Op] }[keyof ProxyFrames];
