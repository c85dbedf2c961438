// Proxies a program can do without (`optionalProxies`, `host:port?` in OFFLOAD_PROXIES), and
// connect errors that say what is at the other end: nothing (is `offload proxy` running?), an
// HTTP server, a TLS proxy reached in clear text and a clear-text proxy reached over TLS.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Offload } from '../src/index.js';
import { freeLocalPorts } from '../src/proxy/spawn.js';
import { FrameDecoder } from '../src/transport/frame.js';
import { rejectsWith } from './conformance/suite.js';
import { startProxy, type ProxyProcess } from './helpers/proxy.js';

const local = { host: false as const, webgpu: false as const };
const certs = fileURLToPath(new URL('./fixtures/tls/', import.meta.url));

/** A server that accepts connections and never says a word. */
async function silentServer(): Promise<{ address: string; close(): void }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => sockets.add(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

/** Runs `body` with what it writes on stderr going to `lines` instead. */
async function capturingStderr<T>(lines: string[], body: () => Promise<T>): Promise<T> {
  const stderr = process.stderr;
  const original = Object.getOwnPropertyDescriptor(stderr, 'write');
  Object.defineProperty(stderr, 'write', {
    configurable: true,
    writable: true,
    value: (line: string) => lines.push(line) > 0,
  });
  try {
    return await body();
  } finally {
    if (original) Object.defineProperty(stderr, 'write', original);
    else delete (stderr as { write?: unknown }).write;
  }
}

describe('optional proxies', { timeout: 120_000 }, () => {
  let proxy: ProxyProcess;
  let nobody: string;
  before(async () => {
    proxy = await startProxy({ threads: 1 });
    nobody = `127.0.0.1:${(await freeLocalPorts(1))[0]!}`;
  });
  after(() => proxy?.kill());

  it('goes on without an unreachable proxy, saying so in diagnostics', async () => {
    const warned: string[] = [];
    const rt = await capturingStderr(warned, () =>
      Offload.init({ ...local, proxies: [nobody, proxy.address], token: proxy.token, optionalProxies: true }),
    );
    try {
      assert.deepEqual(
        rt.devices.map((device) => device.info.plugin),
        ['remote'],
      );
      assert.equal(rt.diagnostics.length, 1);
      assert.match(rt.diagnostics[0]!, new RegExp(`optional proxy ${nobody} left out: cannot reach ${nobody}`));
      assert.deepEqual(warned, [`offload-ts: ${rt.diagnostics[0]}\n`]);
      // A context is made over the proxies init found: its device ids are the runtime's.
      const context = await rt.createContext();
      assert.equal(context.devices.length, rt.devices.length);
      await context.shutdown();
    } finally {
      await rt.shutdown();
    }
  });

  it('goes on without a proxy that accepts but does not answer within connectTimeoutMs', async () => {
    const silent = await silentServer();
    try {
      const started = Date.now();
      await using rt = await capturingStderr([], () =>
        Offload.init({
          ...local,
          proxies: [silent.address],
          token: proxy.token,
          optionalProxies: true,
          connectTimeoutMs: 300,
        }),
      );
      assert.ok(Date.now() - started < 5000);
      assert.equal(rt.devices.length, 0);
      assert.match(rt.diagnostics[0]!, /did not answer within 300 ms \(connectTimeoutMs\)/);
    } finally {
      silent.close();
    }
  });

  it('takes `host:port?` in OFFLOAD_PROXIES as optional, and says so once on stderr', async () => {
    const script = `
      import { Offload } from ${JSON.stringify(new URL('../src/index.ts', import.meta.url).href)};
      const rt = await Offload.init({ host: false, webgpu: false });
      console.log(JSON.stringify({ devices: rt.devices.length, diagnostics: rt.diagnostics }));
      await rt.shutdown();
    `;
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      { env: { ...process.env, OFFLOAD_PROXIES: `${nobody}?,${proxy.address}`, OFFLOAD_TOKEN: proxy.token } },
    );
    const report = JSON.parse(stdout) as { devices: number; diagnostics: string[] };
    assert.equal(report.devices, 1);
    assert.equal(report.diagnostics.length, 1);
    assert.equal(stderr.split('\n').filter((line) => line.includes(`optional proxy ${nobody} left out`)).length, 1);
  });

  it('still fails init for a proxy that is not optional, asking whether offload proxy runs there', async () => {
    await rejectsWith(
      Offload.init({ ...local, proxies: [`${nobody}`, `${proxy.address}?`], token: proxy.token }),
      'DEVICE_LOST',
      new RegExp(`ECONNREFUSED.*is \`offload proxy\` running at ${nobody.replace(/\./g, '\\.')}\\?`),
    );
  });

  it('still fails init for an optional proxy that refuses the token', async () => {
    await rejectsWith(
      Offload.init({ ...local, proxies: [proxy.address], token: 'not-the-token-at-all', optionalProxies: true }),
      'UNAUTHORIZED',
    );
  });

  it('refuses an optionalProxies that is not a boolean', async () => {
    await rejectsWith(
      Offload.init({ ...local, optionalProxies: 'yes' as never }),
      'INVALID_ARGUMENT',
      /options\.optionalProxies must be a boolean/,
    );
  });
});

