// The wire protocol is a type (src/protocol/messages.ts): what a client encodes and what the
// proxy decodes are members of one discriminated union, so a misspelt op or field is a compile
// error, not a PROTOCOL error at run time.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { decodeRequest } from '../src/protocol/decode-request.js';
import { typeCheck } from './helpers/typecheck.js';

const src = resolve(import.meta.dirname, '..', 'src');

describe('the typed protocol', { timeout: 120_000 }, () => {
  it('does not compile a request with a misspelt op or field, and compiles the right ones', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'offload-protocol-'));
    try {
      await writeFile(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
      const preamble = `import type { RemoteConnection } from '${src}/plugins/remote/connection.js';
import type { ProxyConnection } from '${src}/proxy/connection.js';
declare const client: RemoteConnection;
declare const proxy: ProxyConnection;
`;
      await writeFile(
        join(dir, 'good.ts'),
        `${preamble}void client.request({ op: 'launch', queue: 1, image: 1, kernel: 'saxpy', teams: [2, 2], threads: 1, args: [1, { i64: '2' }, { buffer: 3 }] });
void client.request({ op: 'write', queue: 1, buffer: 2, offset: 0, bytes: 4, stream: true });
client.post({ op: 'chunk', id: 1, offset: 0 });
proxy.send({ op: 'data', id: 1, offset: 0 });
`,
      );
      await writeFile(
        join(dir, 'bad.ts'),
        `${preamble}void client.request({ op: 'lanch', queue: 1 });
void client.request({ op: 'free', bufer: 1 });
void client.request({ op: 'write', queue: 1, buffer: 2, offset: 0, bytes: '4' });
client.post({ op: 'chunk', id: 1, ofset: 0 });
proxy.send({ op: 'redy', id: 1 });
`,
      );
      const [good, bad] = await Promise.all([typeCheck(dir, 'good.ts'), typeCheck(dir, 'bad.ts')]);
      assert.deepEqual(good, []);
      const lines = bad.map((line) => Number(/^bad\.ts\((\d+),/.exec(line)?.[1]));
      // Lines 5 to 9 of bad.ts are the five wrong frames: each is an error of its own.
      assert.deepEqual(
        [...new Set(lines)].sort((a, b) => a - b),
        [5, 6, 7, 8, 9],
        bad.join('\n'),
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('decodes a request into its typed member, and refuses a field of the wrong type with PROTOCOL', () => {
    const launch = decodeRequest({
      meta: {
        op: 'launch',
        id: 7,
        queue: 1,
        image: 2,
        kernel: 'k',
        teams: [2, 3],
        threads: 4,
        args: [1.5, { i64: '-3' }, { buffer: 5, offset: 8 }],
      },
      payload: new Uint8Array(0),
    });
    assert.equal(launch.op, 'launch');
    if (launch.op !== 'launch') return;
    assert.deepEqual(
      [launch.id, launch.queue, launch.image, launch.kernel, launch.teams, launch.threads, launch.args],
      [7, 1, 2, 'k', [2, 3], 4, [1.5, { i64: '-3' }, { buffer: 5, offset: 8 }]],
    );
    assert.throws(
      () =>
        decodeRequest({
          meta: { op: 'write', id: 1, queue: 1, buffer: '2', offset: 0, bytes: 4 },
          payload: new Uint8Array(0),
        }),
      { code: 'PROTOCOL', message: /malformed 'write' frame: field 'buffer'/ },
    );
    assert.throws(() => decodeRequest({ meta: { op: 'lanch', id: 1 }, payload: new Uint8Array(0) }), {
      code: 'PROTOCOL',
      message: /unknown op 'lanch'/,
    });
  });
});
