// Checks src/'s imports against the layer rules of .dependency-cruiser.json (docs/architecture.md's
// table, as rules): `npm run lint` runs it after ESLint, and exits 1 on a forbidden import.
//
// dependency-cruiser's command line (`depcruise`) refuses Node 20 by its engines check; its API
// does not, so this script drives the API with the same configuration file the command line
// reads (`npx depcruise src` gives the same findings on Node 22 and later).
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cruise, format } from 'dependency-cruiser';
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options';
import extractTSConfig from 'dependency-cruiser/config-utl/extract-ts-config';

const repository = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** One forbidden import: the rule it breaks, and the importing and imported files (relative paths). */
export interface LayerViolation {
  rule: string;
  from: string;
  to: string;
}

/**
 * Cruises `root`/src with the repository's rules (`root` holds a tsconfig.json and src/; by default
 * the repository itself) and returns every forbidden import, with the report dependency-cruiser's
 * `err` reporter prints.
 */
export async function checkLayers(root = repository): Promise<{ violations: LayerViolation[]; report: string }> {
  const options = await extractDepcruiseOptions(path.join(repository, '.dependency-cruiser.json'));
  const cwd = process.cwd();
  // dependency-cruiser resolves the files it is given, and names them, against the working directory.
  process.chdir(root);
  try {
    const result = await cruise(['src'], { ...options, validate: true }, undefined, {
      tsConfig: extractTSConfig(path.join(root, 'tsconfig.json')),
    });
    if (typeof result.output === 'string') throw new Error('dependency-cruiser returned text, not its result');
    const violations = result.output.summary.violations.map((v) => ({ rule: v.rule.name, from: v.from, to: v.to }));
    const formatted = await format(result.output, { outputType: 'err' });
    const report = typeof formatted.output === 'string' ? formatted.output : '';
    return { violations, report };
  } finally {
    process.chdir(cwd);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { violations, report } = await checkLayers();
  process.stdout.write(report);
  if (violations.length > 0) process.exitCode = 1;
}
