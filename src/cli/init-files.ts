/**
 * What `offload init` writes: a kernels folder that AssemblyScript's compiler and type checker
 * own (its tsconfig extends AssemblyScript's), an example kernel, an application that launches
 * it through the typed wrappers, and the npm scripts that build both. The application's tsc sees
 * only src/, the kernels' only kernels/; the wrappers go to build/, outside both, so a
 * `tsc --outDir dist` build imports them from dist/ as from src/ (one folder down either way).
 */

export const KERNELS_DIR = 'kernels';
export const KERNEL_FILE = `${KERNELS_DIR}/example.ts`;
export const WRAPPER_OUT = 'build/kernels';

/**
 * The dev dependencies the scripts need: tsc (check:kernels, build), Node's types for src/, tsx
 * to run src/main.ts as it is (`offload launch -np 2 src/main.ts`). TypeScript is held to 5.x:
 * the 7.x that `npm i -D typescript` may bring fails inside AssemblyScript's own std types
 * (TS2316), which check:kernels reads; 5.9 is what offload-ts is built and tested with.
 */
export const DEV_DEPENDENCIES: Record<string, string> = {
  typescript: '~5.9.3',
  '@types/node': '^20.19.0',
  tsx: '^4.20.0',
};

/** Why TypeScript is pinned, at the top of kernels/tsconfig.json (tsc reads comments there). */
const PIN_NOTE = `// TypeScript stays at ~5.9 (package.json devDependencies, written by offload init): TypeScript
// 7.x fails inside AssemblyScript's std types that this check reads (TS2316). Raise it once
// 'npm run check:kernels' passes with the newer one.
`;

/** kernels/tsconfig.json: AssemblyScript's settings, and where `offload-ts/device` is. */
export const KERNELS_TSCONFIG = `${PIN_NOTE}${JSON.stringify(
  {
    extends: '../node_modules/assemblyscript/std/assembly.json',
    compilerOptions: {
      noEmit: true,
      paths: {
        'offload-ts/device': ['../node_modules/offload-ts/assembly/device.ts'],
        '*': ['../node_modules/assemblyscript/std/assembly/*'],
      },
    },
    include: ['./**/*.ts'],
  },
  null,
  2,
)}\n`;

export const EXAMPLE_KERNEL = `// Kernels (AssemblyScript): 'npm run build:kernels' compiles them to build/kernels.offload with
// typed wrappers (build/kernels.js, .d.ts); 'npm run check:kernels' type-checks them.
// A ptr<i32> parameter is indexed in elements (data[i]); a usize one is a byte address.
import { item, numTeams, ptr, teamId } from "offload-ts/device";

/**
 * A per-item kernel: the body for one item i of the range launched ({ items: n }); the device
 * maps the items to its workers or its GPU's invocations.
 */
export function iota(i: item, data: ptr<i32>): void {
  data[i] = i;
}

/**
 * A reduction with atomics: adds the n i32 at data into the i32 at total. Each team (launched
 * with { teams }) sums its block in a local, then adds that to total with one atomic add, so
 * teams never race.
 */
export function sum(n: i32, data: ptr<i32>, total: usize): void {
  const teams = numTeams();
  const block = (n + teams - 1) / teams;
  const start = teamId() * block;
  const end = min(n, start + block);
  let partial: i32 = 0;
  for (let i = start; i < end; i++) partial += data[i];
  atomic.add<i32>(total, partial);
}
`;

export const EXAMPLE_APP = `import { Offload, OffloadError, map } from 'offload-ts';
import { load } from '../${WRAPPER_OUT}.js';

const rt = await Offload.init();
try {
  const kernels = await load(rt);
  const n = 1000;
  for (const device of rt.devices) {
    const data = new Int32Array(n);
    const total = new Int32Array(1);
    try {
      await kernels.iota(device, { items: n }, map.from(data)); // data[i] = i on the device
      await kernels.sum(device, { teams: 4 }, n, map.to(data), map.tofrom(total));
    } catch (error) {
      // A device whose image lacks the kernel (WGSL has no translation of it) is skipped.
      if (OffloadError.is(error, 'NOT_FOUND')) continue;
      throw error;
    }
    console.log(\`device \${device.id} \${device.info.name}: sum of 0..\${n - 1} = \${total[0]}\`);
  }
} finally {
  await rt.shutdown();
}
`;

/** The application's tsconfig.json (written only where there is none): src/ to dist/. */
export const APP_TSCONFIG = `${JSON.stringify(
  {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      rootDir: 'src',
      outDir: 'dist',
    },
    include: ['src'],
  },
  null,
  2,
)}\n`;

/** The npm scripts, added where the project has none of that name. */
export const SCRIPTS: Record<string, string> = {
  'build:kernels': `offload build ${KERNEL_FILE} -o ${WRAPPER_OUT}`,
  'check:kernels': `tsc -p ${KERNELS_DIR}`,
  build: 'npm run build:kernels && tsc',
  start: 'node dist/main.js',
};
