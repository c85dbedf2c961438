/**
 * The api's one internal surface (src/api/internal.ts): no file of src/ outside src/api/ reads a
 * member the published types hide (`@internal`, which tsconfig's stripInternal leaves out of the
 * .d.ts, or `private`/`protected`), calls a hidden constructor, or imports a hidden name, except
 * through src/api/internal.ts. Found with TypeScript's checker over src/, so a reach by any
 * spelling (`x.member`, `x['member']`) counts.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';

const root = path.resolve(import.meta.dirname, '..');
const api = path.join(root, 'src', 'api') + path.sep;
const internalModule = path.join(api, 'internal.ts');

/** Whether the published types hide `declaration` (an api member or export). */
function isHidden(declaration: ts.Declaration): boolean {
  if (ts.getJSDocTags(declaration).some((tag) => tag.tagName.text === 'internal')) return true;
  // A parameter property's own comment (`/** @internal */ readonly plugin: ...`) is not JSDoc to the checker.
  const leading = declaration.getFullText().slice(0, declaration.getLeadingTriviaWidth());
  if (/@internal\b/.test(leading)) return true;
  if (ts.getCombinedModifierFlags(declaration) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) return true;
  const name = (declaration as { name?: ts.Node }).name;
  return name !== undefined && ts.isPrivateIdentifier(name);
}

function inApi(declaration: ts.Declaration): boolean {
  const file = declaration.getSourceFile().fileName;
  return path.resolve(file).startsWith(api) && path.resolve(file) !== internalModule;
}

/** Every reach into a hidden member of the api from `files`, as `file:line what`. */
function reaches(program: ts.Program, files: readonly ts.SourceFile[]): string[] {
  const checker = program.getTypeChecker();
  const found: string[] = [];
  for (const file of files) {
    const report = (node: ts.Node, what: string): void => {
      const { line } = file.getLineAndCharacterOfPosition(node.getStart());
      found.push(`${path.relative(root, file.fileName)}:${line + 1} ${what}`);
    };
    const hiddenIn = (symbol: ts.Symbol | undefined): boolean =>
      (symbol?.declarations ?? []).some((declaration) => inApi(declaration) && isHidden(declaration));
    const visit = (node: ts.Node): void => {
      if (ts.isPropertyAccessExpression(node) && hiddenIn(checker.getSymbolAtLocation(node.name))) {
        report(node, node.getText());
      } else if (ts.isElementAccessExpression(node) && hiddenIn(checker.getSymbolAtLocation(node.argumentExpression))) {
        report(node, node.getText());
      } else if (ts.isNewExpression(node)) {
        const declaration = checker.getResolvedSignature(node)?.declaration;
        if (
          declaration !== undefined &&
          !ts.isJSDocSignature(declaration) &&
          inApi(declaration) &&
          isHidden(declaration)
        ) {
          report(node, `new ${node.expression.getText()}`);
        }
      } else if (ts.isImportSpecifier(node)) {
        const local = checker.getSymbolAtLocation(node.name);
        const target = local === undefined ? undefined : checker.getAliasedSymbol(local);
        const from = (node.parent.parent.parent.moduleSpecifier as ts.StringLiteral).text;
        const resolved = path.resolve(path.dirname(file.fileName), from.replace(/\.js$/, '.ts'));
        if (resolved !== internalModule && hiddenIn(target)) report(node, `import ${node.getText()} from '${from}'`);
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
  return found;
}

/** A module written as omp or proxy code would be, served by the compiler host (never written to disk). */
const probe = path.join(root, 'src', 'omp', 'probe-of-internal-surface.ts');
const probeText = [
  "import type { Buffer } from '../api/buffer.js';",
  "import { Event, type Queue, type PointerResolver } from '../api/queue.js';",
  "import { deviceAddress } from '../api/internal.js';",
  'export function probe(buffer: Buffer, queue: Queue, resolver: PointerResolver): unknown {',
  '  const address = buffer.allocation.address;',
  "  const uses = buffer['uses'];",
  '  const event = new Event(undefined, queue.device);',
  '  return [address, uses, event, resolver, deviceAddress(buffer), buffer.byteLength, queue.device];',
  '}',
  '',
].join('\n');

/** One program of src/ (as tsconfig.json has it) and the probe. */
function programOfSrc(): ts.Program {
  const config = ts.getParsedCommandLineOfConfigFile(
    path.join(root, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) =>
        assert.fail(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')),
    },
  )!;
  const host = ts.createCompilerHost(config.options);
  const read = host.getSourceFile.bind(host);
  host.getSourceFile = (name, language, ...rest) =>
    path.resolve(name) === probe ? ts.createSourceFile(name, probeText, language) : read(name, language, ...rest);
  return ts.createProgram([...config.fileNames, probe], { ...config.options, noEmit: true }, host);
}

describe('the api internal surface', { timeout: 120_000 }, () => {
  const program = programOfSrc();

  it('no file of src/ outside src/api/ reaches into a hidden member but through src/api/internal.ts', () => {
    const outside = program.getSourceFiles().filter((file) => {
      const name = path.resolve(file.fileName);
      return name.startsWith(path.join(root, 'src') + path.sep) && !name.startsWith(api) && name !== probe;
    });
    assert.ok(outside.length > 50, `only ${outside.length} files of src/ outside src/api/ were checked`);
    assert.deepEqual(reaches(program, outside), []);
  });

  it('finds each kind of reach: a hidden member, a private one, a hidden constructor, a hidden name', () => {
    const file = program.getSourceFile(probe);
    assert.ok(file !== undefined);
    assert.deepEqual(reaches(program, [file]), [
      "src/omp/probe-of-internal-surface.ts:2 import type PointerResolver from '../api/queue.js'",
      'src/omp/probe-of-internal-surface.ts:5 buffer.allocation',
      "src/omp/probe-of-internal-surface.ts:6 buffer['uses']",
      'src/omp/probe-of-internal-surface.ts:7 new Event',
    ]);
  });
});
