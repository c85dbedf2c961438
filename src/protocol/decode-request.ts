/**
 * The proxy's side of the protocol: one decoder that turns a frame from a client into a typed
 * request (or note), checking every field on arrival, as messages.ts declares it. A field of the wrong type throws PROTOCOL
 * naming the op and the field (the connection then closes); well-typed values that are wrong
 * (an unknown buffer, an offset out of range) are for the request's handler to refuse.
 */
import { errors } from '../errors.js';
import type { Frame } from '../transport/frame.js';
import type { Field, Fields } from './fields.js';
import { REQUESTS, type ClientNotes, type Request } from './messages.js';
import { Meta } from './wire.js';

/** The op of a frame from a client (PROTOCOL when it has none). */
export function frameOp(frame: Frame): string {
  return new Meta(frame).op;
}

/** A request's id (PROTOCOL when it is not a non-negative integer). */
export function requestId(frame: Frame): number {
  return new Meta(frame).uint('id');
}

/** A `chunk` frame (a streamed write's bytes), checked. */
export function decodeChunk(frame: Frame): ClientNotes['chunk'] {
  const meta = new Meta(frame);
  return { id: meta.uint('id'), offset: meta.uint('offset') };
}

/** A `host-call-result` frame, checked: an error, or a number (null for NaN and infinities). */
export function decodeHostCallResult(frame: Frame): ClientNotes['host-call-result'] {
  const meta = new Meta(frame);
  const call = meta.uint('call');
  const error = meta.error('error');
  if (error) return { call, error };
  // JSON has no NaN or infinities: null stands for them.
  const value = frame.meta.value;
  if (typeof value !== 'number' && value !== null)
    throw errors.protocol(`'host-call-result' for call ${call} has no number 'value'`);
  return { call, value };
}

/** Each op's fields as [name, kind] pairs, made once from the table. */
const requestFields = new Map<string, [string, Field<unknown>][]>(
  Object.entries(REQUESTS).map(([op, fields]) => [op, Object.entries(fields as Fields)]),
);

/** Decodes a request frame: every field of its op (messages.ts) checked; an unknown op is PROTOCOL. */
export function decodeRequest(frame: Frame): Request {
  const meta = new Meta(frame);
  const op = meta.op;
  const id = meta.uint('id');
  const fields = requestFields.get(op);
  if (!fields) throw errors.protocol(`unknown op '${op}'`);
  const request: Record<string, unknown> = { op, id };
  for (const [name, kind] of fields) request[name] = kind.read(meta, name);
  return request as Request;
}
