/**
 * One client connection on a proxy, as frames: it takes them in arrival order, decodes each
 * request (protocol/decode-request.ts: a malformed frame closes the connection with PROTOCOL),
 * holds later requests behind one that makes an object (`barrier`), and sends each request's
 * reply, pausing its reading while replies back up. What a request means is its handler's:
 * the connection is given a `ConnectionHandlers` (handlers.ts makes it from the handler table
 * and the client's session, client-session.ts) and knows nothing of queues, buffers or sessions.
 * Every request gets one `reply`; every failure but PROTOCOL is a coded error in it.
 *
 * Ownership: the server makes one per accepted transport (handlers.ts, `serveClient`); when the
 * transport closes, it tells its handlers (which release what the client held) and then the server.
 */
import { errors, messageOf, OffloadError, quoted } from '../errors.js';
import { debug } from '../runtime/debug.js';
import type { Frame, FrameLimits } from '../transport/frame.js';
import type { Transport } from '../transport/transport.js';
import { reportPollingTo } from '../transport/poll-report.js';
import { decodeChunk, decodeRequest, frameOp, requestId } from '../protocol/decode-request.js';
import type { ProxyFrame, ReplyBody, ReplyFrame, Request } from '../protocol/messages.js';
import { toWireError } from '../protocol/wire.js';

/**
 * A handler's answer to one request: the reply goes out when `done` settles, with `fields` of
 * its value (none: a plain reply), and on failure its error. `payload`: the reply's bytes, made
 * once `done` has resolved. `gone`: called once the reply has left for the OS (the memory of its
 * payload is free then), or at once when it failed. `makes`: the request makes an object later
 * requests may name (a session, image, kernel, buffer): they wait until `done` settles.
 */
export interface Reply<T = unknown> {
  done: Promise<T>;
  /** `done` has fulfilled already and the reply has no fields: it goes out at once when no earlier reply is outstanding. */
  now?: boolean;
  fields?: (value: T) => ReplyBody;
  payload?: () => Uint8Array;
  gone?: () => void;
  makes?: boolean;
}

/** What a connection hands its frames to (handlers.ts makes it). */
export interface ConnectionHandlers {
  /** True once the peer presented the right token (its session may still be in the making). */
  readonly loggedIn: boolean;
  /** A decoded request: its reply, or undefined when the handler answers it otherwise (a refused login); throws for an error reply. */
  request(request: Request, payload: Uint8Array): Reply | undefined;
  /** A `chunk` of a streamed write: no reply. */
  chunk(id: number, offset: number, payload: Uint8Array): void;
  /** An answer of the client's ('host-call-result'), decoded by the handler: no reply. */
  answer(frame: Frame): void;
  /** Where a frame's payload lands (see Transport.payloadSink); its bytes may be counted until `frameWhole`. */
  payloadTarget(meta: Record<string, unknown>, length: number): Uint8Array | undefined;
  /** The frame whose payload was being received is whole (or the connection closed): what was counted for it is given back. */
  frameWhole(): void;
  /** The transport closed: release what the client held. */
  closed(): Promise<void>;
  /** A request was refused (or the connection closed) with `error`: counted for the proxy's operators. */
  refused(error: unknown): void;
}

/**
 * What a peer may send before it has logged in: one small frame, no payload. Nothing it does
 * before the token is checked can cost the proxy more than this, or outlive the login deadline.
 */
export const LOGIN_LIMITS: FrameLimits = {
  metaBytes: 4096,
  payloadBytes: 0,
  when: "before login (a 'hello' of at most 4 KiB)",
};

/**
 * Requests (and their bytes) a client may send while one that makes an object is in progress
 * (see `barrier`); beyond them the connection is closed with PROTOCOL.
 */
const MAX_HELD_FRAMES = 4096;
const MAX_HELD_BYTES = 64 * 1024 * 1024;

/**
 * Bytes of replies waiting to go to a client beyond which its requests are not read until they
 * have gone (see `stopReading`). A queued reply costs the proxy its bytes and a write request
 * besides (a few hundred bytes: 30-byte ping replies cost ten times their size), so the mark is
 * low: a client that never reads holds about this much of the proxy's memory, and the OS's buffers.
 */
export const REPLY_BACKLOG_BYTES = 1024 * 1024;

/**
 * The least a frame in progress must gain per window (or the rest of it, when less is left):
 * liveness counts bytes, so without it a client trickling a byte a second holds a 64 MiB frame
 * (and the memory it is buffered in) for ever. The window is a sixth of the peer timeout
 * (at least 1 s, at most 10 s): 10 s by default, and 16 KiB in 10 s is far below any network.
 */
export const MIN_FRAME_PROGRESS_BYTES = 16 * 1024;
export function frameWindowMs(peerTimeoutMs: number): number {
  return Math.min(10_000, Math.max(1000, Math.floor(peerTimeoutMs / 6)));
}

