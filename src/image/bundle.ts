/**
 * The bundle file format (DESIGN section 4), all integers little-endian:
 *
 *   0   8 bytes  magic: 0x7F 'O' 'F' 'F' 'L' 'O' 'A' 'D'
 *   8   u32      format version (1)
 *   12  u32      manifest length in bytes
 *   16  ...      manifest, UTF-8 JSON, then zero padding to a multiple of 8
 *   ... payload  the images; each ImageInfo.offset/size is relative to the payload start and
 *                each image is padded with zeros to a multiple of 8
 */
import { readBytes } from '../platform-files.js';
import { OffloadError, errors } from '../errors.js';
import {
  PARAM_TYPES,
  type Bundle,
  type EntryInfo,
  IMAGE_FORMATS,
  type ImageFormat,
  type ImageInfo,
  type Manifest,
  type ParamInfo,
  type ParamType,
  type TranslationNote,
  type WgslKernelInfo,
  type WgslParamInfo,
} from './manifest.js';

/** The 8 magic bytes every bundle starts with. */
export const BUNDLE_MAGIC: Uint8Array = new Uint8Array([0x7f, 0x4f, 0x46, 0x46, 0x4c, 0x4f, 0x41, 0x44]);
/** The format version this runtime writes and reads. */
export const BUNDLE_VERSION = 1;
/** File name extension of bundles (`buildBundle` writes `<output>.offload`). */
export const BUNDLE_EXTENSION = '.offload';

const HEADER_BYTES = 16;
const ENTRY_KINDS: readonly EntryInfo['kind'][] = ['kernel', 'global'];

/**
 * Encodes a bundle. `images[k]` holds the bytes of `manifest.images[k]`; the offset and size of
 * each ImageInfo are computed here (the values passed in are ignored, `manifest` is not changed).
 * @throws OffloadError INVALID_ARGUMENT when the image count differs from the manifest's.
 */
export function encodeBundle(manifest: Manifest, images: Uint8Array[]): Uint8Array {
  if (images.length !== manifest.images.length) {
    throw errors.invalidArgument(
      `encodeBundle: manifest lists ${manifest.images.length} image(s) but ${images.length} were given`,
    );
  }
  let offset = 0;
  const infos = manifest.images.map((info, k): ImageInfo => {
    const size = images[k]!.length;
    const placed = { ...info, offset, size };
    offset += align8(size);
    return placed;
  });
  const json = new TextEncoder().encode(JSON.stringify({ ...manifest, images: infos }));
  const payloadStart = HEADER_BYTES + align8(json.length);
  const out = new Uint8Array(payloadStart + offset);
  out.set(BUNDLE_MAGIC, 0);
  const view = new DataView(out.buffer);
  view.setUint32(8, BUNDLE_VERSION, true);
  view.setUint32(12, json.length, true);
  out.set(json, HEADER_BYTES);
  infos.forEach((info, k) => out.set(images[k]!, payloadStart + info.offset));
  return out;
}

/**
 * Decodes and validates a bundle. The returned image bytes are views into `bytes` (no copies),
 * so `bytes` must not be modified while the bundle is in use.
 * @throws OffloadError INCOMPATIBLE_IMAGE, and nothing else, naming what is wrong.
 */
