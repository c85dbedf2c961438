import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { BUNDLE_MAGIC, decodeBundle, encodeBundle, readBundleFile } from '../src/image/bundle.js';
import type { Manifest } from '../src/image/manifest.js';
import { OffloadError, type ErrorCode } from '../src/errors.js';
import { seededRandom } from './helpers/random.js';

const HEADER_BYTES = 16;

/** Asserts that `fn` throws an OffloadError with `code` whose message matches every pattern. */
function assertOffloadError(fn: () => unknown, code: ErrorCode, ...patterns: RegExp[]): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(OffloadError.is(error, code), `expected ${code}, got ${String(error)}`);
    for (const pattern of patterns) assert.match(error.message, pattern);
    return true;
  });
}

function sampleManifest(): Manifest {
  const image = {
    format: 'wasm',
    triple: 'wasm32-unknown-offload',
    offset: 0,
    size: 0,
    staticBase: 65536,
    staticSize: 32,
    minPages: 2,
  } as const;
  return {
    name: 'sample',
    images: [{ ...image }, { ...image, staticBase: 69632, staticSize: 0 }],
    entries: [
      {
        name: 'saxpy',
        kind: 'kernel',
        params: [
          { name: 'n', type: 'i32' },
          { name: 'a', type: 'f32' },
          { name: 'x', type: 'ptr' },
          { name: 'y', type: 'ptr' },
        ],
      },
      {
        name: 'sum_i64',
        kind: 'kernel',
        params: [
          { name: 'a', type: 'i64' },
          { name: 'b', type: 'i64' },
          { name: 'out', type: 'ptr' },
        ],
      },
      { name: 'empty', kind: 'kernel', params: [] },
    ],
  };
}

function sampleImages(): Uint8Array[] {
  return [Uint8Array.from({ length: 13 }, (_, i) => i + 1), Uint8Array.from({ length: 8 }, (_, i) => 200 + i)];
}

function sampleBundle(): Uint8Array {
  return encodeBundle(sampleManifest(), sampleImages());
}

/** A bundle whose manifest is `text`, followed by `payload`. */
function bundleWithManifestText(text: string, payload = new Uint8Array(0)): Uint8Array {
  const json = new TextEncoder().encode(text);
  const start = HEADER_BYTES + Math.ceil(json.length / 8) * 8;
  const bytes = new Uint8Array(start + payload.length);
  bytes.set(BUNDLE_MAGIC);
  const view = new DataView(bytes.buffer);
  view.setUint32(8, 1, true);
  view.setUint32(12, json.length, true);
  bytes.set(json, HEADER_BYTES);
  bytes.set(payload, start);
  return bytes;
}

