// npm's install step for the MPI addon (native/mpi): built with node-gyp when OpenMPI's mpicc is
// on the PATH, skipped with a note otherwise (everything but `offload proxy --mpi` and MPI
// proxies works without it). `npm run build:mpi` runs it again, failing loudly.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const strict = process.argv.includes('--strict');
const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');

function hasMpicc() {
  try {
    execFileSync('mpicc', ['--showme:version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** npm hands its bundled node-gyp to lifecycle scripts; outside them, find the one next to npm. */
function nodeGyp() {
  if (process.env.npm_config_node_gyp) return process.env.npm_config_node_gyp;
  const npm = path.dirname(
    createRequire(import.meta.url).resolve('npm/package.json', {
      paths: [path.dirname(process.execPath), '/usr/lib/node_modules', '/usr/local/lib/node_modules'],
    }),
  );
  return path.join(npm, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
}

if (!hasMpicc()) {
  const note =
    'offload-ts: mpicc not found, the MPI addon is not built (install openmpi-bin libopenmpi-dev, then npm rebuild offload-ts in your project, or npm run build:mpi in a checkout)';
  if (strict) {
    console.error(note);
    process.exit(1);
  }
  console.log(note);
  process.exit(0);
}
// Build against the headers of the running Node when they are installed beside it (no download).
const prefix = path.join(path.dirname(process.execPath), '..');
const nodedir =
  process.env.npm_config_nodedir ||
  (existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) ? prefix : undefined);
const args = [nodeGyp(), 'rebuild', ...(nodedir ? [`--nodedir=${nodedir}`] : [])];
const result = spawnSync(process.execPath, args, { cwd: path.join(root, 'native', 'mpi'), stdio: 'inherit' });
if (result.status !== 0) {
  console.error('offload-ts: building the MPI addon failed; MPI proxies are unavailable');
  process.exit(strict ? 1 : 0);
}
