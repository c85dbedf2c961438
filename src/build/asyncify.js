/**
 * Binaryen's asyncify over a module that imports the device's barrier, shared by the
 * AssemblyScript compiler's worker (compiler-worker.js) and the worker that instruments linked C,
 * C++ and Rust modules (asyncify-worker.js). Plain JavaScript, loaded without a TypeScript loader
 * (compiler-worker.js says why).
 */

/**
 * Instruments only the functions that can reach `barrierImport` ({ module, name }) so that the
 * host device can switch between a team's threads there (src/plugins/host/team-threads.ts); then
 * optimizes again when `optimize`, as asyncify's authors advise. Returns `wasm` unchanged when it
 * does not import the barrier.
 */
export function asyncifyBarriers(binaryen, wasm, barrierImport, optimize) {
  const module = binaryen.readBinary(wasm);
  try {
    module.setFeatures(binaryen.Features.All);
    let importsBarrier = false;
    for (let i = 0; i < module.getNumFunctions(); i++) {
      const info = binaryen.getFunctionInfo(module.getFunctionByIndex(i));
      if (info.module === barrierImport.module && info.base === barrierImport.name) importsBarrier = true;
    }
    if (!importsBarrier) return wasm;
    binaryen.setPassArgument('asyncify-imports', `${barrierImport.module}.${barrierImport.name}`);
    module.runPasses(['asyncify']);
    if (optimize) {
      binaryen.setOptimizeLevel(3);
      binaryen.setShrinkLevel(0);
      module.optimize();
    }
    if (!module.validate()) throw new Error('asyncify produced an invalid module');
    return module.emitBinary();
  } finally {
    module.dispose();
  }
}