export class ProxyConnection {
  /** What the frames are handed to; set once by `serve`, before the first frame can arrive. */
  private handlers!: ConnectionHandlers;
  /**
   * Requests that arrived while an earlier one that makes an object (the session of `hello`, an
   * image, a kernel, a buffer) was in progress: handled in order once it is done, so that a
   * pipelined request finds what the ones before it made.
   */
  private held: Frame[] | undefined;
  private heldBytes = 0;
  /** Requests whose reply has not gone yet (replies sent through `reply`). */
  private unanswered = 0;
  /** Closes a connection that has not logged in by then. */
  private readonly loginDeadline: NodeJS.Timeout;
  /** After login: closes the connection when a frame in progress stops coming (MIN_FRAME_PROGRESS_BYTES). */
  private progressWatch: NodeJS.Timeout | undefined;
  /**
   * While the client does not read its replies (more than REPLY_BACKLOG_BYTES wait to go), its
   * requests are not read either: what it makes the proxy hold is bounded by that mark, not by
   * how fast it sends.
   */
  private readingPaused = false;
  /** A refused login waits out its delay (the server slows failing logins down): nothing more is read. */
  refused = false;

  constructor(
    readonly transport: Transport,
    /** The login deadline, and the peer timeout its frame progress window follows. */
    private readonly timing: { loginTimeoutMs: number; peerTimeoutMs: number },
    /** Told once the connection has closed and everything it held is released. */
    private readonly onClosed: () => void = () => {},
  ) {
    transport.limits = LOGIN_LIMITS;
    // What the polling policy chooses, and each change of mind, under OFFLOAD_DEBUG.
    reportPollingTo((line) => debug.log('proxy polling', line));
    // Request 0 is the connection itself: its error says why the proxy closes it.
    transport.onTooLarge = (error) => this.send({ op: 'reply', id: 0, error: toWireError(error) });
    this.loginDeadline = setTimeout(() => {
      if (!this.handlers.loggedIn) this.refuse(0, errors.protocol(`no login within ${timing.loginTimeoutMs} ms`));
    }, timing.loginTimeoutMs);
    this.loginDeadline.unref();
  }

  /** Hands this connection's frames to `handlers` from now on (once, right after construction). */
  serve(handlers: ConnectionHandlers): void {
    this.handlers = handlers;
    const { transport } = this;
    transport.onFrame = (frame) => this.onFrame(frame);
    transport.payloadSink = (meta, length) => handlers.payloadTarget(meta, length);
    transport.onClose = () => void this.closed();
  }

  /** Closes the connection (the proxy makes room for others). */
  close(reason: OffloadError): void {
    this.refuse(0, reason);
  }

  /** The login was accepted: the login deadline no longer applies, the frame progress rule does. */
  loggedInNow(): void {
    clearTimeout(this.loginDeadline);
    this.watchProgress();
  }

  /** Checks each window that a frame in progress gained MIN_FRAME_PROGRESS_BYTES (or its rest); closes the connection if not. */
  private watchProgress(): void {
    const windowMs = frameWindowMs(this.timing.peerTimeoutMs);
    let frames = -1;
    let received = 0;
    this.progressWatch = setInterval(() => {
      const { transport } = this;
      const progress = this.readingPaused ? undefined : transport.frameInProgress?.();
      const count = transport.stats.framesReceived;
      if (progress && count === frames) {
        const gained = progress.received - received;
        if (gained < Math.min(MIN_FRAME_PROGRESS_BYTES, progress.total - received)) {
          return this.refuse(
            0,
            errors.protocol(
              `a frame of ${progress.total} bytes gained ${gained} bytes in ${windowMs} ms (${progress.received} so far); ` +
                `a frame must keep coming at ${MIN_FRAME_PROGRESS_BYTES} bytes per ${windowMs} ms at least`,
            ),
          );
        }
      }
      frames = count;
      received = progress?.received ?? 0;
    }, windowMs);
    this.progressWatch.unref();
  }

  /**
   * Sends a frame, whatever it holds: a frame that cannot be encoded (a reply grown past the
   * frame limits) closes this connection with PROTOCOL instead of throwing out of an event handler.
   */
  send(frame: ProxyFrame | ReplyFrame, payload?: Uint8Array): boolean {
    try {
      const room = this.transport.send(frame, payload);
      if (!room || (this.transport.queuedBytes?.() ?? 0) > REPLY_BACKLOG_BYTES) this.stopReading();
      return room;
    } catch (error) {
      this.transport.close(
        new OffloadError('PROTOCOL', `a ${quoted(frame.op)} frame could not be sent: ${messageOf(error)}`, {
          cause: error,
        }),
      );
      return true;
    }
  }

  /** Stops reading the client's requests until every reply sent so far has gone to the OS. */
  private stopReading(): void {
    const { transport } = this;
    if (this.readingPaused || !transport.pauseReading) return;
    this.readingPaused = true;
    transport.pauseReading();
    void transport.flushed().then(() => {
      this.readingPaused = false;
      if (!this.refused) transport.resumeReading?.();
    });
  }

