/**
 * A connection's requests awaiting their replies, by id. While one is in flight alone it is kept
 * in a field; the others go in a Map. A program that awaits each launch has one request in
 * flight at a time, and a Map emptied and filled again per request reallocates its table each
 * time (V8 shrinks a Map that empties).
 */
export class PendingRequests<V> implements Iterable<[number, V]> {
  /** The request in flight while no other is (undefined: none); always older than those in `more`. */
  private sole: V | undefined = undefined;
  private soleId = -1;
  private readonly more = new Map<number, V>();

  get size(): number {
    return (this.sole === undefined ? 0 : 1) + this.more.size;
  }

  get(id: number): V | undefined {
    return id === this.soleId ? this.sole : this.more.get(id);
  }

  /** Adds request `id`, newer than every request here (ids only increase). */
  set(id: number, value: V): void {
    if (this.sole === undefined && this.more.size === 0) {
      this.sole = value;
      this.soleId = id;
    } else {
      this.more.set(id, value);
    }
  }

  delete(id: number): boolean {
    if (id !== this.soleId) return this.more.delete(id);
    this.sole = undefined;
    this.soleId = -1;
    return true;
  }

  clear(): void {
    this.sole = undefined;
    this.soleId = -1;
    this.more.clear();
  }

  /** The requests, oldest first. */
  *[Symbol.iterator](): IterableIterator<[number, V]> {
    if (this.sole !== undefined) yield [this.soleId, this.sole];
    yield* this.more;
  }

  values(): V[] {
    return [...this].map(([, value]) => value);
  }
}
