/**
 * The suite cannot hang CI: `npm test` caps every file (--test-timeout) and makes its process
 * exit once its tests are done (--test-force-exit), and every test sits inside a describe/it/test
 * with a `timeout`, so a hang fails with the name of the test that hung. This file checks the
 * second rule on every test file (TypeScript's own parser), so a new file cannot forget it.
 */
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = fileURLToPath(new URL('..', import.meta.url));
const TEST_CALLS = new Set(['describe', 'it', 'test']);

async function testSources(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const found: string[] = [];
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== 'fixtures' && entry.name !== 'build')
      found.push(...(await testSources(path)));
    else if (/\.ts$/.test(entry.name)) found.push(path);
  }
  return found;
}

/** `describe(...)`, `it.skip(...)`, `test.only(...)`: the name of the test function called, if any. */
function calledTest(node: ts.CallExpression): string | undefined {
  let callee = node.expression;
  if (ts.isPropertyAccessExpression(callee)) callee = callee.expression;
  return ts.isIdentifier(callee) && TEST_CALLS.has(callee.text) ? callee.text : undefined;
}

function hasTimeout(node: ts.CallExpression): boolean {
  return node.arguments.some(
    (arg) =>
      ts.isObjectLiteralExpression(arg) &&
      arg.properties.some((p) => p.name !== undefined && ts.isIdentifier(p.name) && p.name.text === 'timeout'),
  );
}

/** The outermost describe/it/test calls of a file (those not inside another one's callback) that set no timeout. */
function unlimited(file: string, text: string): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const found: string[] = [];
  const visit = (node: ts.Node, inside: boolean): void => {
    if (ts.isCallExpression(node) && calledTest(node)) {
      if (!inside && !hasTimeout(node)) {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart());
        found.push(`${relative(root, file)}:${line + 1} ${node.getText().split('\n')[0]!.slice(0, 80)}`);
      }
      node.forEachChild((child) => visit(child, true));
      return;
    }
    node.forEachChild((child) => visit(child, inside));
  };
  visit(source, false);
  return found;
}

describe('time limits of the suite', { timeout: 60_000 }, () => {
  it('npm test caps each file and forces its process to exit', async () => {
    const pkg = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    assert.match(pkg.scripts.test!, /--test-timeout=\d+/);
    assert.match(pkg.scripts.test!, /--test-force-exit/);
  });

  it('every test of every file is inside a describe, it or test with a timeout', async () => {
    const files = await testSources(join(root, 'test'));
    const missing: string[] = [];
    for (const file of files) missing.push(...unlimited(file, await readFile(file, 'utf8')));
    assert.deepEqual(missing, [], 'add { timeout } to these outermost calls');
  });
});
