/**
 * The present-map path's resolver of map clauses: a clause whose range is mapped and that asks
 * for no copy becomes its device pointer while the launch checks its arguments.
 */
import { Buffer, DevicePointer } from '../api/buffer.js';
import type { PointerResolver } from '../api/internal.js';
import { isMapSpec, isOwnClause, servedByPresent } from './map.js';
import type { MappingTable } from './table.js';

/**
 * The device pointer of a present clause that asks for no copy, for a present-map launch
 * (Queue.launchResolving); undefined for any other clause, which sends the call down the
 * general path; any other value as it is.
 */
export class PresentPointers implements PointerResolver {
  /**
   * The last two clauses resolved and their pointers, while no entry was removed: `map.*` hands
   * out the same clause while a loop names the same array, so a call of a loop finds its two or
   * three clauses here by identity.
   */
  private clause0: unknown;
  private pointer0: unknown;
  private clause1: unknown;
  private pointer1: unknown;
  private removals = 0;

  constructor(private readonly table: MappingTable) {}

  pointerFor(value: unknown): unknown {
    // Small enough for V8 to inline into the launch's checks; resolve is not.
    if (this.removals === this.table.removals) {
      if (value === this.clause0) return this.pointer0;
      if (value === this.clause1) return this.pointer1;
    }
    return this.resolve(value);
  }

  private resolve(value: unknown): unknown {
    if (this.removals !== this.table.removals) {
      this.removals = this.table.removals;
      this.clause0 = this.clause1 = this.pointer0 = this.pointer1 = undefined;
    }
    // Clauses first: the usual argument here, found in one `instanceof` step.
    const own = isOwnClause(value);
    if (!own && (value instanceof Buffer || value instanceof DevicePointer || !isMapSpec(value))) return value;
    const found = servedByPresent(value) ? this.table.lookup(value.view, value.name) : undefined;
    const buffer = found?.entry.ready;
    if (!buffer) return undefined;
    const pointer = found.offset === 0 ? buffer : buffer.at(found.offset);
    if (own) {
      // Only this package's clauses: they are frozen, so a clause cannot change under the memo.
      this.clause1 = this.clause0;
      this.pointer1 = this.pointer0;
      this.clause0 = value;
      this.pointer0 = pointer;
    }
    return pointer;
  }
}
