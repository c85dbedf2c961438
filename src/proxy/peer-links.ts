/**
 * Links from this proxy to other proxies, for copies between devices of one client on two
 * proxies. The link is a client connection to the other proxy that logs in with the write
 * grant the client handed over (made there when the buffer was allocated): it can write into
 * that one buffer and nothing else, and no token travels between proxies. Bytes are read from
 * local device memory chunk by chunk and sent as pipelined writes; the send buffer's
 * back-pressure keeps at most a few chunks in memory.
 *
 * Ownership: one PeerLinks per client connection; `close()` (when that client leaves) closes
 * every link it opened.
 */
import { RemoteConnection } from '../plugins/remote/connection.js';
import { asksForTls, type TlsClientOptions } from '../transport/connect.js';
import { streamChunks } from '../protocol/chunks.js';

export interface PeerTarget {
  address: string;
  /** The write grant of the target buffer, made by the target proxy. */
  grant: string;
  device: number;
  buffer: number;
  offset: number;
}

/** Queue ids this proxy chooses on peer links; high so they can never meet a client's own. */
const LINK_QUEUE_BASE = 2 ** 40;

export class PeerLinks {
  private readonly links = new Map<string, Promise<RemoteConnection>>();
  private nextQueue = LINK_QUEUE_BASE;

  /** @param tls The CAs this proxy trusts for its links to `tls://` peers (default: the system's). */
  constructor(private readonly tls?: TlsClientOptions) {}

  /**
   * Sends `bytes` bytes to the target buffer; `readChunk(done, chunk)` fills `chunk` with the
   * source bytes from offset `done`. Resolves when the target proxy has written them all.
   */
  async send(
    target: PeerTarget,
    bytes: number,
    readChunk: (done: number, chunk: Uint8Array) => Promise<void>,
  ): Promise<void> {
    const connection = await this.link(target);
    // A queue of its own per copy, so copies of different client queues neither wait for nor
    // fail each other. Requests are ordered on the link: no need to await its creation.
    const queue = this.nextQueue++;
    const created = connection.request({ op: 'queue', queue, device: target.device });
    const writes: Promise<unknown>[] = [created];
    try {
      await streamChunks(bytes, {
        send: async (done, length) => {
          const chunk = new Uint8Array(length);
          await readChunk(done, chunk);
          writes.push(
            connection.request(
              { op: 'write', queue, buffer: target.buffer, offset: target.offset + done, bytes: length },
              chunk,
            ),
          );
          // Requests do not say whether the link is full: always let it drain before the next chunk.
          return false;
        },
        drained: () => connection.drained(),
        stopped: () => false,
      });
    } finally {
      for (const write of writes) write.catch(() => {});
      connection.request({ op: 'queue-destroy', queue }).catch(() => {});
    }
    await Promise.all(writes);
  }

  /** The open link to the target's proxy and session; a lost or failed one is replaced next time. */
  private link(target: PeerTarget): Promise<RemoteConnection> {
    const key = `${target.address}/${target.grant}`;
    let link = this.links.get(key);
    if (!link) {
      const created = RemoteConnection.open(target.address, {
        grant: target.grant,
        tls: asksForTls(target.address) ? (this.tls ?? {}) : undefined,
      });
      const forget = () => {
        if (this.links.get(key) === created) this.links.delete(key);
      };
      created.then((open) => open.onLost(forget), forget);
      this.links.set(key, (link = created));
    }
    return link;
  }

  close(): void {
    for (const link of this.links.values())
      link.then(
        (connection) => connection.close(),
        () => {},
      );
    this.links.clear();
  }
}
