/**
 * Filling memory with a repeated pattern of any length (olMemFill, cuMemsetD8/16/32), for the
 * plugins whose memory, or staging memory, is a host array.
 */

/** Bytes a staged fill writes at most at a time (see patternChunk). */
export const FILL_CHUNK_BYTES = 1024 * 1024;

/**
 * Writes `pattern` repeated over `view`, starting with its first byte. On shared memory a byte
 * loop (and Uint8Array.fill) runs byte by byte; for a pattern whose length divides 8 the aligned
 * middle is written as 8-byte words instead, which is several times faster. Any other length
 * is written once and then doubled with copyWithin (a memmove each time).
 */
export function fillPattern(view: Uint8Array, pattern: Uint8Array): void {
  const n = pattern.length;
  const length = view.byteLength;
  if (n === 1 && !(typeof SharedArrayBuffer !== 'undefined' && view.buffer instanceof SharedArrayBuffer)) {
    view.fill(pattern[0]!);
    return;
  }
  if (8 % n !== 0) {
    view.set(pattern.subarray(0, Math.min(n, length)));
    for (let filled = n; filled < length; filled *= 2) view.copyWithin(filled, 0, Math.min(filled, length - filled));
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

/**
 * The pattern repeated over `bytes` bytes, at most FILL_CHUNK_BYTES rounded down to whole
 * patterns: what a staged fill writes per chunk, each chunk starting in phase.
 */
export function patternChunk(pattern: Uint8Array, bytes: number): Uint8Array {
  const whole = Math.max(pattern.length, FILL_CHUNK_BYTES - (FILL_CHUNK_BYTES % pattern.length));
  const chunk = new Uint8Array(Math.min(bytes, whole));
  fillPattern(chunk, pattern);
  return chunk;
}