describe('a port that answers in another protocol', { timeout: 120_000 }, () => {
  it('names an HTTP server', async () => {
    const server = http.createServer((_request, response) => response.end('hello'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const address = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
      await rejectsWith(
        Offload.init({ ...local, proxies: [address], token: 'x'.repeat(16), connectTimeoutMs: 5000 }),
        'DEVICE_LOST',
        /bad frame magic 0x50545448 .*the peer answers in HTTP: an HTTP server listens there/,
      );
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('names a TLS proxy reached in clear text, and a clear-text proxy reached over TLS', async () => {
    const cert = `${certs}cert.pem`;
    const secure = await startProxy({ threads: 1, args: ['--tls-cert', cert, '--tls-key', `${certs}key.pem`] });
    const clear = await startProxy({ threads: 1 });
    try {
      const bare = secure.address.replace('tls://', '');
      await rejectsWith(
        Offload.init({ ...local, proxies: [bare], token: secure.token }),
        'DEVICE_LOST',
        new RegExp(`closed the connection without answering the hello.*reached as tls://${bare.replace(/\./g, '\\.')}`),
      );
      await rejectsWith(
        Offload.init({
          ...local,
          proxies: [`tls://${clear.address}`],
          token: clear.token,
          tls: { ca: readFileSync(cert, 'utf8') },
        }),
        'PROTOCOL',
        /does not answer in TLS .*a proxy started without --tls-cert is reached as host:port/,
      );
    } finally {
      await secure.kill();
      await clear.kill();
    }
  });

  it('names HTTP, TLS and SSH peers from the first bytes where a frame was expected', () => {
    const decode = (text: string | number[]) => () =>
      new FrameDecoder().push(typeof text === 'string' ? new TextEncoder().encode(text) : Uint8Array.from(text));
    assert.throws(
      decode('GET / HTTP/1.1\r\nHost: x\r\n\r\n'),
      /bad frame magic .*: the peer speaks HTTP: an HTTP client/,
    );
    assert.throws(decode('HTTP/1.1 400 Bad Request\r\n\r\n'), /0x50545448 .*the peer answers in HTTP/);
    assert.throws(decode([0x16, 0x03, 0x01, 0x02, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), /the peer speaks TLS/);
    assert.throws(decode([0x15, 0x03, 0x03, 0, 2, 2, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0]), /the peer speaks TLS/);
    assert.throws(decode('SSH-2.0-OpenSSH_9.2\r\n........'), /an SSH server/);
    assert.throws(decode('0123456789abcdef'), (error: Error) => !/the peer/.test(error.message));
  });
});
