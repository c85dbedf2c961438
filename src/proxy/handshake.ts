/**
 * Logging in: the `hello` a connection must start with. Before it, a peer may send one small
 * frame and has LOGIN_DEADLINE_MS to do so; the token (or a peer proxy's write grant) is
 * checked by the SessionDirectory (the server) in constant time. A client then gets a session of
 * its own (a context of the proxy's runtime); a peer link attaches to the session whose grant it
 * holds.
 */
import { Tracer } from '../runtime/trace.js';
import { asOffloadError, errors, OffloadError } from '../errors.js';
import { toldProcess } from '../transport/process-id.js';
import { startHeartbeat } from '../transport/heartbeat.js';
import type { ReplyBodies, RequestOf } from '../protocol/messages.js';
import { compactMeta } from '../protocol/compact.js';
import { PROTOCOL_VERSION } from '../protocol/wire.js';
import type { ClientSession } from './client-session.js';

export type { SessionDirectory } from './session.js';

/** How long a new connection has to log in, unless the server is told otherwise. */
export const LOGIN_DEADLINE_MS = 10_000;

/**
 * Answers a `hello`: refuses a wrong login (closing the connection, after the directory's delay),
 * or opens or attaches the session and welcomes the client. It answers by itself (the welcome,
 * or the refusal that closes the connection), so it returns no reply; later requests wait for it.
 */
export function hello(client: ClientSession, request: RequestOf<'hello'>): undefined {
  const { id, version, token, grant } = request;
  const { connection, directory } = client;
  const { transport } = connection;
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
  directory.metrics.loggedIn(client, login.grant ? 'peer-link' : 'client');
  transport.limits = undefined;
  // The client offered the compact form: it is spoken both ways from the welcome on.
  if (request.compact === true) transport.metaCodec = compactMeta;
  // A client on this host: whether the two share their only core (transport/co-location.ts).
  const told = toldProcess(request.pid, request.started);
  if (told) transport.peerProcess?.(told);
  startHeartbeat(transport, directory.peerTimeoutMs);
  if (login.grant) {
    // A peer proxy's link, on a client's behalf: it may write into the granted buffer only.
    client.attach(login.grant.session, login.grant.buffer);
    welcome(client, id);
    return;
  }
  client.loggingIn = true;
  const opening = directory
    .open(
      transport.peer,
      (line) => client.forwardPrint(line),
      (call) => client.forwardHostCall(call),
      request.trace,
      login.tenant,
    )
    .then(
      (session) => {
        if (transport.closed) {
          // The client left while its context was being made.
          void directory.close(session);
          return;
        }
        client.session = session;
        welcome(client, id);
      },
      (error: unknown) => connection.refuse(id, asOffloadError(error, 'opening a session for the client')),
    );
  connection.barrier(opening);
}

function welcome(client: ClientSession, id: number): void {
  const devices = client.runtime.devices.map((device) => device.info);
  // `now`: this proxy's clock (microseconds since the epoch), to align its trace with the client's.
  const reply: { op: 'reply'; id: number } & ReplyBodies['hello'] = {
    op: 'reply',
    id,
    devices,
    peers: client.directory.peerList,
    now: Tracer.now(),
  };
  if (client.connection.transport.metaCodec === compactMeta) reply.compact = true;
  const local = client.connection.transport.localProcess?.();
  if (local) Object.assign(reply, local);
  client.connection.send(reply);
}
