/**
 * Starting `offload proxy` as a child process on a free local port, for `offload launch`, the
 * tests and the benchmarks: resolves once the proxy prints the address it listens on.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { errors } from '../errors.js';
import { PROXY_NURSERY_FLAG, sizesNursery } from './nursery.js';

export interface SpawnedProxy {
  address: string;
  child: ChildProcess;
  /** Everything the proxy printed so far (stdout, and stderr unless inherited). */
  output(): string;
  /** SIGTERM (the proxy frees everything and exits), SIGKILL after `graceMs`; resolves on exit. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL; resolves on exit. */
  kill(): Promise<void>;
}

export interface SpawnProxyOptions {
  /** Node arguments that run the `offload` CLI, e.g. `[...process.execArgv, process.argv[1]]`. */
  cli: string[];
  /** The shared secret; handed over in a private file that is removed once the proxy has read it. */
  token: string;
  env?: NodeJS.ProcessEnv;
  /** Pass the proxy's stderr through to ours (default: collect it into output()). */
  inheritStderr?: boolean;
  /** More `offload proxy` options, e.g. `['--launch-timeout', '500']`. */
  args?: string[];
  /** Where to listen (default `127.0.0.1:0`: any free port). */
  listen?: string;
  /** A command node runs under, with its arguments (e.g. `['prlimit', '--nofile=200']`); default none. */
  launcher?: string[];
  timeoutMs?: number;
}

/**
 * `count` TCP ports on 127.0.0.1 free now (the OS picks them; they are closed again at once):
 * for proxies that must know each other's addresses before they start (their --peers).
 */
export async function freeLocalPorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<net.Server>((resolve, reject) => {
          const server = net.createServer();
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((server) => (server.address() as net.AddressInfo).port);
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
  return ports;
}

export async function spawnProxy(options: SpawnProxyOptions): Promise<SpawnedProxy> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'offload-proxy-'));
  const tokenFile = path.join(dir, 'token');
  await writeFile(tokenFile, options.token, { mode: 0o600 });
  // The proxy reads the file before it says it listens: the file can go either way then.
  return started(options, tokenFile).finally(() => rm(dir, { recursive: true, force: true }));
}

function started(options: SpawnProxyOptions, tokenFile: string): Promise<SpawnedProxy> {
  const listen = options.listen ?? '127.0.0.1:0';
  // --exit-with-parent: the proxy ends when its standard input closes, which the kernel does when
  // this process ends, however it ends (SIGKILL included), so no proxy outlives its parent.
  const [command, ...prefix] = [...(options.launcher ?? []), process.execPath];
  const env = options.env ?? process.env;
  const nursery = sizesNursery(options.cli, env.NODE_OPTIONS) ? [] : [PROXY_NURSERY_FLAG];
  const child = spawn(
    command,
    [
      ...prefix,
      ...nursery,
      ...options.cli,
      'proxy',
      '--listen',
      listen,
      '--token-file',
      tokenFile,
      '--exit-with-parent',
      ...(options.args ?? []),
    ],
    {
      // Not OFFLOAD_TRACE: the proxy would write the program's trace file over; its spans reach
      // the program's trace through its client instead.
      env: { ...env, OFFLOAD_TRACE: '' },
      stdio: ['pipe', 'pipe', options.inheritStderr ? 'inherit' : 'pipe'],
    },
  );
  // The pipe is only held open, never written; it must not keep this process alive by itself.
  (child.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const running = () => child.exitCode === null && child.signalCode === null;
  const stop = async (graceMs = 5000) => {
    if (running()) {
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      child.kill('SIGTERM');
      await exited;
      clearTimeout(timer);
    }
    await exited;
  };
  const kill = async () => {
    if (running()) child.kill('SIGKILL');
    await exited;
  };
  const timeoutMs = options.timeoutMs ?? 30_000;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(errors.timeout(`the proxy did not start within ${timeoutMs} ms:\n${output}`));
    }, timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(errors.deviceLost(`the proxy exited before listening (${signal ?? `status ${code}`}):\n${output}`));
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      output += `${line}\n`;
      const match = /^listening on (\S+)$/.exec(line);
      if (!match) return;
      clearTimeout(timer);
      resolve({ address: match[1]!, child, output: () => output, stop, kill });
    });
  });
}
