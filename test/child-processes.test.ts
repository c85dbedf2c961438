/**
 * Proxies started by `offload demo --proxies`, `bench --proxies` and `launch` end with the command
 * that started them, however it ends: SIGINT, SIGTERM, or SIGKILL (no handler runs then; the
 * proxy sees its standard input close).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

/** Whether something accepts connections on `address` now. */
function listening(address: string): Promise<boolean> {
  const [host, port] = address.split(':');
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), host, () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function stillListening(addresses: string[], withinMs: number): Promise<string[]> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const alive = (
      await Promise.all(addresses.map(async (address) => ((await listening(address)) ? [address] : [])))
    ).flat();
    if (alive.length === 0 || Date.now() > deadline) return alive;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Runs `offload demo --proxies 2`, sends `signal` once both proxies listen, and returns their addresses. */
async function signalledDemo(signal: NodeJS.Signals): Promise<{ addresses: string[]; exit: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', main, 'demo', '--proxies', '2', '--size', '4096'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, OFFLOAD_HOST_THREADS: '1', OFFLOAD_WEBGPU: 'off', OFFLOAD_PROXIES: '' },
  });
  const exited = new Promise<string>((resolve) => child.once('exit', (code, sig) => resolve(sig ?? `status ${code}`)));
  const addresses: string[] = [];
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      addresses.splice(0, addresses.length, ...[...output.matchAll(/^proxy +(\S+)/gm)].map((match) => match[1]!));
      if (addresses.length === 2) resolve();
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    void exited.then(() => reject(new Error(`demo ended before its proxies listened:\n${output}`)));
  });
  assert.deepEqual(await stillListening(addresses, 0), addresses, 'both proxies listen before the signal');
  child.kill(signal);
  return { addresses, exit: await exited };
}

describe('child processes end with their parent', { timeout: 180_000 }, () => {
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGKILL'] as const) {
    it(`leaves no proxy of 'offload demo --proxies 2' listening after ${signal}`, async () => {
      const { addresses, exit } = await signalledDemo(signal);
      assert.equal(exit, signal);
      assert.deepEqual(
        await stillListening(addresses, 10_000),
        [],
        `proxies still listening 10 s after ${signal} to their parent`,
      );
    });
  }
});
