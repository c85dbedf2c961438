/**
 * Tenants, not connections: a proxy's tokens can be named (`--tenants`, ProxyServerOptions.
 * tenants), each a tenant, and the session quotas bound what all of one tenant's connections hold
 * together. Real proxies on 127.0.0.1 (in-process ProxyServer and an `offload proxy` child), real
 * clients; hostile tenants files are refused naming the line, never echoing a token.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Offload, OffloadError, type Runtime } from '../src/index.js';
import { MetricsEndpoint } from '../src/proxy/metrics-http.js';
import { ProxyMetrics } from '../src/proxy/metrics.js';
import { ProxyServer } from '../src/proxy/server.js';
import { MAX_TENANTS_FILE_BYTES, readTenants } from '../src/cli/token.js';
import { PROTOCOL_VERSION } from '../src/protocol/wire.js';
import { rejectsWith } from './conformance/suite.js';
import { startProxy } from './helpers/proxy.js';
import { RawClient } from './helpers/raw-client.js';

const KiB = 1024;
const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const newToken = (): string => randomBytes(24).toString('base64url');

const connect = (address: string, token: string): Promise<Runtime> =>
  Offload.init({ host: false, webgpu: false, proxies: [address], token });

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(condition(), what);
}

describe('tenants share their quotas across connections', { timeout: 60_000 }, () => {
  const alice = newToken();
  const bob = newToken();
  const unnamed = newToken();
  let server: ProxyServer;
  const runtimes: Runtime[] = [];

  before(async () => {
    server = await ProxyServer.start({
      listen: '127.0.0.1:0',
      token: unnamed,
      tenants: [
        { name: 'alice', token: alice },
        { name: 'bob', token: bob },
      ],
      runtime: { host: { threads: 1, memoryBytes: 32 * 1024 * KiB }, webgpu: false },
      quotas: { memoryBytes: 1024 * KiB, buffers: 8 },
    });
  });
  after(async () => {
    await Promise.all(runtimes.map((runtime) => runtime.shutdown()));
    await server.shutdown();
  });

  it("one tenant's many connections get one quota; another tenant is unaffected and never told of it", async () => {
    // Bob holds 768 KiB first: a figure that must never show in Alice's refusals.
    const bobs = await connect(server.address, bob);
    runtimes.push(bobs);
    const bobBuffer = await bobs.devices[0]!.alloc(768 * KiB);

    // Alice opens six connections, each allocating 256 KiB: four fit her 1 MiB, not six.
    const alices = await Promise.all(Array.from({ length: 6 }, () => connect(server.address, alice)));
    runtimes.push(...alices);
    const held = [];
    for (const runtime of alices.slice(0, 4)) held.push(await runtime.devices[0]!.alloc(256 * KiB));
    for (const runtime of alices.slice(4)) {
      const error = await rejectsWith(runtime.devices[0]!.alloc(256 * KiB), 'OUT_OF_MEMORY', /quota-memory/);
      assert.match(
        error.message,
        /would hold 1310720 bytes \(memoryBytes\) together; the proxy allows 1048576 per token/,
      );
      assert.doesNotMatch(error.message, /786432|bob|alice/, 'the message tells of another tenant');
      assert.ok(!error.message.includes(bob) && !error.message.includes(alice), 'the message shows a token');
    }
    // What is left to Alice's connections is what is left of her quota, not a device's worth each.
    const info = await alices[5]!.devices[0]!.memoryInfo();
    assert.equal(info.freeBytes, 0);

    // Bob's quota is his own: his 256 KiB more fits, beside Alice's full one.
    const more = await bobs.devices[0]!.alloc(256 * KiB);
    await rejectsWith(bobs.devices[0]!.alloc(1), 'OUT_OF_MEMORY', /quota-memory/);
    await more.free();
    await bobBuffer.free();

    // Freed on one connection, usable on another; a connection that leaves gives its share back.
    await held[0]!.free();
    const again = await alices[4]!.devices[0]!.alloc(256 * KiB);
    await rejectsWith(alices[5]!.devices[0]!.alloc(256 * KiB), 'OUT_OF_MEMORY', /quota-memory/);
    await alices[1]!.shutdown();
    await until(() => server.clients === 6, 'the leaving session ended');
    const last = await alices[5]!.devices[0]!.alloc(256 * KiB);
    await Promise.all([again.free(), last.free()]);
  });

  it('counts buffers per tenant too, and the --token-file token is a tenant of its own', async () => {
    const a = await connect(server.address, unnamed);
    const b = await connect(server.address, unnamed);
    runtimes.push(a, b);
    for (let i = 0; i < 4; i++) await a.devices[0]!.alloc(8);
    for (let i = 0; i < 4; i++) await b.devices[0]!.alloc(8);
    const error = await rejectsWith(b.devices[0]!.alloc(8), 'OUT_OF_MEMORY', /quota-buffers/);
    assert.match(error.message, /would hold 9 buffers \(buffers\) together/);
    // Bob (who freed his) is not held back by the unnamed tenant's buffers.
    const bobs = await connect(server.address, bob);
    runtimes.push(bobs);
    await bobs.devices[0]!.alloc(8);
  });

  it('refuses a wrong token, however close to a right one', async () => {
    for (const token of [newToken(), alice.slice(0, -1), `${alice}x`, 'alice']) {
      const raw = await RawClient.open(server.address);
      raw.send({ op: 'hello', id: 1, version: PROTOCOL_VERSION, token });
      const reply = await raw.reply(1);
      assert.equal((reply.error as { code: string }).code, 'UNAUTHORIZED');
      raw.close();
    }
  });

  it('refuses tenants that repeat a name or a token, or whose token is short, never echoing a token', async () => {
    const options = { listen: '127.0.0.1:0', runtime: { host: false as const, webgpu: false as const } };
    const cases: [{ name: string; token: string }[], RegExp][] = [
      [
        [
          { name: 'a', token: alice },
          { name: 'a', token: bob },
        ],
        /tenant a is named twice/,
      ],
      [
        [
          { name: 'a', token: alice },
          { name: 'b', token: alice },
        ],
        /tenant b has a token another tenant has too/,
      ],
      [[{ name: 'a', token: 'short-secret' }], /12 bytes; it must be at least 16/],
      [[], /needs a token or tenants/],
    ];
    for (const [tenants, message] of cases) {
      await assert.rejects(ProxyServer.start({ ...options, tenants }), (error: unknown) => {
        assert.ok(error instanceof OffloadError);
        assert.equal(error.code, 'INVALID_ARGUMENT');
        assert.match(error.message, message);
        assert.ok(![alice, bob, 'short-secret'].some((token) => error.message.includes(token)), error.message);
        return true;
      });
    }
  });
});

describe('metrics and tenants', { timeout: 60_000 }, () => {
  it("shows a session's tenant name only with --metrics-names, and never a token", async () => {
    const alice = newToken();
    for (const names of [false, true]) {
      const server = await ProxyServer.start({
        listen: '127.0.0.1:0',
        tenants: [{ name: 'alice', token: alice }],
        runtime: { host: { threads: 1, memoryBytes: 8 * 1024 * KiB }, webgpu: false },
        metrics: new ProxyMetrics({ names }),
      });
      const endpoint = await MetricsEndpoint.start(server.metrics, { listen: '127.0.0.1:0' });
      const runtime = await connect(server.address, alice);
      try {
        await runtime.devices[0]!.alloc(64);
        const state = (await (await fetch(`${endpoint.url}/state`)).json()) as { tenantsHeld: { name?: string }[] };
        const text = await (await fetch(`${endpoint.url}/metrics`)).text();
        assert.equal(state.tenantsHeld.length, 1);
        assert.ok(!text.includes(alice) && !JSON.stringify(state).includes(alice), 'a token shows');
        if (names) {
          assert.equal(state.tenantsHeld[0]!.name, 'alice');
          assert.match(text, /offload_tenant_held\{tenant="1",client="127\.0\.0\.1:\d+",name="alice"/);
        } else {
          assert.equal(state.tenantsHeld[0]!.name, undefined);
          assert.doesNotMatch(text, /alice/);
          assert.match(text, /offload_tenant_held\{tenant="1",resource=/);
        }
      } finally {
        await runtime.shutdown();
        await endpoint.close();
        await server.shutdown();
      }
    }
  });
});

describe('offload proxy --tenants <file>', { timeout: 60_000 }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-tenants-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const write = async (name: string, text: string, mode = 0o600): Promise<string> => {
    const file = path.join(dir, name);
    await writeFile(file, text, { mode });
    return file;
  };

  it('refuses hostile files with INVALID_ARGUMENT naming the line, never the token', async () => {
    const secret = newToken();
    const other = newToken();
    const cases: [string, string, RegExp][] = [
      ['colon', `# tenants\n\nalice:${secret}\nbob ${other}\n`, /line 4: expected name:token/],
      ['names', `alice:${secret}\nalice:${other}\n`, /line 2: tenant alice is named on line 1 too/],
      ['tokens', `alice:${secret}\nbob:${secret}\n`, /line 2: tenant bob has the same token as line 1/],
      [
        'short',
        `alice:${secret}\nbob:0123456789\n`,
        /line 2: the token of tenant bob is 10 bytes; it must be at least 16/,
      ],
      ['badname', `alice:${secret}\n../etc:${other}\n`, /line 2: a tenant's name is 1-64 letters/],
      ['empty', '# nobody\n\n', /names no tenant/],
    ];
    for (const [name, text, message] of cases) {
      const file = await write(name, text);
      await assert.rejects(readTenants(file), (error: unknown) => {
        assert.ok(error instanceof OffloadError, String(error));
        assert.equal(error.code, 'INVALID_ARGUMENT');
        assert.match(error.message, message);
        assert.ok(!error.message.includes(secret) && !error.message.includes(other), `${name}: ${error.message}`);
        return true;
      });
    }
    const open = await write('open', `alice:${secret}\n`, 0o644);
    await rejectsWith(
      readTenants(open),
      'INVALID_ARGUMENT',
      /can be read by others \(mode 644\); make it private: chmod 600/,
    );
    const huge = await write('huge', `alice:${secret}\n`);
    await truncate(huge, MAX_TENANTS_FILE_BYTES + 1);
    await rejectsWith(readTenants(huge), 'INVALID_ARGUMENT', /at most 1048576 are read/);
    await rejectsWith(readTenants(path.join(dir, 'missing')), 'INVALID_ARGUMENT', /cannot read the tenants file/);
  });

  it('a real proxy refuses a bad file before listening, naming the line', async () => {
    const secret = newToken();
    const file = await write('cli-short', `alice:${secret}\nbob:tiny\n`);
    const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        ['--import', 'tsx', main, 'proxy', '--listen', '127.0.0.1:0', '--tenants', file],
        { timeout: 30_000, env: { ...process.env, OFFLOAD_TOKEN: '' } },
        (_error, _stdout, stderr) => resolve({ code: child.exitCode, stderr }),
      );
    });
    assert.notEqual(code, 0);
    assert.match(stderr, /line 2: the token of tenant bob is 4 bytes/);
    assert.ok(!stderr.includes(secret) && !stderr.includes('tiny'), stderr);
  });

  it('a real proxy serves each tenant of the file within its own quota, and its --token-file token too', async () => {
    const alice = newToken();
    const bob = newToken();
    const file = await write('good', `# name:token\nalice:${alice}\n  bob : ${bob}  \n`);
    const proxy = await startProxy({ threads: 1, memory: '16M', args: ['--tenants', file, '--quota-buffers', '2'] });
    const runtimes: Runtime[] = [];
    try {
      const [a1, a2, b, unnamed] = await Promise.all(
        [alice, alice, bob, proxy.token].map((t) => connect(proxy.address, t)),
      );
      runtimes.push(a1!, a2!, b!, unnamed!);
      await a1!.devices[0]!.alloc(8);
      await a2!.devices[0]!.alloc(8);
      await rejectsWith(a1!.devices[0]!.alloc(8), 'OUT_OF_MEMORY', /3 buffers .* per token.*--quota-buffers/);
      await rejectsWith(a2!.devices[0]!.alloc(8), 'OUT_OF_MEMORY', /--quota-buffers/);
      for (const runtime of [b!, unnamed!]) {
        await runtime.devices[0]!.alloc(8);
        await runtime.devices[0]!.alloc(8);
      }
      await rejectsWith(connect(proxy.address, newToken()), 'UNAUTHORIZED', /wrong token/);
    } finally {
      await Promise.all(runtimes.map((runtime) => runtime.shutdown()));
      await proxy.stop();
    }
  });
});
