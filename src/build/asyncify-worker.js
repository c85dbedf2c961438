/**
 * Runs asyncify.js over one linked module in a worker thread started without the parent's loader
 * hooks (compiler-worker.js says why), for asyncify-job.ts. workerData: { wasm, barrierImport,
 * optimize }; the answer: { wasm } or { error }.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { asyncifyBarriers } from './asyncify.js';

// In a variable, so that tsc (allowJs) does not load the compiler's declarations.
const BINARYEN = 'assemblyscript/binaryen';

try {
  const { default: binaryen } = await import(BINARYEN);
  const wasm = asyncifyBarriers(binaryen, workerData.wasm, workerData.barrierImport, workerData.optimize);
  parentPort.postMessage({ wasm });
} catch (error) {
  parentPort.postMessage({
    error: error instanceof Error ? (error.stack ?? error.message) : String(error),
    missing: error?.code === 'ERR_MODULE_NOT_FOUND',
  });
}
