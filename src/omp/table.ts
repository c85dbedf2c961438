/**
 * The mapping table of one device, as libomptarget keeps it: host memory ranges that are present
 * on the device, each with its device buffer and a reference count. A host range is identified by
 * its ArrayBuffer and byte offsets in it, so sub-arrays of one array find each other.
 */
import { errors } from '../errors.js';
import type { Buffer } from '../api/buffer.js';
import type { HostView } from './map.js';

export interface MapEntry {
  readonly host: ArrayBufferLike;
  readonly begin: number;
  readonly end: number;
  /** Resolves to the device copy; set synchronously so later lookups in the same call see it. */
  readonly buffer: Promise<Buffer>;
  /** The buffer once allocated: lookups that hit then need no await. */
  ready?: Buffer;
  refCount: number;
  readonly name: string | undefined;
}

/** A host range present on the device: its entry and where the range starts inside it. */
export interface Presence {
  readonly entry: MapEntry;
  readonly offset: number;
}

/** How many views a table remembers from its last lookups. */
const RECENT = 4;

/** Whether `buffer` can change length (a resizable ArrayBuffer, a growable SharedArrayBuffer): its views' ranges may change. */
function isResizable(buffer: ArrayBufferLike): boolean {
  const flags = buffer as { resizable?: boolean; growable?: boolean };
  return flags.resizable === true || flags.growable === true;
}

const hostIds = new WeakMap<ArrayBufferLike, number>();
let nextHostId = 1;

/** How OFFLOAD_INFO names a host range: `host#<array>+0x<offset>`, stable per ArrayBuffer. */
export function hostAddress(view: HostView): string {
  let id = hostIds.get(view.buffer);
  if (id === undefined) hostIds.set(view.buffer, (id = nextHostId++));
  return `host#${id}+0x${view.byteOffset.toString(16)}`;
}

export function describeRange(view: HostView, name: string | undefined): string {
  return `${name === undefined ? 'the array' : `'${name}'`} (${hostAddress(view)}, ${view.byteLength} bytes)`;
}

export class MappingTable {
  private readonly entries = new Map<ArrayBufferLike, MapEntry[]>();
  /**
   * The views found last and where they are, newest first: a loop of `target` calls looks up
   * the same few arrays again and again, and comparing a view costs less than reading its
   * buffer, offset and length (about 30 ns a lookup, a tenth of what a present-map call adds to
   * its launch). Only views of fixed-length buffers are kept (their range cannot change), and
   * removing an entry forgets them all.
   */
  private readonly recentViews: (HostView | undefined)[] = new Array<HostView | undefined>(RECENT).fill(undefined);
  private readonly recentFound: (Presence | undefined)[] = new Array<Presence | undefined>(RECENT).fill(undefined);
  private nextRecent = 0;
  /** Counts removals: what was found before one may be gone (PresentPointers' memo). */
  removals = 0;

  constructor(readonly device: number) {}

  /**
   * The entry containing `view`'s range, or undefined when no entry touches it. A range that
   * overlaps an entry without lying inside it is an error: OpenMP forbids extending a mapping.
   */
  lookup(view: HostView, name: string | undefined): Presence | undefined {
    // Small enough for V8 to inline into the present-map path; the search is not.
    const views = this.recentViews;
    for (let i = 0; i < RECENT; i++) if (views[i] === view) return this.recentFound[i];
    return this.search(view, name);
  }

  private search(view: HostView, name: string | undefined): Presence | undefined {
    const list = this.entries.get(view.buffer);
    if (list === undefined) return undefined;
    const begin = view.byteOffset;
    const end = begin + view.byteLength;
    for (const entry of list) {
      const inside = begin >= entry.begin && end <= entry.end;
      if (inside && (begin < entry.end || begin === entry.begin))
        return this.remember(view, { entry, offset: begin - entry.begin });
      const overlaps = begin < entry.end && end > entry.begin;
      if (overlaps) {
        throw errors.invalidArgument(
          `${describeRange(view, name)} overlaps the mapped range [0x${entry.begin.toString(16)}, 0x${entry.end.toString(16)}) of ${entry.name === undefined ? 'another array view' : `'${entry.name}'`} without lying inside it; map the enclosing range instead`,
          this.device,
        );
      }
    }
    return undefined;
  }

  private remember(view: HostView, found: Presence): Presence {
    if (!isResizable(view.buffer)) {
      this.recentViews[this.nextRecent] = view;
      this.recentFound[this.nextRecent] = found;
      this.nextRecent = (this.nextRecent + 1) % RECENT;
    }
    return found;
  }

  add(view: HostView, buffer: Promise<Buffer>, name: string | undefined): MapEntry {
    const entry: MapEntry = {
      host: view.buffer,
      begin: view.byteOffset,
      end: view.byteOffset + view.byteLength,
      buffer,
      refCount: 1,
      name,
    };
    const list = this.entries.get(view.buffer);
    if (list) list.push(entry);
    else this.entries.set(view.buffer, [entry]);
    return entry;
  }

  remove(entry: MapEntry): void {
    this.removals++;
    this.recentViews.fill(undefined);
    this.recentFound.fill(undefined);
    const list = this.entries.get(entry.host);
    if (!list) return;
    const index = list.indexOf(entry);
    if (index >= 0) list.splice(index, 1);
    if (list.length === 0) this.entries.delete(entry.host);
  }

  /** Number of entries (for tests and diagnostics). */
  get size(): number {
    let count = 0;
    for (const list of this.entries.values()) count += list.length;
    return count;
  }
}
