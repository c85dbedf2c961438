/**
 * Logging in: the `hello` a connection must start with. Before it, a peer may send one small
 * frame and has LOGIN_DEADLINE_MS to do so; the token (or a peer proxy's write grant) is
 * checked by the SessionDirectory (the server) in constant time. A client then gets a session of
 * its own (a context of the proxy's runtime); a peer link attaches to the session whose grant it
 * holds.
 */
import { Tracer } from '../runtime/trace.js';
import { errors, OffloadError } from '../errors.js';
import { asOffloadError } from '../errors.js';
import type { KernelPrint } from '../runtime/options.js';
import type { HostCall } from '../api/host-functions.js';
import type { FrameLimits } from '../transport/frame.js';
import { startHeartbeat } from '../transport/heartbeat.js';
import type { ReplyBodies, RequestOf } from '../protocol/messages.js';
import { compactMeta } from '../protocol/compact.js';
import { PROTOCOL_VERSION } from '../protocol/wire.js';
import type { ProxyConnection } from './connection.js';
import type { Session } from './session.js';
import type { ProxyMetrics } from './metrics.js';

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
  ): OffloadError | { grant?: { session: Session; buffer: number } };
  /**
   * A new session for `client`, in a context of its own; its kernels' print() lines go to
   * `print`, their host calls to `hostCall`; `traced`: its work's spans are kept for it.
   */
  open(
    client: string,
    print: (line: KernelPrint) => void,
    hostCall: (call: HostCall) => Promise<number>,
    traced?: boolean,
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
  /** What the proxy counts (logins, refusals, launches) for its operators. */
  readonly metrics: ProxyMetrics;
}

/**
 * What a peer may send before it has logged in: one small frame, no payload. Nothing it does
 * before the token is checked can cost the proxy more than this, or outlive LOGIN_DEADLINE_MS.
 */
export const LOGIN_LIMITS: FrameLimits = {
  metaBytes: 4096,
  payloadBytes: 0,
  when: "before login (a 'hello' of at most 4 KiB)",
};
export const LOGIN_DEADLINE_MS = 10_000;

/** Answers a `hello`: refuses a wrong login (closing the connection), or opens or attaches the session and welcomes the client. */
export function hello(connection: ProxyConnection, request: RequestOf<'hello'>): void {
  const { id, version, token, grant } = request;
  const { transport, directory } = connection;
  const login = directory.login(transport.peer, { token, grant });
  if (login instanceof OffloadError) {
    // Answered late, and nothing more is read meanwhile: a flood of guesses costs its sender time.
    connection.refused = true;
    transport.pauseReading?.();
    setTimeout(() => connection.refuse(id, login), directory.failedLoginDelayMs(transport.peer));
    return;
  }
  if (version !== PROTOCOL_VERSION) {
    throw errors.protocol(`protocol version ${version} is not supported; this proxy speaks ${PROTOCOL_VERSION}`);
  }
  // Logged in: frames as large as any client's from now on, and a heartbeat both ways.
  connection.loggedInNow();
  directory.metrics.loggedIn(connection, login.grant ? 'peer-link' : 'client');
  transport.limits = undefined;
  // The client offered the compact form: it is spoken both ways from the welcome on.
  if (request.compact === true) transport.metaCodec = compactMeta;
  startHeartbeat(transport, directory.peerTimeoutMs);
  if (login.grant) {
    // A peer proxy's link, on a client's behalf: it may write into the granted buffer only.
    connection.attach(login.grant.session, login.grant.buffer);
    welcome(connection, id);
    return;
  }
  connection.loggingIn = true;
  const opening = directory
    .open(
      transport.peer,
      (line) => connection.forwardPrint(line),
      (call) => connection.forwardHostCall(call),
      request.trace,
    )
    .then(
      (session) => {
        if (transport.closed) {
          // The client left while its context was being made.
          void directory.close(session);
          return;
        }
        connection.session = session;
        welcome(connection, id);
      },
      (error: unknown) => connection.refuse(id, asOffloadError(error, 'opening a session for the client')),
    );
  connection.barrier(opening);
}

function welcome(connection: ProxyConnection, id: number): void {
  const devices = connection.runtime.devices.map((device) => device.info);
  // `now`: this proxy's clock (microseconds since the epoch), to align its trace with the client's.
  const reply: { op: 'reply'; id: number } & ReplyBodies['hello'] = {
    op: 'reply',
    id,
    devices,
    peers: connection.directory.peerList,
    now: Tracer.now(),
  };
  if (connection.transport.metaCodec === compactMeta) reply.compact = true;
  connection.send(reply);
}
