/**
 * Names the protocol of a peer that does not speak ours, from the first bytes it sent (where a
 * frame's magic should be): a port that answers HTTP, a TLS endpoint reached in clear text or
 * the other way round, an SSH server. A person reads "bad frame magic 0x50545448" as a bug of
 * ours; "the peer speaks HTTP" says they reached the wrong port.
 */

const HTTP_STARTS = ['HTTP', 'GET ', 'POST', 'PUT ', 'HEAD', 'OPTI', 'DELE', 'PATC', 'CONN', 'PRI '];

/** What the peer speaks instead, as a phrase to append to a PROTOCOL error; undefined when unknown. */
export function foreignProtocol(first: Uint8Array): string | undefined {
  if (first.length < 4) return undefined;
  const text = String.fromCharCode(first[0]!, first[1]!, first[2]!, first[3]!);
  if (text === 'HTTP')
    return 'the peer answers in HTTP: an HTTP server listens there, not `offload proxy` (check the port)';
  if (HTTP_STARTS.includes(text))
    return 'the peer speaks HTTP: an HTTP client (a browser, curl) connected to a port of `offload proxy`';
  // A TLS record: handshake (22) or alert (21), version 3.x.
  if ((first[0] === 0x16 || first[0] === 0x15) && first[1] === 0x03)
    return 'the peer speaks TLS: a proxy started with --tls-cert is reached as tls://host:port; a client that asks for TLS (tls://, OFFLOAD_TLS_CA) reached a proxy without it';
  if (text === 'SSH-') return 'the peer is an SSH server, not `offload proxy` (check the port)';
  return undefined;
}
