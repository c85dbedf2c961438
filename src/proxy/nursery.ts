/**
 * The young generation (V8's nursery) of the proxies offload-ts starts: one MiB a semi-space.
 *
 * Why: V8 grows the nursery up to 16 MiB a semi-space under steady allocation. A proxy allocates
 * a few KiB per request, nearly all of it dead by the reply, so a big nursery only spreads those
 * bytes over memory that is no longer in the cache: each request then writes cache lines fetched
 * from memory. On a core shared with other work that is measured time per round trip
 * (bench/README.md, "young generation"); collections stay short either way, since little
 * survives one. V8 sizes the nursery when the process starts, so it is a node flag of the
 * proxy's command line. A user who sized it (on that command line or in NODE_OPTIONS) keeps
 * their choice; a proxy started by hand takes NODE_OPTIONS (docs/operating.md).
 */
import v8 from 'node:v8';

/** The node flag a spawned proxy gets unless its node arguments or NODE_OPTIONS size the nursery. */
export const PROXY_NURSERY_FLAG = '--max-semi-space-size=1';

/** Whether the node arguments or NODE_OPTIONS already size the young generation. */
export function sizesNursery(nodeArgs: readonly string[], nodeOptions: string | undefined): boolean {
  const sizes = (flag: string) => /^--((max|min)[-_])?semi[-_]space/.test(flag);
  return nodeArgs.some(sizes) || (nodeOptions ?? '').split(/\s+/).some(sizes);
}

/** The young generation's size now, in bytes (both semi-spaces): what a proxy's metrics show. */
export function nurseryBytes(): number {
  return v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space')?.space_size ?? 0;
}
