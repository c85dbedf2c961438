/**
 * The baselines of the remote suite: the same transfers and round trips over a bare TCP socket
 * to another Node process (bench/raw-tcp-peer.js), with no protocol, framing or device behind.
 * With `pollUs`, both ends keep their event loop turning that long after each message, as the
 * runtime's TCP transport does (src/transport/poll-window.ts): the like-for-like baseline.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { createInterface } from 'node:readline';

/** Keeps this thread's event loop turning for `micros` from now (the runtime's technique, written out). */
let pollUntil = 0;
let turning = false;
function turn(): void {
  if (performance.now() < pollUntil) setImmediate(turn);
  else turning = false;
}
function pollFor(micros: number): void {
  if (micros <= 0) return;
  pollUntil = performance.now() + micros / 1000;
  if (turning) return;
  turning = true;
  setImmediate(turn);
}

export class RawTcpPeer {
  private waiting: { bytes: number; resolve: () => void } | undefined;
  private received = 0;
  /** Where a read's bytes go, as the runtime's read puts them into the caller's array. */
  private into: Uint8Array | undefined;

  private constructor(
    private readonly child: ChildProcess,
    private readonly socket: net.Socket,
    private readonly pollUs: number,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      pollFor(pollUs);
      this.into?.set(chunk, this.received);
      this.received += chunk.length;
      if (this.waiting && this.received >= this.waiting.bytes) {
        const { resolve } = this.waiting;
        this.waiting = undefined;
        this.into = undefined;
        this.received = 0;
        resolve();
      }
    });
  }

  static async start(options: { pollUs?: number } = {}): Promise<RawTcpPeer> {
    const pollUs = options.pollUs ?? 0;
    const child = spawn(process.execPath, [new URL('./raw-tcp-peer.js', import.meta.url).pathname, String(pollUs)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const port = await new Promise<number>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`the raw TCP peer exited (${code})`)));
      createInterface({ input: child.stdout }).once('line', (line) => resolve(Number(line.split(':').pop())));
    });
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    return new RawTcpPeer(child, socket, pollUs);
  }

  /** The peer process's id (to pin it beside the proxy it is the baseline of). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  private expect(bytes: number): Promise<void> {
    return new Promise((resolve) => (this.waiting = { bytes, resolve }));
  }

  /** One byte there and back. */
  ping(): Promise<void> {
    const reply = this.expect(1);
    this.socket.write('P');
    pollFor(this.pollUs);
    return reply;
  }

  /** Streams `data` to the peer (in 1 MiB writes, as the runtime chunks) and waits for its ack. */
  async write(data: Uint8Array): Promise<void> {
    const ack = this.expect(1);
    const header = Buffer.alloc(5);
    header.write('W');
    header.writeUInt32LE(data.byteLength, 1);
    this.socket.write(header);
    for (let sent = 0; sent < data.byteLength; sent += 1 << 20) {
      if (!this.socket.write(data.subarray(sent, Math.min(sent + (1 << 20), data.byteLength))))
        await new Promise((resolve) => this.socket.once('drain', resolve));
    }
    await ack;
  }

  /** Has the peer stream `into.byteLength` bytes here, into `into`. */
  read(into: Uint8Array): Promise<void> {
    const bytes = into.byteLength;
    const done = this.expect(bytes);
    this.into = into;
    const header = Buffer.alloc(5);
    header.write('R');
    header.writeUInt32LE(bytes, 1);
    this.socket.write(header);
    return done;
  }

  async close(): Promise<void> {
    this.socket.destroy();
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill('SIGTERM');
    await exited;
  }
}
