// After tsc: takes TypeScript-`private` members out of the emitted declarations (dist/**/*.d.ts),
// so that a user's editor and type errors list only what they can use. Each class that had
// instance members removed gets one `#private;` in their place, as tsc writes for a class with
// ECMAScript private fields: the class stays nominal (an object literal is not one of them).
// `private constructor();` stays: it is what keeps `new` out of a user's reach.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const dist = process.argv[2] ?? 'dist';
const PRIVATE = /^(\s*)private (static )?(?:readonly |get |set )*[\w$]+\??(?:\(\))?;$/;
const CLASS = /^\s*(?:export )?(?:declare )?(?:abstract )?class\b/;

let files = 0;
let members = 0;
// Names, not Dirents: Node 20's recursive readdir gives some Dirents the wrong parent folder.
for (const name of readdirSync(dist, { recursive: true })) {
  if (!name.endsWith('.d.ts')) continue;
  const file = path.join(dist, name);
  const lines = readFileSync(file, 'utf8').split('\n');
  const kept = [];
  let branded = false;
  for (const line of lines) {
    if (CLASS.test(line)) branded = false;
    const match = PRIVATE.exec(line);
    if (!match) {
      kept.push(line);
      continue;
    }
    members++;
    if (match[2] === undefined && !branded) {
      kept.push(`${match[1]}#private;`);
      branded = true;
    }
  }
  if (kept.join('\n') !== lines.join('\n')) {
    writeFileSync(file, kept.join('\n'));
    files++;
  }
}
// Silent: `npm pack --json` runs the build and reads its stdout as JSON.
if (process.argv.includes('--verbose'))
  console.error(`declarations: ${members} private members taken out of ${files} files`);
