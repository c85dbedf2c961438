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
import type { WireArg, WireError } from './wire.js';

/** A grid size on the wire: one number (a 1-D size), or 1 to 3 of them. */
export type WireGridSize = number | [number] | [number, number] | [number, number, number];

/** The request ops and their fields (besides `op` and `id`). Payloads travel beside the fields: noted per op. */
/** A request or reply with no fields of its own (beyond op and id). */
type NoFields = Record<never, never>;

export interface Requests {
  /** The first frame: a client logs in with the token, a peer proxy's link with a write grant. */
  /** `compact`: the client speaks the compact form of launch frames (protocol/compact.ts). */
  hello: { version: number; token?: string; grant?: string; trace?: boolean; compact?: boolean };
  ping: NoFields;
  /** Payload: the image's bytes. */
  register: { image: number; name: string; info: Omit<ImageInfo, 'offset' | 'size'>; entries: readonly EntryInfo[] };
  load: { image: number; device: number };
  unload: { image: number };
  alloc: { device: number; buffer: number; bytes: number; kind: string };
  /** Names a device global of a loaded image as the client's buffer `buffer`. */
  global: { image: number; device: number; name: string; buffer: number };
  free: { buffer: number };
  queue: { queue: number; device: number };
  'queue-destroy': { queue: number };
  /** Payload: the bytes (at most EAGER_BYTES), or none with `stream` (they follow as `chunk` frames after `ready`). */
  write: { queue: number; buffer: number; offset: number; bytes: number; stream?: boolean };
  read: { queue: number; buffer: number; offset: number; bytes: number };
  copy: { queue: number; src: number; srcOffset: number; dst: number; dstOffset: number; bytes: number };
  /** A copy to a buffer of the same client on another proxy, which this proxy sends itself (with the buffer's write grant). */
  'send-peer': {
    queue: number;
    src: number;
    srcOffset: number;
    bytes: number;
    peer: string;
    grant: string;
    device: number;
    dst: number;
    dstOffset: number;
  };
  launch: {
    queue: number;
    image: number;
    kernel: string;
    teams: WireGridSize;
    threads: WireGridSize;
    teamMemoryBytes?: number;
    timeoutMs?: number;
    args: WireArg[];
  };
  record: { queue: number; event: number; timing?: boolean };
  wait: { queue: number; event: number };
  /** Parks the queue at gate `gate` until the client's `signal` of it. */
  'wait-host': { queue: number; gate: number };
  signal: { gate: number; error?: WireError };
  sync: { queue: number };
  /** `pattern`: 1 to MAX_FILL_PATTERN_BYTES bytes, each an integer 0..255. */
  fill: { queue: number; buffer: number; offset: number; bytes: number; pattern: number[] };
  /** Payload: the rows, packed. */
  'write-rect': WireRect & { queue: number; buffer: number };
  'read-rect': WireRect & { queue: number; buffer: number };
  'copy-rect': {
    queue: number;
    width: number;
    height: number;
    depth: number;
    src: number;
    srcOffset: number;
    srcRowPitch: number;
    srcSlicePitch: number;
    dst: number;
    dstOffset: number;
    dstRowPitch: number;
    dstSlicePitch: number;
  };
  'memory-info': { device: number };
  trace: NoFields;
}

/** The device side of a rectangle (the host side travels packed: rows one after another). */
export interface WireRect {
  width: number;
  height: number;
  depth: number;
  offset: number;
  rowPitch: number;
  slicePitch: number;
}

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
  hello: { devices: DeviceInfo[]; peers: readonly string[] | 'any'; now: number; compact?: true };
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
