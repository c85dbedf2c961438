/**
 * Filling memory with a repeated pattern of 1, 2, 4 or 8 bytes (olMemFill, cuMemsetD8/16/32),
 * for the plugins whose memory, or staging memory, is a host array.
 */

/** Bytes a staged fill writes at a time (a multiple of every pattern length: each chunk starts in phase). */
export const FILL_CHUNK_BYTES = 1024 * 1024;

/**
 * Writes `pattern` repeated over `view`, starting with its first byte. `pattern.length` divides
 * 8. On shared memory a byte loop (and Uint8Array.fill) runs byte by byte; the aligned middle
 * is written as 8-byte words instead, which is several times faster.
 */
export function fillPattern(view: Uint8Array, pattern: Uint8Array): void {
  const n = pattern.length;
  const length = view.byteLength;
  if (n === 1 && !(view.buffer instanceof SharedArrayBuffer)) {
    view.fill(pattern[0]!);
    return;
  }
  const head = Math.min(length, (8 - (view.byteOffset % 8)) % 8);
  for (let i = 0; i < head; i++) view[i] = pattern[i % n]!;
  const words = Math.floor((length - head) / 8);
  if (words > 0) {
    const word = new Uint8Array(8);
    for (let j = 0; j < 8; j++) word[j] = pattern[(head + j) % n]!;
    new BigInt64Array(view.buffer, view.byteOffset + head, words).fill(new BigInt64Array(word.buffer)[0]!);
  }
  for (let i = head + words * 8; i < length; i++) view[i] = pattern[i % n]!;
}

/** The pattern repeated over `bytes` bytes, at most FILL_CHUNK_BYTES: what a staged fill writes per chunk. */
export function patternChunk(pattern: Uint8Array, bytes: number): Uint8Array {
  const chunk = new Uint8Array(Math.min(bytes, FILL_CHUNK_BYTES));
  fillPattern(chunk, pattern);
  return chunk;
}