export function decodeBundle(bytes: Uint8Array): Bundle {
  for (let i = 0; i < Math.min(bytes.length, BUNDLE_MAGIC.length); i++) {
    if (bytes[i] !== BUNDLE_MAGIC[i]) throw invalid('bad magic (not an offload bundle)');
  }
  if (bytes.length < HEADER_BYTES) {
    throw invalid(`truncated header: ${bytes.length} bytes, a header has ${HEADER_BYTES}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = view.getUint32(8, true);
  if (version !== BUNDLE_VERSION) {
    throw invalid(`unsupported bundle version ${version} (this runtime reads version ${BUNDLE_VERSION})`);
  }
  const manifestBytes = view.getUint32(12, true);
  const payloadStart = HEADER_BYTES + align8(manifestBytes);
  if (payloadStart > bytes.length) {
    throw invalid(
      `truncated manifest: the header announces ${manifestBytes} bytes (padded to end at ${payloadStart}) ` +
        `but the bundle has ${bytes.length} bytes`,
    );
  }
  const manifest = parseManifest(bytes.subarray(HEADER_BYTES, HEADER_BYTES + manifestBytes));
  const payload = bytes.subarray(payloadStart);
  const images = manifest.images.map((info, k) => {
    const end = info.offset + info.size;
    if (end > payload.length) {
      const where = `bytes [${info.offset}, ${end}) of a ${payload.length}-byte payload`;
      throw invalid(
        info.offset <= payload.length
          ? `truncated image ${k}: needs ${where}`
          : `image ${k} lies outside the payload: ${where}`,
      );
    }
    return { info, bytes: payload.subarray(info.offset, end) };
  });
  return { manifest, images };
}

/**
 * Reads and decodes a bundle file.
 * @throws OffloadError NOT_FOUND when the file does not exist, INVALID_ARGUMENT when it cannot be
 *   read, INCOMPATIBLE_IMAGE when it is not a valid bundle.
 */
export async function readBundleFile(path: string): Promise<Bundle> {
  let contents: Uint8Array;
  try {
    contents = await readBytes(path);
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === 'ENOENT') throw errors.notFound(`bundle file not found: ${path}`);
    throw new OffloadError('INVALID_ARGUMENT', `cannot read bundle file ${path}: ${(cause as Error).message}`, {
      cause,
    });
  }
  return decodeBundle(new Uint8Array(contents.buffer, contents.byteOffset, contents.byteLength));
}

/** Validates the manifest JSON and returns a copy holding only the known fields. */
function parseManifest(bytes: Uint8Array): Manifest {
  let text: string;
  let json: unknown;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw invalid('manifest is not valid UTF-8');
  }
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw invalid(`manifest is not JSON: ${(cause as Error).message}`);
  }
  if (!isRecord(json)) throw invalid('manifest is not a JSON object');
  const name = json.name;
  if (typeof name !== 'string') throw invalid(`missing or invalid field 'name' in manifest`);
  if (!Array.isArray(json.images)) throw invalid(`missing or invalid field 'images' in manifest`);
  if (!Array.isArray(json.entries)) throw invalid(`missing or invalid field 'entries' in manifest`);
  const images = json.images.map(parseImage);
  const entries = json.entries.map(parseEntry);
  const seen = new Set<string>();
  for (const entry of entries) {
    if (seen.has(entry.name)) throw invalid(`duplicate entry '${entry.name}' in manifest`);
    seen.add(entry.name);
  }
  const notes = json.notes === undefined ? undefined : parseNotes(json.notes);
  return { name, images, entries, ...(notes ? { notes } : {}) };
}

function parseNotes(value: unknown): TranslationNote[] {
  if (!Array.isArray(value)) throw invalid(`invalid field 'notes' in manifest: expected an array`);
  return value.map((note: unknown, i: number) => {
    if (
      !isRecord(note) ||
      typeof note.kernel !== 'string' ||
      typeof note.file !== 'string' ||
      typeof note.reason !== 'string' ||
      typeof note.line !== 'number' ||
      !Number.isSafeInteger(note.line) ||
      note.line < 0
    )
      throw invalid(`invalid note ${i} in manifest: expected { kernel, file, line, reason }`);
    return { kernel: note.kernel, file: note.file, line: note.line, reason: note.reason };
  });
}

function parseImage(value: unknown, k: number): ImageInfo {
  const where = `image ${k}`;
  if (!isRecord(value)) throw invalid(`${where} is not a JSON object`);
  const format = value.format;
  if (!IMAGE_FORMATS.includes(format as ImageFormat)) {
    throw invalid(`missing or invalid field 'format' in ${where}: ${JSON.stringify(format)}`);
  }
  if (typeof value.triple !== 'string') throw invalid(`missing or invalid field 'triple' in ${where}`);
  const count = (field: string): number => {
    const n = value[field];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
      throw invalid(`missing or invalid field '${field}' in ${where}: expected a non-negative integer`);
    }
    return n;
  };
  const info: ImageInfo = {
    format: format as ImageFormat,
    triple: value.triple,
    offset: count('offset'),
    size: count('size'),
    staticBase: count('staticBase'),
    staticSize: count('staticSize'),
    minPages: count('minPages'),
  };
  if (format === 'wgsl') {
    if (typeof value.source !== 'string') throw invalid(`missing or invalid field 'source' in ${where}`);
    if (!Array.isArray(value.kernels)) throw invalid(`missing or invalid field 'kernels' in ${where}`);
    info.source = value.source;
    info.kernels = value.kernels.map((kernel: unknown, i: number) =>
      parseWgslKernel(kernel, `kernel ${i} of ${where}`),
    );
  }
  return info;
}

function parseWgslKernel(value: unknown, where: string): WgslKernelInfo {
  if (!isRecord(value) || typeof value.name !== 'string' || value.name === '')
    throw invalid(`missing or invalid field 'name' in ${where}`);
  where = `WGSL kernel '${value.name}'`;
  const { workgroupSize, uniform, teamMemory, fault } = value;
  const isCount = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
  const isName = (n: unknown): n is string => typeof n === 'string' && /^[A-Za-z_]\w{0,127}$/.test(n);
  const isSize = (n: unknown) => isName(n) || (isCount(n) && n > 0);
  if (!(
    isSize(workgroupSize) ||
    (Array.isArray(workgroupSize) &&
      workgroupSize.length >= 1 &&
      workgroupSize.length <= 3 &&
      workgroupSize.every(isSize))
  )) {
    throw invalid(`missing or invalid field 'workgroupSize' in ${where}`);
  }
  if (teamMemory !== undefined && !isName(teamMemory)) throw invalid(`invalid field 'teamMemory' in ${where}`);
  if (fault !== undefined && typeof fault !== 'boolean') throw invalid(`invalid field 'fault' in ${where}`);
  if (uniform !== undefined && !(isRecord(uniform) && isCount(uniform.binding) && isCount(uniform.bytes))) {
    throw invalid(`invalid field 'uniform' in ${where}`);
  }
  if (!Array.isArray(value.params)) throw invalid(`missing or invalid field 'params' in ${where}`);
  const params = value.params.map((param: unknown, i: number): WgslParamInfo => {
    if (isRecord(param) && typeof param.name === 'string') {
      if (param.type === 'ptr' && isCount(param.binding) && typeof param.readOnly === 'boolean') {
        return { name: param.name, type: 'ptr', binding: param.binding, readOnly: param.readOnly };
      }
      if ((param.type === 'i32' || param.type === 'f32') && isCount(param.offset) && uniform !== undefined) {
        return { name: param.name, type: param.type, offset: param.offset };
      }
    }
    throw invalid(`invalid parameter ${i} of ${where}`);
  });
  return {
    name: value.name,
    params,
    workgroupSize: workgroupSize as WgslKernelInfo['workgroupSize'],
    ...(uniform === undefined ? {} : { uniform: uniform as WgslKernelInfo['uniform'] }),
    ...(teamMemory === undefined ? {} : { teamMemory }),
    ...(fault === true ? { fault } : {}),
  };
}

function parseEntry(value: unknown, k: number): EntryInfo {
  if (!isRecord(value)) throw invalid(`entry ${k} is not a JSON object`);
  const name = value.name;
  if (typeof name !== 'string' || name === '') throw invalid(`missing or invalid field 'name' in entry ${k}`);
  const where = `entry '${name}'`;
  const kind = value.kind;
  if (!ENTRY_KINDS.includes(kind as EntryInfo['kind'])) throw invalid(`missing or invalid field 'kind' in ${where}`);
  if (!Array.isArray(value.params)) throw invalid(`missing or invalid field 'params' in ${where}`);
  const params = value.params.map((param: unknown, i: number): ParamInfo => {
    if (!isRecord(param) || typeof param.name !== 'string') {
      throw invalid(`missing or invalid field 'name' in parameter ${i} of ${where}`);
    }
    if (!PARAM_TYPES.includes(param.type as ParamType)) {
      throw invalid(`unknown param type ${JSON.stringify(param.type)} of parameter '${param.name}' in ${where}`);
    }
    return { name: param.name, type: param.type as ParamType };
  });
  const wasmOnly = value.wasmOnly;
  if (wasmOnly !== undefined && typeof wasmOnly !== 'string') throw invalid(`invalid field 'wasmOnly' in ${where}`);
  return { name, kind: kind as EntryInfo['kind'], params, ...(wasmOnly === undefined ? {} : { wasmOnly }) };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function align8(n: number): number {
  return Math.ceil(n / 8) * 8;
}

function invalid(message: string): OffloadError {
  return errors.incompatibleImage(`invalid bundle: ${message}`);
}