/** A manifest as JSON, mutated into wrong shapes on purpose: `any` is what it is. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type LooseManifest = Record<string, any>;

function bundleWithManifest(mutate: (manifest: LooseManifest) => void, payloadBytes = 32): Uint8Array {
  const manifest: LooseManifest = structuredClone(sampleManifest());
  manifest.images[0].size = 13;
  manifest.images[1].offset = 16;
  manifest.images[1].size = 8;
  mutate(manifest);
  return bundleWithManifestText(JSON.stringify(manifest), new Uint8Array(payloadBytes));
}

test('a bundle round-trips its manifest and image bytes', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  const { manifest, images } = decodeBundle(bytes);
  const expected = sampleManifest();
  assert.equal(manifest.name, expected.name);
  assert.deepEqual(manifest.entries, expected.entries);
  assert.deepEqual(
    manifest.images.map(({ offset, size }) => ({ offset, size })),
    [
      { offset: 0, size: 13 },
      { offset: 16, size: 8 },
    ],
  );
  assert.deepEqual(manifest.images[0], { ...expected.images[0], offset: 0, size: 13 });
  assert.deepEqual(
    images.map((image) => [...image.bytes]),
    sampleImages().map((image) => [...image]),
  );
  assert.equal(images[1]!.info, manifest.images[1]);
});

test('encodeBundle lays out the header, padded manifest and padded images', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  assert.deepEqual([...bytes.subarray(0, 8)], [0x7f, ...new TextEncoder().encode('OFFLOAD')]);
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  assert.equal(view.getUint32(8, true), 1);
  const manifestBytes = view.getUint32(12, true);
  const payloadStart = HEADER_BYTES + Math.ceil(manifestBytes / 8) * 8;
  assert.equal(payloadStart % 8, 0);
  assert.equal(bytes.length, payloadStart + 16 + 8);
  assert.deepEqual([...bytes.subarray(payloadStart + 13, payloadStart + 16)], [0, 0, 0]);
});

test('encodeBundle leaves the manifest passed in unchanged', { timeout: 60_000 }, () => {
  const manifest = sampleManifest();
  encodeBundle(manifest, sampleImages());
  assert.deepEqual(manifest, sampleManifest());
});

test('encodeBundle rejects an image count that differs from the manifest', { timeout: 60_000 }, () => {
  assertOffloadError(
    () => encodeBundle(sampleManifest(), [new Uint8Array(4)]),
    'INVALID_ARGUMENT',
    /2 image\(s\) but 1/,
  );
});

test('decoded image bytes are views into the bundle, not copies', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  const { images } = decodeBundle(bytes);
  assert.equal(images[0]!.bytes.buffer, bytes.buffer);
  bytes[bytes.length - 8] = 42;
  assert.equal(images[1]!.bytes[0], 42);
});

test('a bundle inside a larger buffer decodes from its own offset', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  const larger = new Uint8Array(bytes.length + 24);
  larger.set(bytes, 24);
  const { images } = decodeBundle(larger.subarray(24));
  assert.deepEqual([...images[0]!.bytes], [...sampleImages()[0]!]);
});

test('bad magic is INCOMPATIBLE_IMAGE naming the magic', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  bytes[1] = 'X'.charCodeAt(0);
  assertOffloadError(() => decodeBundle(bytes), 'INCOMPATIBLE_IMAGE', /bad magic/);
  assertOffloadError(() => decodeBundle(new TextEncoder().encode('\0asm')), 'INCOMPATIBLE_IMAGE', /bad magic/);
});

test('an unsupported version is INCOMPATIBLE_IMAGE naming the version', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  new DataView(bytes.buffer).setUint32(8, 7, true);
  assertOffloadError(() => decodeBundle(bytes), 'INCOMPATIBLE_IMAGE', /unsupported bundle version 7/);
});

test('truncation in the header, the manifest and an image is named as such', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  const manifestBytes = new DataView(bytes.buffer).getUint32(12, true);
  assertOffloadError(() => decodeBundle(new Uint8Array(0)), 'INCOMPATIBLE_IMAGE', /truncated header/);
  assertOffloadError(() => decodeBundle(bytes.subarray(0, 5)), 'INCOMPATIBLE_IMAGE', /truncated header/);
  assertOffloadError(() => decodeBundle(bytes.subarray(0, 12)), 'INCOMPATIBLE_IMAGE', /truncated header/);
  assertOffloadError(() => decodeBundle(bytes.subarray(0, HEADER_BYTES)), 'INCOMPATIBLE_IMAGE', /truncated manifest/);
  assertOffloadError(
    () => decodeBundle(bytes.subarray(0, HEADER_BYTES + manifestBytes - 1)),
    'INCOMPATIBLE_IMAGE',
    /truncated manifest/,
  );
  assertOffloadError(
    () => decodeBundle(bytes.subarray(0, bytes.length - 1)),
    'INCOMPATIBLE_IMAGE',
    /truncated image 1/,
  );
  assertOffloadError(
    () => decodeBundle(bytes.subarray(0, bytes.length - 20)),
    'INCOMPATIBLE_IMAGE',
    /truncated image 0/,
  );
});

test('a manifest that is not JSON, or not UTF-8, is INCOMPATIBLE_IMAGE', { timeout: 60_000 }, () => {
  assertOffloadError(
    () => decodeBundle(bundleWithManifestText('{"name": ')),
    'INCOMPATIBLE_IMAGE',
    /manifest is not JSON/,
  );
  assertOffloadError(() => decodeBundle(bundleWithManifestText('[1, 2]')), 'INCOMPATIBLE_IMAGE', /not a JSON object/);
  const bytes = bundleWithManifestText('{"name": "x"}');
  bytes[HEADER_BYTES + 2] = 0xff;
  assertOffloadError(() => decodeBundle(bytes), 'INCOMPATIBLE_IMAGE', /not valid UTF-8/);
});

test('missing or invalid manifest fields are named with the image or entry they belong to', { timeout: 60_000 }, () => {
  const cases: [(m: LooseManifest) => void, RegExp][] = [
    [(m) => delete m.name, /field 'name' in manifest/],
    [(m) => (m.images = {}), /field 'images' in manifest/],
    [(m) => delete m.entries, /field 'entries' in manifest/],
    [(m) => (m.images[1].format = 'elf'), /field 'format' in image 1/],
    [(m) => delete m.images[0].triple, /field 'triple' in image 0/],
    [(m) => (m.images[1].size = -1), /field 'size' in image 1/],
    [(m) => (m.images[0].staticBase = 1.5), /field 'staticBase' in image 0/],
    [(m) => (m.images[0].minPages = '2'), /field 'minPages' in image 0/],
    [(m) => (m.entries[2].name = ''), /field 'name' in entry 2/],
    [(m) => (m.entries[0].kind = 'function'), /field 'kind' in entry 'saxpy'/],
    [(m) => delete m.entries[1].params, /field 'params' in entry 'sum_i64'/],
    [(m) => (m.entries[0].params[1] = { type: 'f32' }), /field 'name' in parameter 1 of entry 'saxpy'/],
    [(m) => m.entries.push({ ...m.entries[0] }), /duplicate entry 'saxpy'/],
  ];
  for (const [mutate, pattern] of cases) {
    assertOffloadError(() => decodeBundle(bundleWithManifest(mutate)), 'INCOMPATIBLE_IMAGE', pattern);
  }
});

test('an unknown param type is INCOMPATIBLE_IMAGE naming the type, parameter and entry', { timeout: 60_000 }, () => {
  const bytes = bundleWithManifest((m) => (m.entries[1].params[0].type = 'u64'));
  assertOffloadError(
    () => decodeBundle(bytes),
    'INCOMPATIBLE_IMAGE',
    /unknown param type "u64" of parameter 'a' in entry 'sum_i64'/,
  );
});

test('translation notes round-trip, and a malformed one is INCOMPATIBLE_IMAGE naming it', { timeout: 60_000 }, () => {
  const note = { kernel: 'sum_i64', file: 'k.ts', line: 3, reason: 'has parameter a of type i64' };
  assert.deepEqual(decodeBundle(bundleWithManifest((m) => (m.notes = [note]))).manifest.notes, [note]);
  assertOffloadError(
    () => decodeBundle(bundleWithManifest((m) => (m.notes = [{ ...note, line: 'three' }]))),
    'INCOMPATIBLE_IMAGE',
    /invalid note 0 in manifest/,
  );
  assertOffloadError(
    () => decodeBundle(bundleWithManifest((m) => (m.notes = 'none'))),
    'INCOMPATIBLE_IMAGE',
    /invalid field 'notes' in manifest/,
  );
});

test('an image range outside the payload is INCOMPATIBLE_IMAGE naming the image', { timeout: 60_000 }, () => {
  const beyond = bundleWithManifest((m) => (m.images[1].offset = 1000));
  assertOffloadError(() => decodeBundle(beyond), 'INCOMPATIBLE_IMAGE', /image 1 lies outside the payload/);
  const tooLong = bundleWithManifest((m) => (m.images[0].size = 33));
  assertOffloadError(() => decodeBundle(tooLong), 'INCOMPATIBLE_IMAGE', /image 0/, /\[0, 33\) of a 32-byte payload/);
});

test('every truncation of a valid bundle fails with INCOMPATIBLE_IMAGE only', { timeout: 60_000 }, () => {
  const bytes = sampleBundle();
  for (let length = 0; length < bytes.length; length++) {
    assertOffloadError(() => decodeBundle(bytes.subarray(0, length)), 'INCOMPATIBLE_IMAGE');
  }
});

test('random byte flips in the header and manifest never throw anything but OffloadError', { timeout: 60_000 }, () => {
  const original = sampleBundle();
  const manifestEnd = HEADER_BYTES + new DataView(original.buffer).getUint32(12, true);
  const random = seededRandom(0x5eed);
  for (let round = 0; round < 3000; round++) {
    const bytes = original.slice();
    const flips = 1 + Math.floor(random() * 3);
    for (let f = 0; f < flips; f++) {
      bytes[Math.floor(random() * manifestEnd)]! ^= 1 << Math.floor(random() * 8);
    }
    try {
      decodeBundle(bytes);
    } catch (error) {
      assert.ok(OffloadError.is(error, 'INCOMPATIBLE_IMAGE'), `round ${round}: ${String(error)}`);
    }
  }
});

test('readBundleFile decodes a file and reports a missing one as NOT_FOUND', { timeout: 60_000 }, async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'offload-bundle-'));
  try {
    const file = path.join(dir, 'sample.offload');
    await writeFile(file, sampleBundle());
    const { manifest } = await readBundleFile(file);
    assert.equal(manifest.name, 'sample');
    const missing = path.join(dir, 'missing.offload');
    await assert.rejects(readBundleFile(missing), (error: unknown) => {
      assert.ok(OffloadError.is(error, 'NOT_FOUND'));
      assert.match(error.message, /missing\.offload/);
      return true;
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
