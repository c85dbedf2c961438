/** The spans a proxy kept of a session's work, as the client takes them: checked, field by field. */
import type { TraceEvent } from '../../runtime/trace.js';
import { cut } from '../interface.js';

/** The most fields of a proxy's span args kept, and the longest string among them. */
const MAX_TRACE_ARGS = 16;
const MAX_TRACE_STRING = 256;

/**
 * A trace event as a proxy may send it, rebuilt from checked fields (undefined: left out): a span
 * or a name, with small integer ids, and args of at most MAX_TRACE_ARGS plain values (strings up
 * to MAX_TRACE_STRING characters, finite numbers, booleans). A proxy is a peer like any other:
 * nothing it sends reaches the trace as an object of its making (a `toString` that is not a
 * function, args nested 100,000 deep), so merging and writing the trace cannot throw.
 */
export function checkedTraceEvent(value: unknown): TraceEvent | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const event = value as Record<string, unknown>;
  const { name, cat, ph, ts, dur, pid, tid, args } = event;
  const id = (n: unknown) => Number.isInteger(n) && (n as number) >= 0 && (n as number) < 1_000_000_000;
  if (
    typeof name !== 'string' ||
    name.length > MAX_TRACE_STRING ||
    typeof cat !== 'string' ||
    cat.length > 64 ||
    (ph !== 'X' && ph !== 'M') ||
    typeof ts !== 'number' ||
    !Number.isFinite(ts) ||
    (dur !== undefined && (typeof dur !== 'number' || !Number.isFinite(dur))) ||
    !id(pid) ||
    (pid as number) >= 1000 ||
    !id(tid) ||
    (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args)))
  )
    return undefined;
  const checked: TraceEvent = { name, cat, ph, ts, pid: pid as number, tid: tid as number };
  if (dur !== undefined) checked.dur = dur;
  if (args !== undefined) {
    const kept: Record<string, string | number | boolean> = {};
    let fields = 0;
    for (const [key, field] of Object.entries(args as Record<string, unknown>)) {
      if (fields === MAX_TRACE_ARGS) break;
      if (key.length > 64 || key === '__proto__') continue;
      if (typeof field === 'string') kept[key] = cut(field, MAX_TRACE_STRING);
      else if ((typeof field === 'number' && Number.isFinite(field)) || typeof field === 'boolean') kept[key] = field;
      else continue;
      fields++;
    }
    checked.args = kept;
  }
  return checked;
}
