/** Real `offload proxy` child processes on 127.0.0.1, for remote-device tests. */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const main = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

export interface ProxyProcess {
  address: string;
  token: string;
  child: ChildProcess;
  /** Everything the proxy printed on stdout and stderr so far. */
  output(): string;
  /** SIGTERM, then waits for the exit. */
  stop(): Promise<void>;
  /** SIGKILL, then waits for the exit. */
  kill(): Promise<void>;
}

export interface ProxyOptions {
  token?: string;
  threads?: number;
  memory?: string;
}

export async function startProxy(options: ProxyOptions = {}): Promise<ProxyProcess> {
  const token = options.token ?? randomBytes(16).toString('hex');
  const tokenFile = path.join(mkdtempSync(path.join(tmpdir(), 'offload-proxy-')), 'token');
  writeFileSync(tokenFile, token);
  const child = spawn(process.execPath, ['--import', 'tsx', main, 'proxy', '--listen', '127.0.0.1:0', '--token-file', tokenFile], {
    env: { ...process.env, OFFLOAD_HOST_THREADS: String(options.threads ?? 2), OFFLOAD_HOST_MEMORY: options.memory ?? '256M', OFFLOAD_PROXIES: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const address = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`proxy did not start in 30 s:\n${output}`)), 30_000);
    child.once('exit', (code) => reject(new Error(`proxy exited with ${code} before listening:\n${output}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      output += `${line}\n`;
      const match = /^listening on (\S+)$/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]!);
      }
    });
  });
  const signal = async (name: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(name);
    await exited;
  };
  return { address, token, child, output: () => output, stop: () => signal('SIGTERM'), kill: () => signal('SIGKILL') };
}
