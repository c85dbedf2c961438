/**
 * The part of node:test the conformance suite uses (describe, it, before, after, a context's
 * skip), for a page: test/helpers/browser.ts's bundlePage aliases `node:test` to this file, so
 * the suite Node runs is the suite the page runs, unchanged. Tests run one at a time in the
 * order they were declared; `runDeclared()` runs them and returns one result per test.
 */

export interface PageTestResult {
  /** The names of the enclosing describes and the test's, joined by ' > '. */
  name: string;
  status: 'pass' | 'fail' | 'skip';
  /** The failure's message (with its stack), or the skip's reason. */
  message?: string;
  ms: number;
}

export interface TestContext {
  skip(message?: string): void;
  diagnostic(message: string): void;
}

interface Options {
  timeout?: number;
  skip?: boolean | string;
}

type Hook = () => unknown;
type TestBody = (t: TestContext) => unknown;

interface Test {
  name: string;
  options: Options;
  body: TestBody;
}

interface Suite {
  name: string;
  options: Options;
  before: Hook[];
  after: Hook[];
  children: (Suite | Test)[];
}

/** A test without a timeout of its own gets this long (node:test would wait forever; a page must answer). */
const DEFAULT_TIMEOUT_MS = 60_000;

const root: Suite = { name: '', options: {}, before: [], after: [], children: [] };
let current = root;

/** node:test's (name, options?, fn) and (name, fn). */
function parse<F>(rest: [Options | F, F?]): [Options, F] {
  return typeof rest[0] === 'function' ? [{}, rest[0]] : [rest[0] as Options, rest[1]!];
}

export function describe(name: string, ...rest: [Options | (() => void), (() => void)?]): void {
  const [options, body] = parse(rest);
  const suite: Suite = { name, options, before: [], after: [], children: [] };
  current.children.push(suite);
  const parent = current;
  current = suite;
  try {
    body();
  } finally {
    current = parent;
  }
}

export function it(name: string, ...rest: [Options | TestBody, TestBody?]): void {
  const [options, body] = parse(rest);
  current.children.push({ name, options, body });
}

export const test = it;

export function before(hook: Hook): void {
  current.before.push(hook);
}

export function after(hook: Hook): void {
  current.after.push(hook);
}

function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}\n${error.stack ?? ''}`;
  return String(error);
}

/** Runs `body` with a time limit; a limit passed rejects (the body keeps running, as in node:test). */
async function timed(body: () => unknown, ms: number, what: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      Promise.resolve().then(body),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function runSuite(
  suite: Suite,
  path: string[],
  results: PageTestResult[],
  failed?: string,
  skipped?: boolean | string,
): Promise<void> {
  const names = suite.name ? [...path, suite.name] : path;
  const skip = skipped || suite.options.skip;
  let broken = failed;
  if (!broken && !skip) {
    for (const hook of suite.before) {
      try {
        await timed(hook, suite.options.timeout ?? DEFAULT_TIMEOUT_MS, `before() of ${names.join(' > ')}`);
      } catch (error) {
        broken = `before() failed: ${describeError(error)}`;
        break;
      }
    }
  }
  for (const child of suite.children) {
    if ('children' in child) {
      await runSuite(child, names, results, broken, skip);
      continue;
    }
    const name = [...names, child.name].join(' > ');
    const started = performance.now();
    const skipped = skip || child.options.skip;
    if (skipped) {
      results.push({ name, status: 'skip', message: typeof skipped === 'string' ? skipped : undefined, ms: 0 });
      continue;
    }
    if (broken) {
      results.push({ name, status: 'fail', message: broken, ms: 0 });
      continue;
    }
    let skipReason: string | undefined;
    const context: TestContext = {
      skip(message = '') {
        skipReason = message;
      },
      diagnostic() {},
    };
    try {
      await timed(() => child.body(context), child.options.timeout ?? DEFAULT_TIMEOUT_MS, name);
      results.push(
        skipReason === undefined
          ? { name, status: 'pass', ms: performance.now() - started }
          : { name, status: 'skip', message: skipReason, ms: performance.now() - started },
      );
    } catch (error) {
      results.push({
        name,
        status: 'fail',
        message: describeError(error),
        ms: performance.now() - started,
      });
    }
  }
  if (skip || failed) return;
  for (const hook of suite.after) {
    try {
      await timed(hook, suite.options.timeout ?? DEFAULT_TIMEOUT_MS, `after() of ${names.join(' > ')}`);
    } catch (error) {
      results.push({ name: `${names.join(' > ')} > after()`, status: 'fail', message: describeError(error), ms: 0 });
    }
  }
}

/** Runs every test declared so far, in order; each once. */
export async function runDeclared(): Promise<PageTestResult[]> {
  const results: PageTestResult[] = [];
  const suite = { ...root, children: root.children.splice(0) };
  await runSuite(suite, [], results);
  return results;
}
