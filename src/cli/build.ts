/** `offload build`: AssemblyScript, C, C++, Rust and WGSL kernel sources to a bundle, via buildBundle. */
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { buildBundle, formatNote } from '../build/compile.js';
import { formatDuration, formatSignature, hex, usageError, wrapHelp } from './format.js';
import { formatBytes } from '../units.js';

export const summary = 'Compile AssemblyScript, C, C++, Rust and WGSL kernels into a bundle (<out>.offload)';

const HELP = wrapHelp(`Usage: offload build <kernels.ts...> [kernels.wgsl] -o <out> [options]
       offload build <kernels.c|.cpp...> | <kernels.rs> [kernels.wgsl] -o <out> [options]

${summary}. Every exported function of the
.ts sources becomes a kernel of the wasm image (host device), and is
translated to WGSL for the wgsl image (WebGPU device) when it keeps to the
subset README states; a note names each kernel that is not (file:line and
why), which then runs on wasm devices only. Every @compute entry point of the
.wgsl file is a kernel of the wgsl image, by the ABI in docs/wgsl-abi.md, and
wins over the translation of a kernel of the same name. Each device loads the
image it can run.

C and C++ sources (#include "offload.h"; each OFFLOAD_KERNEL function is a
kernel) are compiled by the system's clang (clang-16 or clang on PATH, or
OFFLOAD_CLANG) with -O3 -msimd128 and linked by wasm-ld; a Rust source (each
#[no_mangle] pub extern "C" fn is a kernel; the crate 'offload' is the device
library) by a rustc with the wasm32-unknown-unknown standard library
(OFFLOAD_RUSTC; Debian: rustc libstd-rust-dev-wasm32 lld-16). Their kernels
run on wasm devices only: the build notes each. Typed wrappers of the kernels
go to <out>.js and <out>.d.ts:
  import { load } from './<out>.js';
  const k = await load(runtime);
  await k.saxpy(device, { teams: 64 }, n, a, map.to(x), map.tofrom(y));

Options:
  -o, --output <out>     Output path without extension (required); writes
                         <out>.offload, <out>.js and <out>.d.ts
  --name <name>          Bundle name for diagnostics (default: basename of <out>)
  --static-base <addr>   Address of the image's static data, decimal or 0x hex
                         (default: a slot chosen by a hash of name and sources)
  --no-optimize          Compile without -O3
  --debug                Keep debug information (function names) in the image
  --checked              Check every ptr<T> access against its parameter's buffer:
                         one outside fails the launch with KERNEL_TRAP naming the
                         kernel, the parameter, the index and the buffer's length
                         (host device; see docs/kernels.md)
  --wgsl <mode>          auto: translate what the subset covers, note the rest
                         (default); require: fail on any kernel that does not
                         translate; off: translate nothing
  -h, --help             Show this help`);

export async function run(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      output: { type: 'string', short: 'o' },
      name: { type: 'string' },
      'static-base': { type: 'string' },
      'no-optimize': { type: 'boolean' },
      debug: { type: 'boolean' },
      checked: { type: 'boolean' },
      wgsl: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  if (positionals.length === 0)
    return usageError(
      'build',
      'no kernel sources given (expected .ts files, or .c/.cpp files, or one .rs file, and at most one .wgsl file)',
    );
  if (values.output === undefined)
    return usageError('build', 'the output path is required: -o <out> (writes <out>.offload)');
  let staticBase: number | undefined;
  if (values['static-base'] !== undefined) {
    // Number() reads both decimal and 0x-prefixed hex; the range is buildBundle's to check.
    staticBase = values['static-base'].trim() === '' ? NaN : Number(values['static-base']);
    if (!Number.isSafeInteger(staticBase))
      return usageError(
        'build',
        `--static-base must be an address (decimal or 0x hex), got '${values['static-base']}'`,
      );
  }

  const wgsl = values.wgsl ?? 'auto';
  if (wgsl !== 'auto' && wgsl !== 'require' && wgsl !== 'off')
    return usageError('build', `--wgsl must be auto, require or off, got '${wgsl}'`);

  const started = performance.now();
  const result = await buildBundle({
    sources: positionals,
    output: values.output,
    name: values.name,
    staticBase,
    optimize: !values['no-optimize'],
    debug: values.debug === true,
    checked: values.checked === true,
    wgsl,
  });
  const elapsed = performance.now() - started;

  const { manifest } = result;
  console.log(
    `wrote ${result.path} (${formatBytes(result.bundle.length)}, bundle '${manifest.name}') in ${formatDuration(elapsed)}`,
  );
  console.log(`wrote ${result.wrappers.js}, ${result.wrappers.dts} (typed wrappers)`);
  for (const image of manifest.images) {
    if (image.format === 'wgsl') {
      console.log(
        `  image    ${image.triple}, ${formatBytes(image.size)}, ${image.kernels?.length ?? 0} kernels from ${image.source}`,
      );
      continue;
    }
    const end = image.staticBase + image.staticSize;
    const data =
      image.staticSize === 0
        ? `none (base ${hex(image.staticBase)})`
        : `[${hex(image.staticBase)}, ${hex(end)}), ${formatBytes(image.staticSize)}`;
    console.log(`  image    ${image.triple}, ${formatBytes(image.size)}, static data ${data}`);
  }
  for (const entry of manifest.entries.filter((e) => e.kind === 'kernel'))
    console.log(`  kernel   ${formatSignature(entry)}`);
  for (const note of result.notes) console.error(`note: ${formatNote(note)}`);
  return 0;
}
