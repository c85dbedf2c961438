/**
 * The compact form of the two frames of a launch round trip: the `launch` request and a reply
 * that carries nothing but its id. They are most of the frames a launch-heavy program sends,
 * and JSON cost each a stringify and a parse (0.5-0.9 us apiece, more on a cold cache); here
 * each field is a fixed-size number. Every other frame travels as JSON, and so do a reply with
 * any field besides its id and a launch with a value this form cannot hold. The launch's layout
 * follows from its declaration (messages.ts REQUESTS.launch): a new field is carried as soon as
 * it is declared, and a field of a kind with no compact form does not compile. Both ends set
 * this codec on their transport once the hello agreed on it (`Transport.metaCodec`); the frame's
 * magic says which form its meta is in.
 *
 * Layout, little-endian (field kinds: protocol/fields.ts; a u53 is 8 bytes):
 *   reply:   u8 1 | u53 id
 *   launch:  u8 2 | u8 presence (bit i: the i-th optional field is there) | u53 id
 *            | each field present, in declaration order, in its kind's form
 * The decoder checks every length against the bytes it has and wants all of them used; the
 * request's fields are then checked by decodeRequest as a JSON request's are.
 */
import { errors, OffloadError } from '../errors.js';
import { allocUnsafe, type MetaCodec } from '../transport/frame.js';
import { CompactReader, CompactWriter } from './compact-bytes.js';
import type { CompactField } from './fields.js';
import { REQUESTS } from './messages.js';

const REPLY = 1;
const LAUNCH = 2;

/** Every field of a launch has a compact form: this does not compile once one has not. */
const launchFields: Record<string, CompactField<unknown>> = REQUESTS.launch;

/** The launch's fields in declaration order, each with its presence bit (0: always there). */
const LAUNCH_LAYOUT = (() => {
  let bit = 1;
  return Object.entries(launchFields).map(([name, field]) => {
    const presence = field.optional ? bit : 0;
    if (field.optional) bit <<= 1;
    return { name, form: field.compact, presence };
  });
})();
const ALL_PRESENT = LAUNCH_LAYOUT.reduce((bits, field) => bits | field.presence, 0);
if (ALL_PRESENT >= 2 ** 8)
  throw new OffloadError('INTERNAL', 'a launch has more optional fields than its presence byte holds');

function encodeLaunch(meta: Record<string, unknown>, at: number): Uint8Array | undefined {
  let bound = 2 + 8;
  let presence = 0;
  for (const field of LAUNCH_LAYOUT) {
    const value = meta[field.name];
    if (field.presence !== 0 && value === undefined) continue;
    presence |= field.presence;
    const bytes = field.form.maxBytes(value);
    if (bytes === 0) return undefined;
    bound += bytes;
  }
  const writer = new CompactWriter(allocUnsafe(at + bound), at);
  writer.u8(LAUNCH);
  writer.u8(presence);
  if (!writer.u53(meta.id)) return undefined;
  for (const field of LAUNCH_LAYOUT)
    if ((field.presence === 0 || presence & field.presence) && !field.form.write(writer, meta[field.name]))
      return undefined;
  return writer.done();
}

function decodeLaunch(reader: CompactReader): Record<string, unknown> {
  const presence = reader.u8('presence');
  if ((presence & ~ALL_PRESENT) !== 0) throw errors.protocol(`compact launch meta: unknown flags ${presence}`);
  const meta: Record<string, unknown> = { op: 'launch', id: reader.u53('id') };
  for (const field of LAUNCH_LAYOUT)
    meta[field.name] =
      field.presence === 0 || presence & field.presence ? field.form.read(reader, field.name) : undefined;
  reader.end('launch');
  return meta;
}

function encodeReply(meta: Record<string, unknown>, at: number): Uint8Array | undefined {
  for (const field in meta) if (field !== 'op' && field !== 'id') return undefined;
  const writer = new CompactWriter(allocUnsafe(at + 9), at);
  writer.u8(REPLY);
  return writer.u53(meta.id) ? writer.done() : undefined;
}

export const compactMeta: MetaCodec = {
  encode(meta, at) {
    if (meta.op === 'launch') return encodeLaunch(meta, at);
    if (meta.op === 'reply') return encodeReply(meta, at);
    return undefined;
  },
  decode(bytes) {
    const reader = new CompactReader(bytes);
    const kind = reader.u8('kind');
    if (kind === LAUNCH) return decodeLaunch(reader);
    if (kind !== REPLY) throw errors.protocol(`compact frame meta of unknown kind ${kind}`);
    const meta = { op: 'reply', id: reader.u53('id') };
    reader.end('reply');
    return meta;
  },
};
