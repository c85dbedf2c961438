/**
 * Bulk data in chunks (wire.ts: CHUNK_BYTES each), with the channel's back-pressure: the one
 * loop behind a client's streamed write, a proxy's streamed read and a proxy's copy to a peer.
 */
import { CHUNK_BYTES } from './wire.js';

/** Where a stream of chunks goes. */
export interface ChunkSink {
  /** Sends the chunk of `length` bytes at `offset`; false when the channel holds more than its high-water mark (the stream then awaits `drained()`). */
  send(offset: number, length: number): boolean | Promise<boolean>;
  drained(): Promise<void>;
  /** True when the channel is gone: the stream stops. */
  stopped(): boolean;
}

/**
 * Sends `bytes` bytes through `sink`, chunk after chunk in order, pausing while the channel is
 * full. Resolves true when every chunk went, false when the channel was gone after one of them.
 */
export async function streamChunks(bytes: number, sink: ChunkSink): Promise<boolean> {
  for (let offset = 0; offset < bytes; offset += CHUNK_BYTES) {
    if (!(await sink.send(offset, Math.min(CHUNK_BYTES, bytes - offset)))) await sink.drained();
    if (sink.stopped()) return false;
  }
  return true;
}
