// The wire between client and proxy: TLS (real `offload proxy` processes with the test
// certificates of test/fixtures/tls), what a proxy refuses to start with (a public address in
// clear, a token file others can read or one too short), and what a listener on the path sees.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Offload } from '../src/index.js';
import { rejectsWith } from './conformance/suite.js';
import { checkServed, startProxy, type ProxyProcess } from './helpers/proxy.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const main = path.join(root, 'src/cli/main.ts');
const certs = path.join(root, 'test/fixtures/tls');
const cert = path.join(certs, 'cert.pem');
const key = path.join(certs, 'key.pem');

/** Runs `offload args`; its status and what it printed. */
function offload(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', main, ...args],
      { cwd: root, env: { ...process.env, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1, stdout, stderr });
      },
    );
  });
}

/** A relay between a client and `target` that keeps every byte the client sends: what anyone on the path sees. */
async function sniffingRelay(target: string): Promise<{ address: string; seen(): Buffer; close(): Promise<void> }> {
  const [host, port] = target.replace(/^tls:\/\//, '').split(':') as [string, string];
  const captured: Buffer[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect({ host, port: Number(port) });
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => (socket === client ? upstream : client).destroy());
    }
    client.on('data', (chunk: Buffer) => captured.push(chunk));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    seen: () => Buffer.concat(captured),
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

describe('a proxy over TLS', { timeout: 180_000 }, () => {
  let proxy: ProxyProcess;
  let ca: string;
  before(async () => {
    ca = await readFile(cert, 'utf8');
    proxy = await startProxy({ threads: 1, args: ['--tls-cert', cert, '--tls-key', key] });
  });
  after(async () => {
    await proxy.stop();
  });

  it('says it listens on a tls:// address and serves a client that trusts its CA', async () => {
    assert.match(proxy.address, /^tls:\/\/127\.0\.0\.1:\d+$/);
    await checkServed({ host: false, proxies: [proxy.address], token: proxy.token, tls: { ca } });
  });

  it('serves the offload command with OFFLOAD_TLS_CA, even to an address written without tls://', async () => {
    const plain = proxy.address.replace('tls://', '');
    const { code, stdout, stderr } = await offload(['devices', '--json', '--proxies', plain], {
      OFFLOAD_TLS_CA: cert,
      OFFLOAD_TOKEN: proxy.token,
      OFFLOAD_WEBGPU: 'off',
    });
    assert.equal(code, 0, stderr);
    assert.deepEqual(
      (JSON.parse(stdout) as { plugin: string }[]).map((device) => device.plugin),
      ['host', 'remote'],
    );
  });

  it('is refused with UNAUTHORIZED by a client that trusts another CA, or only the system CAs', async () => {
    const other = await readFile(path.join(certs, 'other-cert.pem'), 'utf8');
    await rejectsWith(
      Offload.init({ host: false, proxies: [proxy.address], token: proxy.token, tls: { ca: other } }),
      'UNAUTHORIZED',
      /TLS connection .* failed.*OFFLOAD_TLS_CA/,
    );
    await rejectsWith(
      Offload.init({ host: false, proxies: [proxy.address], token: proxy.token }),
      'UNAUTHORIZED',
      /TLS connection/,
    );
  });

  it('drops a client that speaks plain frames to it (DEVICE_LOST, at once) and serves the next', async () => {
    const plain = proxy.address.replace('tls://', '');
    const started = Date.now();
    await rejectsWith(Offload.init({ host: false, proxies: [plain], token: proxy.token }), 'DEVICE_LOST');
    assert.ok(Date.now() - started < 5000, `refused after ${Date.now() - started} ms`);
    await checkServed({ host: false, proxies: [proxy.address], token: proxy.token, tls: { ca } });
  });

  it('shows nothing of the token or the data to a listener on the path, where clear text shows both', async () => {
    const secret = new Int32Array(16);
    const clear = await startProxy({ threads: 1 });
    try {
      for (const [target, tls] of [
        [clear.address, undefined],
        [proxy.address, { ca }],
      ] as const) {
        const relay = await sniffingRelay(target);
        try {
          const address = tls ? `tls://${relay.address}` : relay.address;
          const runtime = await Offload.init({
            host: false,
            proxies: [address],
            token: target === proxy.address ? proxy.token : clear.token,
            tls,
          });
          const buffer = await runtime.devices[0]!.alloc(64);
          secret.fill(0x5ec7e7);
          await runtime.devices[0]!.queue().write(buffer, secret).done;
          await runtime.shutdown();
          const seen = relay.seen();
          const token = target === proxy.address ? proxy.token : clear.token;
          const pattern = Buffer.from(secret.buffer);
          if (tls) {
            assert.equal(seen.includes(token), false, 'the token crossed in clear');
            assert.equal(seen.includes(pattern), false, 'the data crossed in clear');
          } else {
            assert.ok(
              seen.includes(token) && seen.includes(pattern),
              'the relay sees a clear connection (or this test proves nothing)',
            );
          }
        } finally {
          await relay.close();
        }
      }
    } finally {
      await clear.stop();
    }
  });
});

describe('what a proxy refuses to start with', { timeout: 120_000 }, () => {
  let dir: string;
  let tokenFile: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'offload-tls-'));
    tokenFile = path.join(dir, 'token');
    await writeFile(tokenFile, 'a-token-of-thirty-two-characters\n', { mode: 0o600 });
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('a non-loopback address without TLS, unless --insecure', async () => {
    const refused = await offload(['proxy', '--listen', '0.0.0.0:0', '--token-file', tokenFile]);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(
      refused.stderr,
      /without TLS would send the token and every byte in clear.*--tls-cert and --tls-key, or --insecure/,
    );
    const insecure = await startProxy({ threads: 1, listen: '0.0.0.0:0', args: ['--insecure'] });
    try {
      assert.match(insecure.output(), /WITHOUT TLS \(--insecure\)/);
      const port = insecure.address.split(':').pop();
      await checkServed({ host: false, proxies: [`127.0.0.1:${port}`], token: insecure.token });
    } finally {
      await insecure.stop();
    }
  });

  it('a token file others can read, or a token shorter than 16 bytes, saying how to make a good one', async () => {
    const readable = path.join(dir, 'readable');
    await writeFile(readable, 'a-token-of-thirty-two-characters\n', { mode: 0o644 });
    const open = await offload(['proxy', '--listen', '127.0.0.1:0', '--token-file', readable]);
    assert.equal(open.code, 1);
    assert.match(open.stderr, /INVALID_ARGUMENT.*can be read by others \(mode 644\); make it private: chmod 600/);
    const short = path.join(dir, 'short');
    await writeFile(short, 'x\n', { mode: 0o600 });
    const guessable = await offload(['proxy', '--listen', '127.0.0.1:0', '--token-file', short]);
    assert.equal(guessable.code, 1);
    assert.match(
      guessable.stderr,
      /INVALID_ARGUMENT.*token is 1 bytes; it must be at least 16 \(make one with: head -c 32 \/dev\/urandom/,
    );
  });

  it('half a certificate, or a key file that is not PEM', async () => {
    const half = await offload(['proxy', '--listen', '127.0.0.1:0', '--token-file', tokenFile, '--tls-cert', cert]);
    assert.equal(half.code, 2);
    assert.match(half.stderr, /--tls-cert and --tls-key go together/);
    const notPem = await offload([
      'proxy',
      '--listen',
      '127.0.0.1:0',
      '--token-file',
      tokenFile,
      '--tls-cert',
      cert,
      '--tls-key',
      tokenFile,
    ]);
    assert.equal(notPem.code, 1);
    assert.match(notPem.stderr, /INVALID_ARGUMENT.*the key file .* is not PEM/);
  });
});
