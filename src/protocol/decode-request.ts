/**
 * The proxy's side of the protocol: one decoder that turns a frame from a client into a typed
 * request (or note), checking every field on arrival. A field of the wrong type throws PROTOCOL
 * naming the op and the field (the connection then closes); well-typed values that are wrong
 * (an unknown buffer, an offset out of range) are for the request's handler to refuse.
 */
import type { EntryInfo, ImageInfo } from '../image/manifest.js';
import { errors } from '../errors.js';
import { MAX_FILL_PATTERN_BYTES } from '../units.js';
import type { Frame } from '../transport/frame.js';
import type { ClientNotes, Request, WireRect } from './messages.js';
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

function rect(meta: Meta): WireRect {
  return {
    width: meta.uint('width'),
    height: meta.uint('height'),
    depth: meta.uint('depth'),
    offset: meta.uint('offset'),
    rowPitch: meta.uint('rowPitch'),
    slicePitch: meta.uint('slicePitch'),
  };
}

/** Decodes a request frame: every field of its op checked; an unknown op is PROTOCOL. */
export function decodeRequest(frame: Frame): Request {
  const meta = new Meta(frame);
  const op = meta.op;
  const id = meta.uint('id');
  const queue = () => meta.uint('queue');
  switch (op) {
    case 'hello': {
      const token = meta.optional('token', (field) => meta.string(field));
      const grant = meta.optional('grant', (field) => meta.string(field));
      return {
        op,
        id,
        version: meta.uint('version'),
        token,
        grant,
        trace: frame.meta.trace === true,
        compact: frame.meta.compact === true,
      };
    }
    case 'ping':
    case 'trace':
      return { op, id };
    case 'register':
      return {
        op,
        id,
        image: meta.uint('image'),
        name: meta.string('name'),
        info: meta.object('info') as unknown as ImageInfo,
        entries: meta.array('entries') as EntryInfo[],
      };
    case 'load':
      return { op, id, image: meta.uint('image'), device: meta.uint('device') };
    case 'unload':
      return { op, id, image: meta.uint('image') };
    case 'alloc':
      return {
        op,
        id,
        buffer: meta.uint('buffer'),
        kind: meta.string('kind'),
        bytes: meta.uint('bytes'),
        device: meta.uint('device'),
      };
    case 'global':
      return {
        op,
        id,
        buffer: meta.uint('buffer'),
        image: meta.uint('image'),
        device: meta.uint('device'),
        name: meta.string('name'),
      };
    case 'free':
      return { op, id, buffer: meta.uint('buffer') };
    case 'queue':
      return { op, id, queue: queue(), device: meta.uint('device') };
    case 'queue-destroy':
    case 'sync':
      return { op, id, queue: queue() };
    case 'write':
      return {
        op,
        id,
        queue: queue(),
        buffer: meta.uint('buffer'),
        offset: meta.uint('offset'),
        bytes: meta.uint('bytes'),
        stream: frame.meta.stream === true,
      };
    case 'read':
      return {
        op,
        id,
        queue: queue(),
        buffer: meta.uint('buffer'),
        offset: meta.uint('offset'),
        bytes: meta.uint('bytes'),
      };
    case 'copy':
      return {
        op,
        id,
        queue: queue(),
        dst: meta.uint('dst'),
        src: meta.uint('src'),
        srcOffset: meta.uint('srcOffset'),
        dstOffset: meta.uint('dstOffset'),
        bytes: meta.uint('bytes'),
      };
    case 'send-peer':
      return {
        op,
        id,
        queue: queue(),
        src: meta.uint('src'),
        srcOffset: meta.uint('srcOffset'),
        bytes: meta.uint('bytes'),
        peer: meta.string('peer'),
        grant: meta.string('grant'),
        device: meta.uint('device'),
        dst: meta.uint('dst'),
        dstOffset: meta.uint('dstOffset'),
      };
    case 'launch':
      return {
        op,
        id,
        queue: queue(),
        image: meta.uint('image'),
        kernel: meta.string('kernel'),
        args: meta.args('args'),
        timeoutMs: meta.optional('timeoutMs', (field) => meta.uint(field)),
        teams: meta.gridSize('teams'),
        threads: meta.gridSize('threads'),
        teamMemoryBytes: meta.optional('teamMemoryBytes', (field) => meta.uint(field)),
      };
    case 'record':
      return { op, id, queue: queue(), event: meta.uint('event'), timing: frame.meta.timing === true };
    case 'wait':
      return { op, id, event: meta.uint('event'), queue: queue() };
    case 'wait-host':
      return { op, id, gate: meta.uint('gate'), queue: queue() };
    case 'signal':
      return { op, id, gate: meta.uint('gate'), error: meta.error('error') };
    case 'fill':
      return {
        op,
        id,
        queue: queue(),
        buffer: meta.uint('buffer'),
        pattern: [...meta.bytes('pattern', MAX_FILL_PATTERN_BYTES)],
        offset: meta.uint('offset'),
        bytes: meta.uint('bytes'),
      };
    case 'write-rect':
    case 'read-rect':
      return { op, id, queue: queue(), buffer: meta.uint('buffer'), ...rect(meta) };
    case 'copy-rect':
      return {
        op,
        id,
        queue: queue(),
        width: meta.uint('width'),
        height: meta.uint('height'),
        depth: meta.uint('depth'),
        src: meta.uint('src'),
        srcOffset: meta.uint('srcOffset'),
        srcRowPitch: meta.uint('srcRowPitch'),
        srcSlicePitch: meta.uint('srcSlicePitch'),
        dst: meta.uint('dst'),
        dstOffset: meta.uint('dstOffset'),
        dstRowPitch: meta.uint('dstRowPitch'),
        dstSlicePitch: meta.uint('dstSlicePitch'),
      };
    case 'memory-info':
      return { op, id, device: meta.uint('device') };
    default:
      throw errors.protocol(`unknown op '${op}'`);
  }
}
