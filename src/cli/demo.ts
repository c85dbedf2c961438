/**
 * `offload demo`: compiles examples/kernels.ts (cached by content; wasm for the host device, and
 * translated to WGSL for a WebGPU device), runs saxpy and mandelbrot (per-item kernels, launched
 * with `{ items }`), a dot product and a tiled transpose (teams of threads) on every
 * device whose image has them (with `--proxies N`, also on N local proxies it starts), and checks
 * every result against a plain TypeScript reference. The Rust saxpy and the C mandelbrot of
 * examples/native/ run the same way on every device that runs wasm, when the system's rustc and
 * clang are there to build them.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import type { Device } from '../api/device.js';
import { OffloadError } from '../errors.js';
import { Offload } from '../api/runtime.js';
import { demoGrid, mandelbrot, runDemoKernels, saxpy, type Outcome } from '../apps/demo-kernels.js';
import { formatDuration, table, usageError, wrapHelp } from './format.js';
import { cachedBundle } from './kernel-cache.js';
import { startLocalProxies } from './local-proxies.js';

export const summary = 'Compile the example kernels, run them on every device and check the results';

const DEFAULT_SIZE = 2 ** 22;
const MAX_SIZE = 2 ** 31 - 1; // n is an i32 kernel parameter

const HELP = wrapHelp(`Usage: offload demo [--size N] [--proxies N]

${summary}:
saxpy and a dot product over N floats, and a 256x192 mandelbrot, on every device the runtime
finds (OFFLOAD_PROXIES included; a WebGPU device runs the same kernels, translated to WGSL);
then examples/native/'s Rust saxpy and C mandelbrot, built with the system's rustc and clang,
on every device that runs wasm.

Options:
  --size <N>     Vector length of saxpy and the dot product (default ${DEFAULT_SIZE})
  --proxies <N>  Start N local 'offload proxy' processes and run on their devices too
  --json         Print the results as one JSON object (and nothing else) on stdout
  -h, --help     Show this help`);

// src/cli and dist/cli sit at the same depth below the package root.
const KERNELS_SOURCE = fileURLToPath(new URL('../../examples/kernels.ts', import.meta.url));
/**
 * Kernels in other languages (README "Kernels in C, C++ and Rust"): built with the system's
 * compilers when they are there, run on every device that runs wasm (they have no WGSL image).
 */