  /** Answers request `id` with `error` and closes the connection. */
  refuse(id: number, error: OffloadError): void {
    debug.log('proxy', `closing the connection of ${this.transport.peer}: ${error.code}: ${error.message}`);
    this.handlers.refused(error);
    this.send({ op: 'reply', id, error: toWireError(error) });
    this.transport.close(error);
  }

  /**
   * Sends the reply of request `id` when its `done` settles (see Reply). The last of the client's
   * requests answered, its next one may follow at once: the transport is told to expect it (TCP
   * polls a while instead of sleeping).
   */
  private reply<T>(id: number, { done, fields, payload, gone, makes, now }: Reply<T>): void {
    // No promise hop for a launch that ran inline: replies still leave in the order their
    // requests completed, since every earlier one has gone.
    if (now && this.unanswered === 0) {
      this.send({ op: 'reply', id });
      this.transport.expectSoon?.();
      return;
    }
    if (makes) this.made(done);
    this.unanswered++;
    done.then(
      (value) => {
        // No spread for the common reply, which has no fields (a launch's): it is every request's.
        this.send(fields ? { op: 'reply', id, ...fields(value) } : { op: 'reply', id }, payload?.());
        if (gone) void this.transport.flushed().then(gone);
        this.answered();
      },
      (error: unknown) => {
        this.handlers.refused(error);
        this.send({ op: 'reply', id, error: toWireError(error) });
        gone?.();
        this.answered();
      },
    );
  }

  private answered(): void {
    if (--this.unanswered === 0) this.transport.expectSoon?.();
  }

  private onFrame(frame: Frame): void {
    // The frame is whole: its payload is counted from here as its request counts it.
    this.handlers.frameWhole();
    if (this.refused) return;
    // Chunks feed a write already accepted, in their own order: they never wait.
    if (this.held && frame.meta.op !== 'chunk') {
      this.heldBytes += frame.payload.byteLength;
      if (this.held.length >= MAX_HELD_FRAMES || this.heldBytes > MAX_HELD_BYTES) {
        return this.refuse(
          0,
          errors.protocol(
            `more than ${MAX_HELD_FRAMES} requests or ${MAX_HELD_BYTES} bytes arrived behind one still in progress; wait for its reply`,
          ),
        );
      }
      this.held.push(frame);
      return;
    }
    this.handle(frame);
  }

  /** Holds later requests until `making` settles (it makes an object they may name). */
  barrier(making: Promise<unknown>): void {
    this.held ??= [];
    making.then(
      () => this.releaseHeld(),
      () => this.releaseHeld(),
    );
  }

  /** Holds later requests until a tick after `making` settles: its own reply goes out before the requests held behind it are handled. */
  private made(making: Promise<unknown>): void {
    this.barrier(
      making.then(
        () => {},
        () => {},
      ),
    );
  }

  private get holding(): boolean {
    return this.held !== undefined;
  }

  private releaseHeld(): void {
    const frames = this.held ?? [];
    this.held = undefined;
    this.heldBytes = 0;
    while (frames.length > 0 && !this.holding && !this.transport.closed) this.handle(frames.shift()!);
    // A released request made a new barrier: the rest wait for it, still in order.
    const again = this.held as Frame[] | undefined;
    if (again && frames.length > 0) {
      again.unshift(...frames);
      this.heldBytes = again.reduce((sum, frame) => sum + frame.payload.byteLength, 0);
    }
  }

  private handle(frame: Frame): void {
    // Read before anything is checked, so that even a malformed request's answer names it.
    const given = frame.meta.id;
    let id = typeof given === 'number' && Number.isSafeInteger(given) && given >= 0 ? given : 0;
    const { handlers } = this;
    try {
      const op = frameOp(frame);
      if (op === 'chunk') {
        const chunk = decodeChunk(frame);
        return handlers.chunk(chunk.id, chunk.offset, frame.payload);
      }
      // An answer, not a request: it never waits behind one (a launch may be waiting for it).
      if (op === 'host-call-result' && handlers.loggedIn) return handlers.answer(frame);
      id = requestId(frame);
      if (!handlers.loggedIn && op !== 'hello')
        throw errors.protocol(`the first frame must be 'hello', not ${quoted(op)}`);
      const reply = handlers.request(decodeRequest(frame), frame.payload);
      if (reply) this.reply(id, reply);
    } catch (error) {
      if (error instanceof OffloadError && error.code === 'PROTOCOL') this.refuse(id, error);
      else this.reply(id, { done: Promise.reject(error) });
    }
  }

  private async closed(): Promise<void> {
    clearTimeout(this.loginDeadline);
    clearInterval(this.progressWatch);
    this.handlers.frameWhole();
    try {
      await this.handlers.closed();
    } finally {
      this.onClosed();
    }
  }
}
