/**
 * Asyncify for linked C, C++ and Rust modules that call the device's barrier: binaryen's pass in
 * a worker (asyncify-worker.js), as the AssemblyScript compiler's worker runs it for its modules.
 */
import { Worker } from 'node:worker_threads';
import { errors } from '../errors.js';
import { BARRIER_IMPORT, DEVICE_IMPORT_MODULE } from '../image/wasm-abi.js';

const WORKER = new URL('./asyncify-worker.js', import.meta.url);

/**
 * `wasm` instrumented at the barrier import (optimized again when `optimize`).
 * @throws (rejects) OffloadError UNSUPPORTED when binaryen (with the AssemblyScript compiler, an
 *   optional dependency) is not installed; INVALID_ARGUMENT when the pass fails.
 */
export function runAsyncify(wasm: Uint8Array, optimize: boolean): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER, {
      workerData: { wasm, barrierImport: { module: DEVICE_IMPORT_MODULE, name: BARRIER_IMPORT }, optimize },
      execArgv: [],
      stdout: true,
      stderr: true,
    });
    worker.stdout.resume();
    worker.stderr.resume();
    let answered = false;
    worker.once('message', (answer: { wasm?: Uint8Array; error?: string; missing?: boolean }) => {
      answered = true;
      void worker.terminate();
      if (answer.wasm !== undefined) resolve(answer.wasm);
      else if (answer.missing === true) {
        reject(
          errors.unsupported(
            'a kernel that calls barrier() is built with binaryen, which comes with the AssemblyScript compiler: npm install assemblyscript@0.28.20',
          ),
        );
      } else reject(errors.invalidArgument(`asyncify (for barrier()) failed: ${answer.error ?? 'no reason given'}`));
    });
    worker.once('error', (cause) => {
      answered = true;
      reject(errors.invalidArgument(`asyncify (for barrier()) failed: ${cause.message}`));
    });
    worker.once('exit', (code) => {
      if (!answered)
        reject(errors.invalidArgument(`asyncify (for barrier()) ended with exit code ${code} and no answer`));
    });
  });
}