const NATIVE_EXAMPLES = [
  { language: 'Rust', source: 'examples/native/saxpy.rs', kernel: 'saxpy' },
  { language: 'C', source: 'examples/native/mandelbrot.c', kernel: 'mandelbrot' },
] as const;
export async function run(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      size: { type: 'string' },
      proxies: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const size = values.size === undefined ? DEFAULT_SIZE : Number(values.size);
  if (!/^\d+$/.test(values.size ?? '1') || size < 1 || size > MAX_SIZE) {
    return usageError('demo', `--size must be an integer from 1 to ${MAX_SIZE}, got '${values.size}'`);
  }
  const proxyCount = values.proxies === undefined ? 0 : Number(values.proxies);
  if (!/^\d+$/.test(values.proxies ?? '0') || proxyCount > 16) {
    return usageError('demo', `--proxies must be a number of local proxies from 0 to 16, got '${values.proxies}'`);
  }

  const started = performance.now();
  const bundle = await cachedBundle([KERNELS_SOURCE], { label: 'offload-demo', name: 'kernels' });
  const how = bundle.compileMs === undefined ? 'cached' : `compiled in ${formatDuration(bundle.compileMs)}`;
  const shown = path.relative(process.cwd(), KERNELS_SOURCE) || KERNELS_SOURCE;
  const json = values.json === true;
  if (!json) console.log(`kernels  ${shown}: ${how} -> ${bundle.path}`);

  // The native examples' bundles; a missing compiler skips its example, saying why.
  const nativeBundles: { language: string; kernel: string; path: string }[] = [];
  const nativeMissing: string[] = [];
  for (const example of NATIVE_EXAMPLES) {
    const source = fileURLToPath(new URL(`../../${example.source}`, import.meta.url));
    try {
      const built = await cachedBundle([source], { label: `offload-demo-${example.kernel}`, name: example.kernel });
      nativeBundles.push({ language: example.language, kernel: example.kernel, path: built.path });
    } catch (error) {
      if (!OffloadError.is(error, 'UNSUPPORTED')) throw error;
      nativeMissing.push(`${example.kernel} (${example.language}): ${error.message}`);
    }
  }

  const local = await startLocalProxies(proxyCount, { announce: !json });
  try {
    const runtime = await Offload.init(
      local && { proxies: local.proxies.map((proxy) => proxy.address), token: local.token },
    );
    try {
      const library = await runtime.register(bundle.path);
      const nativeLibraries = await Promise.all(
        nativeBundles.map(async (native) => ({ ...native, library: await runtime.register(native.path) })),
      );
      const outcomes: (Outcome & { device: Device })[] = [];
      const skipped: string[] = [];
      /** The native examples on devices that run no wasm: their build noted that they do not translate. */
      const wasmOnly: string[] = [];
      for (const device of runtime.devices) {
        const grid = demoGrid(device, size);
        const mine = await runDemoKernels(device, library, size);
        outcomes.push(...mine.outcomes.map((outcome) => ({ ...outcome, device })));
        skipped.push(...mine.skipped);
        for (const native of nativeLibraries) {
          if (!device.info.imageFormats.includes('wasm')) {
            wasmOnly.push(`${native.kernel} (${native.language}) on device ${device.id}`);
            continue;
          }
          const kernel = await device.kernel(native.library, native.kernel);
          const run = native.kernel === 'saxpy' ? saxpy : mandelbrot;
          const outcome = await run(device, kernel, size, grid);
          outcomes.push({ ...outcome, kernel: `${outcome.kernel} (${native.language})`, device });
        }
      }

      const failed = outcomes.filter((o) => o.mismatch !== undefined).length;
      if (json) {
        const results = outcomes.map(({ device, ...o }) => ({
          ...o,
          device: device.id,
          deviceName: device.info.name,
          ok: o.mismatch === undefined,
          mismatch: o.mismatch ?? null,
        }));
        const kernels = { sources: shown, bundle: bundle.path, compileMs: bundle.compileMs ?? null };
        const proxies = local?.proxies.map((proxy) => proxy.address) ?? [];
        console.log(
          JSON.stringify(
            {
              kernels,
              proxies,
              results,
              skipped,
              wasmOnly,
              notBuilt: nativeMissing,
              ok: failed === 0,
              totalMs: performance.now() - started,
            },
            null,
            2,
          ),
        );
        return failed === 0 ? 0 : 1;
      }
      const header = ['kernel', 'device', 'grid', 'problem', 'launch', 'round trip', 'result'];
      const rows = outcomes.map((o) => [
        o.kernel,
        `${o.device.id} ${o.device.info.name}`,
        `${o.teams} x ${o.threads}`,
        o.problem,
        formatDuration(o.launchMs),
        formatDuration(o.roundTripMs),
        o.mismatch === undefined
          ? 'checked: OK'
          : `checked: MISMATCH at ${o.mismatch.index} (${o.mismatch.got}, ${o.mismatch.expected})`,
      ]);
      console.log('');
      for (const line of table([header, ...rows])) console.log(line);
      if (skipped.length > 0) console.log(`not in the device's image: ${skipped.join(', ')}`);
      if (wasmOnly.length > 0) console.log(`runs on wasm devices only: ${wasmOnly.join(', ')}`);
      for (const missing of nativeMissing) console.log(`not built: ${missing}`);
      console.log('');

      const total = formatDuration(performance.now() - started);
      const devices =
        runtime.devices.length === 1
          ? `device ${runtime.devices[0]!.id} ${runtime.devices[0]!.info.name}`
          : `${runtime.devices.length} devices`;
      const verdict =
        failed === 0
          ? `all ${outcomes.length} kernels checked OK`
          : `${failed} of ${outcomes.length} kernels MISMATCHED`;
      console.log(`${verdict} on ${devices}; ${total} in all`);
      return failed === 0 ? 0 : 1;
    } finally {
      await runtime.shutdown();
    }
  } finally {
    await local?.stop();
  }
}
