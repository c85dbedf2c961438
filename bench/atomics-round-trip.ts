/**
 * The baseline of launch round trips: one worker, one SharedArrayBuffer, nothing else. The
 * main thread bumps a request word and notifies; the worker, asleep in Atomics.wait, echoes it
 * into a reply word and notifies; the main thread sees the reply, optionally by polling first.
 */
import { Worker } from 'node:worker_threads';

const REQUEST = 0;
const REPLY = 1;
const STOP = -1;

export class AtomicsRoundTrip {
  private readonly words = new Int32Array(new SharedArrayBuffer(8));
  private readonly worker = new Worker(new URL('./atomics-echo-worker.js', import.meta.url), {
    workerData: this.words.buffer,
  });
  private sequence = 0;

  /**
   * One round trip. The main thread polls the reply word for `pollMicros` (the runtime's
   * OFFLOAD_HOST_SPIN_US technique; 0 for none), then sleeps in Atomics.waitAsync.
   */
  async once(pollMicros: number): Promise<void> {
    const request = ++this.sequence;
    const previous = Atomics.load(this.words, REPLY);
    Atomics.store(this.words, REQUEST, request);
    Atomics.notify(this.words, REQUEST);
    const deadline = performance.now() + pollMicros / 1000;
    while (pollMicros > 0 && performance.now() < deadline) {
      if (Atomics.load(this.words, REPLY) === request) return;
    }
    while (Atomics.load(this.words, REPLY) !== request) {
      const wait = Atomics.waitAsync(this.words, REPLY, previous);
      if (wait.async) await wait.value;
    }
  }

  async close(): Promise<void> {
    Atomics.store(this.words, REQUEST, STOP);
    Atomics.notify(this.words, REQUEST);
    await this.worker.terminate();
  }
}
