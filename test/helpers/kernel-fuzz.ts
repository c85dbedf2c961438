/**
 * The differential kernel fuzzer: generates AssemblyScript kernels from a grammar of the subset
 * that `offload build` translates to WGSL (src/build/wgsl-translate.ts), builds many of them into
 * one bundle (compiling AssemblyScript is the expensive part), runs each on the host device
 * (wasm) and the WebGPU device (its translation) with the same random inputs, and compares every
 * output: integers exactly, floats within the rounding docs/wgsl-abi.md ("Semantics") allows.
 * A mismatch is shrunk (statements removed, expressions replaced by an operand or a zero, each
 * round one build of every candidate) and reported with its source and inputs.
 *
 * Outputs stay deterministic whatever order invocations run in: each invocation writes its own
 * slots of `out` and `fo`; the shared counters of `acc` take only atomics that commute (add and
 * sub on acc[0], and, or and xor on acc[1..3]) with their results dropped.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildBundle } from '../../src/build/compile.js';
import { decodeBundle } from '../../src/image/bundle.js';
import { OffloadError, type Device, type Runtime } from '../../src/index.js';
import { seededRandom } from './random.js';

type Ty = 'i32' | 'u32' | 'f32' | 'bool';

/**
 * A node of a generated kernel: an expression (with its type), a statement or a block. `format`
 * prints it from its children's text; the parts of it that keep the kernel valid and bounded
 * (loop bounds, in-bounds indices, divisors made odd) are in `format`, so that shrinking, which
 * only removes or replaces children, cannot take them away.
 */
interface Node {
  kind: 'expr' | 'stmt' | 'block';
  type?: Ty;
  /** For an f32 expression: whether both devices compute it exactly (no rounding WGSL may do differently). */
  exact?: boolean;
  kids: Node[];
  format: (kids: string[]) => string;
}

/** A kernel's grid (the same on both devices). */
export interface Grid {
  teams: number | [number, number] | [number, number, number];
  threads: number | [number, number];
  teamMemoryBytes: number;
}

export interface FuzzKernel {
  name: string;
  body: Node;
  grid: Grid;
  /** Whether it uses team memory and barrier() (then it has no early returns: a barrier needs every thread). */
  team: boolean;
}

/** Slots per invocation in `out` (i32) and `fo` (f32); slots 6 and 7 of `out` take atomics. */
const SLOTS = 8;
/** Elements of the input arrays `pi` (i32) and `pf` (f32); indices are masked to them. */
const INPUTS = 16;
const PARAMS = 'a: i32, b: u32, c: f32, pi: usize, pf: usize, out: usize, fo: usize, acc: usize';

const leaf = (type: Ty, text: string, exact = true): Node => ({
  kind: 'expr',
  type,
  exact,
  kids: [],
  format: () => text,
});
const op = (type: Ty, kids: Node[], format: (k: string[]) => string, exact = false): Node => ({
  kind: 'expr',
  type,
  exact,
  kids,
  format,
});
const stmt = (kids: Node[], format: (k: string[]) => string): Node => ({ kind: 'stmt', kids, format });
const block = (kids: Node[]): Node => ({ kind: 'block', kids, format: (k) => k.join('') });

const INT_EDGES = ['0', '1', '-1', '2', '31', '32', '33', '-2147483648', '2147483647', '65535', '-65536'];
const U32_EDGES = ['0', '1', '2', '31', '32', '4294967295', '2147483648', '65535'];
const F32_EDGES = ['0.0', '-0.0', '1.0', '-1.5', '0.5', '3.0', '1e-3', '1e30', '-1e30', '2147483648.0'];

/** Generates kernels from a seed. */
/**
 * A comparison's source. A name before `<` and a parenthesis is parsed by AssemblyScript as the
 * start of type arguments (`vj < (vj | (<i32>-86))` fails with "Type expected"), so the left
 * operand of `<` and `<=` goes in parentheses.
 */
function compare(left: string, symbol: string, right: string): string {
  return symbol.startsWith('<') ? `((${left}) ${symbol} ${right})` : `(${left} ${symbol} ${right})`;
}

export class KernelGenerator {
  private readonly random: () => number;
  private depth = 0;
  private loops = 0;
  /** Loop counters in scope (i32 leaves). */
  private counters: string[] = [];
  private team = false;

  constructor(seed: number) {
    this.random = seededRandom(seed);
  }

  private pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.random() * items.length)]!;
  }

  private chance(p: number): boolean {
    return this.random() < p;
  }

  kernel(name: string): FuzzKernel {
    this.team = this.chance(0.15);
    this.loops = 0;
    this.counters = [];
    const grids: Grid[] = [
      { teams: 3, threads: 4, teamMemoryBytes: 0 },
      { teams: [2, 2], threads: [2, 2], teamMemoryBytes: 0 },
      { teams: [2, 1, 2], threads: 2, teamMemoryBytes: 0 },
      { teams: 1, threads: 1, teamMemoryBytes: 0 },
      { teams: [1, 3], threads: [3, 1], teamMemoryBytes: 0 },
    ];
    const grid = { ...this.pick(grids) };
    const statements: Node[] = [];
    const count = 2 + Math.floor(this.random() * 6);
    for (let i = 0; i < count; i++) statements.push(this.statement());
    if (this.team) {
      grid.teamMemoryBytes = threadCount(grid) * 4;
      // Every thread writes its word, waits for the team, then reads its neighbour's.
      statements.splice(
        Math.floor(this.random() * statements.length),
        0,
        stmt(
          [this.int('i32')],
          ([e]) =>
            `  store<i32>(teamMemory() + (<usize>tid << 2), ${e});\n  barrier();\n  vi ^= load<i32>(teamMemory() + (<usize>((tid + 1) % nt) << 2));\n`,
        ),
      );
    }
    return { name, body: block(statements), grid, team: this.team };
  }

  private statement(): Node {
    this.depth++;
    try {
      const kinds = ['assign', 'assign', 'assign', 'store', 'fstore', 'bytes', 'if', 'loop', 'atomic'];
      if (!this.team) kinds.push('return');
      if (this.counters.length > 0) kinds.push('break');
      const kind = this.depth > 3 ? this.pick(['assign', 'store', 'atomic']) : this.pick(kinds);
      switch (kind) {
        case 'assign': {
          const [name, type] = this.pick([
            ['vi', 'i32'],
            ['vj', 'i32'],
            ['vu', 'u32'],
            ['vf', 'f32'],
          ] as const);
          const compound =
            type === 'f32' ? this.pick(['=', '+=', '-=', '*=']) : this.pick(['=', '+=', '-=', '*=', '^=', '&=', '|=']);
          const value = type === 'f32' ? this.float() : this.int(type);
          return stmt([value], ([e]) => `  ${name} ${compound} ${e};\n`);
        }
        case 'store': {
          const at = slot('out', this.pick([0, 1, 2]));
          return stmt([this.int('i32')], ([e]) => `  store<i32>(${at}, ${e});\n`);
        }
        case 'fstore': {
          const at = slot('fo', this.pick([0, 1, 2]));
          return stmt([this.float()], ([e]) => `  store<f32>(${at}, ${e});\n`);
        }
        case 'bytes': {
          const type = this.pick(['u8', 'i8', 'u16', 'i16']);
          const offset = type.endsWith('8') ? this.pick([0, 1, 2, 3]) : this.pick([0, 2]);
          return stmt(
            [this.int(type.startsWith('u') ? 'u32' : 'i32')],
            ([e]) => `  store<${type}>(${slot('out', 3)}, <${type}>(${e}), ${offset});\n`,
          );
        }
        case 'if': {
          const cond = this.bool();
          const yes = block([this.statement(), ...(this.chance(0.5) ? [this.statement()] : [])]);
          if (this.chance(0.5)) return stmt([cond, yes], ([c, t]) => `  if (${c}) {\n${t}  }\n`);
          const no = block([this.statement()]);
          return stmt([cond, yes, no], ([c, t, f]) => `  if (${c}) {\n${t}  } else {\n${f}  }\n`);
        }
        case 'loop': {
          const counter = `l${this.loops++}`;
          const bound = this.int('i32');
          this.counters.push(counter);
          const body = block([this.statement(), ...(this.chance(0.5) ? [this.statement()] : [])]);
          this.counters.pop();
          const shape = this.pick(['for', 'while', 'do']);
          if (shape === 'for')
            return stmt(
              [bound, body],
              ([n, s]) => `  for (let ${counter} = 0; ${counter} < ((${n}) & 3); ${counter}++) {\n${s}  }\n`,
            );
          if (shape === 'while')
            return stmt(
              [bound, body],
              ([n, s]) =>
                `  {\n  let ${counter} = 0;\n  while (${counter} < ((${n}) & 3)) {\n  ${counter}++;\n${s}  }\n  }\n`,
            );
          return stmt(
            [bound, body],
            ([n, s]) =>
              `  {\n  let ${counter} = 0;\n  do {\n  ${counter}++;\n${s}  } while (${counter} < ((${n}) & 3));\n  }\n`,
          );
        }
        case 'break':
          return stmt([this.bool()], ([c]) => `  if (${c}) break;\n`);
        case 'return':
          return stmt([this.bool()], ([c]) => `  if (${c}) return;\n`);
        default: {
          const [index, name] = this.pick([
            [0, 'add'],
            [0, 'sub'],
            [1, 'and'],
            [2, 'or'],
            [3, 'xor'],
          ] as const);
          const value = this.int('i32');
          return stmt([value], ([e]) => `  atomic.${name}<i32>(acc + ${index * 4}, ${e});\n`);
        }
      }
    } finally {
      this.depth--;
    }
  }

  /** An i32 or u32 expression. */
  private int(type: 'i32' | 'u32', depth = 0): Node {
    if (depth >= 3 || this.chance(0.3)) return this.intLeaf(type);
    const other: 'i32' | 'u32' = type === 'i32' ? 'u32' : 'i32';
    const sub = (t: 'i32' | 'u32' = type): Node => this.int(t, depth + 1);
    const choice = this.pick([
      'binary',
      'binary',
      'binary',
      'shift',
      'divide',
      'unary',
      'ternary',
      'convert',
      'fconvert',
      'builtin',
      'atomic',
      'load',
      'small',
      'helper',
      'bool',
    ]);
    switch (choice) {
      case 'binary': {
        const symbol = this.pick(['+', '-', '*', '&', '|', '^']);
        return op(type, [sub(), sub()], ([l, r]) => `(${l} ${symbol} ${r})`);
      }
      case 'shift': {
        const symbol = this.pick(['<<', '>>', '>>>']);
        return op(type, [sub(), sub()], ([l, r]) => `(${l} ${symbol} ${r})`);
      }
      case 'divide': {
        // Odd divisors (never 0); i32.MIN_VALUE / -1 traps on the host device, and is then skipped.
        const symbol = this.pick(['/', '%']);
        return op(type, [sub(), sub()], ([l, r]) => `(${l} ${symbol} (${r} | 1))`);
      }
      case 'unary': {
        const symbol = type === 'i32' ? this.pick(['-', '~']) : '~';
        return op(type, [sub()], ([e]) => `(${symbol}${e})`);
      }
      case 'ternary':
        return op(type, [this.bool(depth + 1), sub(), sub()], ([c, t, f]) => `(${c} ? ${t} : ${f})`);
      case 'convert':
        return op(type, [sub(other)], ([e]) => `(<${type}>${e})`);
      case 'fconvert':
        return op(type, [this.float(depth + 1, true)], ([e]) => `(<${type}>${e})`);
      case 'builtin': {
        const name = this.pick(
          type === 'i32' ? ['clz', 'ctz', 'popcnt', 'abs', 'min', 'max'] : ['clz', 'ctz', 'popcnt', 'min', 'max'],
        );
        if (name === 'min' || name === 'max')
          return op(type, [sub(), sub()], ([l, r]) => `${name}<${type}>(${l}, ${r})`);
        return op(type, [sub()], ([e]) => `${name}<${type}>(${e})`);
      }
      case 'atomic': {
        const name = this.pick(['add', 'sub', 'and', 'or', 'xor', 'xchg']);
        const at = slot('out', this.pick([6, 7]));
        return op(type, [sub()], ([e]) => `atomic.${name}<${type}>(${at}, ${e})`);
      }
      case 'load':
        return op(type, [sub('i32')], ([e]) => `load<${type}>(pi + ((<usize>${e} & ${INPUTS - 1}) << 2))`);
      case 'small': {
        const small = this.pick(['i8', 'u8', 'i16', 'u16']);
        return op(type, [sub()], ([e]) => `(<${type}>(<${small}>${e}))`);
      }
      case 'helper':
        return type === 'i32'
          ? op(type, [sub(), sub()], ([l, r]) => `mix(${l}, ${r})`)
          : op(type, [sub()], ([e]) => `spread(${e})`);
      default:
        return op(type, [this.bool(depth + 1)], ([c]) => `(<${type}>${c})`);
    }
  }

  private intLeaf(type: 'i32' | 'u32'): Node {
    const choice = this.pick(['literal', 'edge', 'var', 'var', 'param', 'grid', 'counter']);
    if (choice === 'literal')
      return leaf(type, `(<${type}>${Math.floor(this.random() * 200) - (type === 'i32' ? 100 : 0)})`);
    if (choice === 'edge') return leaf(type, `(<${type}>${this.pick(type === 'i32' ? INT_EDGES : U32_EDGES)})`);
    if (choice === 'param') return leaf(type, type === 'i32' ? 'a' : 'b');
    if (choice === 'grid') {
      const fn = this.pick(['teamId', 'numTeams', 'threadId', 'numThreads']);
      const text = `${fn}(${this.pick(['', '0', '1', '2'])})`;
      return leaf(type, type === 'i32' ? text : `(<u32>${text})`);
    }
    if (choice === 'counter' && this.counters.length > 0) {
      const counter = this.pick(this.counters);
      return leaf(type, type === 'i32' ? counter : `(<u32>${counter})`);
    }
    return leaf(type, type === 'i32' ? this.pick(['vi', 'vj', 'tid']) : 'vu');
  }

  /** An f32 expression; `exact` asks for one both devices compute exactly (it feeds integers or control flow). */
  private float(depth = 0, exact = false): Node {
    if (depth >= 3 || this.chance(0.35)) return this.floatLeaf(exact);
    const sub = (): Node => this.float(depth + 1, exact);
    const choices = exact
      ? ['neg', 'round', 'abs', 'minmax', 'fromint', 'ternary']
      : ['arith', 'arith', 'arith', 'divide', 'neg', 'round', 'abs', 'minmax', 'fromint', 'ternary', 'math', 'load'];
    switch (this.pick(choices)) {
      case 'arith': {
        const symbol = this.pick(['+', '-', '*']);
        return op('f32', [sub(), sub()], ([l, r]) => `(${l} ${symbol} ${r})`);
      }
      case 'divide':
        return op('f32', [sub(), sub()], ([l, r]) => `(${l} / (Mathf.abs(${r}) + <f32>1.0))`);
      case 'neg':
        return op('f32', [sub()], ([e]) => `(-${e})`, true);
      case 'round': {
        const name = this.pick(['floor', 'ceil', 'trunc']);
        return op('f32', [sub()], ([e]) => `Mathf.${name}(${e})`, true);
      }
      case 'abs':
        return op('f32', [sub()], ([e]) => `Mathf.abs(${e})`, true);
      case 'minmax': {
        const name = `${this.pick(['Mathf.', ''])}${this.pick(['min', 'max'])}`;
        return op('f32', [sub(), sub()], ([l, r]) => `${name}(${l}, ${r})`, true);
      }
      case 'fromint':
        // Small integers convert exactly on both (WGSL may round a wider one either way).
        return op('f32', [this.int('i32', depth + 1)], ([e]) => `(<f32>((${e}) >> 12))`, true);
      case 'ternary':
        return op('f32', [this.bool(depth + 1), sub(), sub()], ([c, t, f]) => `(${c} ? ${t} : ${f})`, true);
      case 'math': {
        const name = this.pick(['sqrt', 'sin', 'cos', 'exp', 'log', 'tanh', 'atan']);
        const leafArg = this.floatLeaf();
        // Transcendentals on the inputs' range (|x| < 16): both devices stay within the tolerance.
        return op('f32', [leafArg], ([e]) =>
          name === 'sqrt' || name === 'log' ? `Mathf.${name}(Mathf.abs(${e}) + <f32>0.5)` : `Mathf.${name}(${e})`,
        );
      }
      default:
        return op(
          'f32',
          [this.int('i32', depth + 1)],
          ([e]) => `load<f32>(pf + ((<usize>${e} & ${INPUTS - 1}) << 2))`,
          true,
        );
    }
  }

  private floatLeaf(exact = false): Node {
    const choice = this.pick(
      exact ? ['literal', 'edge', 'param', 'load'] : ['literal', 'edge', 'var', 'param', 'load'],
    );
    if (choice === 'literal') return leaf('f32', `(<f32>${(Math.floor(this.random() * 64) - 32) / 4})`);
    if (choice === 'edge') return leaf('f32', `(<f32>${this.pick(F32_EDGES)})`);
    if (choice === 'param') return leaf('f32', 'c');
    if (choice === 'load') return leaf('f32', `load<f32>(pf + ${4 * Math.floor(this.random() * INPUTS)})`);
    return leaf('f32', 'vf');
  }

  private bool(depth = 0): Node {
    const choice = depth >= 3 ? 'compare' : this.pick(['compare', 'compare', 'fcompare', 'and', 'or', 'not']);
    switch (choice) {
      case 'compare': {
        const type = this.pick(['i32', 'u32'] as const);
        const symbol = this.pick(['<', '<=', '>', '>=', '==', '!=']);
        return op('bool', [this.int(type, depth + 1), this.int(type, depth + 1)], ([l, r]) => compare(l!, symbol, r!));
      }
      case 'fcompare': {
        const symbol = this.pick(['<', '<=', '>', '>=', '==', '!=']);
        return op('bool', [this.float(depth + 1, true), this.float(depth + 1, true)], ([l, r]) =>
          compare(l!, symbol, r!),
        );
      }
      case 'and':
        return op('bool', [this.bool(depth + 1), this.bool(depth + 1)], ([l, r]) => `(${l} && ${r})`);
      case 'or':
        return op('bool', [this.bool(depth + 1), this.bool(depth + 1)], ([l, r]) => `(${l} || ${r})`);
      default:
        return op('bool', [this.bool(depth + 1)], ([e]) => `(!${e})`);
    }
  }
}

/** A kernel whose body is given as text (the corpus of mismatches found, shrunk). */
export function kernelFromText(name: string, body: string, grid: Grid): FuzzKernel {
  return {
    name,
    body: block([stmt([], () => body)]),
    grid,
    team: body.includes('barrier()'),
  };
}

function threadCount(grid: Grid): number {
  return typeof grid.threads === 'number' ? grid.threads : grid.threads[0] * grid.threads[1];
}

function teamCount(grid: Grid): number {
  return typeof grid.teams === 'number' ? grid.teams : grid.teams.reduce((a, b) => a * b, 1);
}

/** The address of the invocation's own slot `j` of `base` (out or fo). */
function slot(base: string, j: number): string {
  return `${base} + ((<usize>inv * ${SLOTS} + ${j}) << 2)`;
}

function print(node: Node): string {
  return node.format(node.kids.map(print));
}

/** The source of a kernel: a fixed prologue (its variables, its invocation's place) and epilogue around its body. */
export function kernelSource(kernel: FuzzKernel): string {
  return [
    `export function ${kernel.name}(${PARAMS}): void {`,
    '  const nt = numThreads(0) * numThreads(1);',
    '  const tid = threadId(0) + numThreads(0) * threadId(1);',
    '  const inv = (teamId(0) + numTeams(0) * (teamId(1) + numTeams(1) * teamId(2))) * nt + tid;',
    '  let vi: i32 = a;',
    '  let vj: i32 = inv;',
    '  let vu: u32 = b;',
    '  let vf: f32 = c;',
    print(kernel.body).trimEnd(),
    `  store<i32>(${slot('out', 4)}, vi ^ vj);`,
    `  store<u32>(${slot('out', 5)}, vu);`,
    `  store<f32>(${slot('fo', 3)}, vf);`,
    '}',
    '',
  ].join('\n');
}

/** What every generated file starts with: the device library and the helpers kernels call. */
const PRELUDE = `import { barrier, numTeams, numThreads, teamId, teamMemory, threadId } from "offload-ts/device";
function mix(x: i32, y: i32): i32 { return (x ^ (y << 3)) - (y >>> 1); }
function spread(x: u32): u32 { return x * 2654435761 + (x >>> 16); }
`;

/** The file holding `kernels`. */
export function fileSource(kernels: FuzzKernel[]): string {
  return PRELUDE + kernels.map(kernelSource).join('\n');
}

/** Inputs of one run: the scalars and the arrays (the same on both devices). */
export interface Inputs {
  a: number;
  b: number;
  c: number;
  pi: Int32Array;
  pf: Float32Array;
}

export function randomInputs(seed: number): Inputs {
  const random = seededRandom(seed);
  const int = (): number => {
    const edge = random();
    if (edge < 0.15) return [0, 1, -1, -2147483648, 2147483647][Math.floor(random() * 5)]!;
    return Math.floor(random() * 2 ** 32) | 0;
  };
  return {
    a: int(),
    b: int() >>> 0,
    c: Math.fround((random() * 2 - 1) * 8),
    pi: Int32Array.from({ length: INPUTS }, int),
    pf: Float32Array.from({ length: INPUTS }, () => Math.fround((random() * 2 - 1) * 8)),
  };
}

/** The outputs of one launch, or the trap the host device reported. */
interface Outputs {
  out: Int32Array;
  fo: Float32Array;
  acc: Int32Array;
}

async function run(
  device: Device,
  library: Awaited<ReturnType<Runtime['register']>>,
  kernel: FuzzKernel,
  inputs: Inputs,
): Promise<Outputs | { trap: string }> {
  const invocations = teamCount(kernel.grid) * threadCount(kernel.grid);
  const outInit = new Int32Array(invocations * SLOTS);
  const foInit = new Float32Array(invocations * SLOTS);
  const accInit = Int32Array.of(0, -1, 0, 0);
  const k = await device.kernel(library, kernel.name);
  const q = device.queue();
  const sizes = [inputs.pi.byteLength, inputs.pf.byteLength, outInit.byteLength, foInit.byteLength, accInit.byteLength];
  const buffers = await Promise.all(sizes.map((bytes) => device.alloc(bytes)));
  try {
    const [pi, pf, out, fo, acc] = buffers as [
      (typeof buffers)[0],
      (typeof buffers)[0],
      (typeof buffers)[0],
      (typeof buffers)[0],
      (typeof buffers)[0],
    ];
    q.write(pi, inputs.pi);
    q.write(pf, inputs.pf);
    q.write(out, outInit);
    q.write(fo, foInit);
    q.write(acc, accInit);
    q.launch(k, kernel.grid, [inputs.a, inputs.b | 0, inputs.c, pi, pf, out, fo, acc]);
    const result = { out: new Int32Array(outInit.length), fo: new Float32Array(foInit.length), acc: new Int32Array(4) };
    q.read(out, result.out);
    q.read(fo, result.fo);
    q.read(acc, result.acc);
    try {
      await q.finish();
    } catch (error) {
      if (error instanceof OffloadError && error.code === 'KERNEL_TRAP') return { trap: error.message };
      throw error;
    }
    return result;
  } finally {
    await Promise.all(buffers.map(async (buffer) => buffer.free()));
    await q.destroy();
  }
}

/**
 * How far an f32 output may differ: WGSL may fuse a multiply and an add, its division and
 * transcendentals are within a few ulp, and it may flush denormals. A NaN or an infinity on the
 * host device is not compared (WGSL lets an implementation assume there are none).
 */
const F32_TOLERANCE = 1e-3;

/** Where two runs differ ('' when they agree). */
function difference(expected: Outputs, got: Outputs): string {
  for (const name of ['out', 'acc'] as const) {
    for (let i = 0; i < expected[name].length; i++) {
      if (expected[name][i] !== got[name][i])
        return `${name}[${i}]: ${got[name][i]} on the WebGPU device, ${expected[name][i]} on the host device`;
    }
  }
  for (let i = 0; i < expected.fo.length; i++) {
    const e = expected.fo[i]!;
    const g = got.fo[i]!;
    if (!Number.isFinite(e)) continue;
    if (!(Math.abs(g - e) <= F32_TOLERANCE * Math.max(1, Math.abs(e))))
      return `fo[${i}]: ${g} on the WebGPU device, ${e} on the host device`;
  }
  return '';
}

export interface Mismatch {
  kernel: string;
  source: string;
  grid: Grid;
  inputs: Inputs;
  difference: string;
}

export interface BatchReport {
  generated: number;
  translated: number;
  /** Kernels the build declined, by the note's reason (without the kernel's line). */
  declined: Map<string, number>;
  /** Kernels the host device trapped on (a division of i32.MIN_VALUE by -1): not compared. */
  trapped: number;
  mismatches: Mismatch[];
}

/** A fresh directory for builds; removed by the caller. */
export const fuzzDirectory = (): Promise<string> => mkdtemp(join(tmpdir(), 'offload-kernel-fuzz-'));

/** Builds `kernels` into one bundle and runs each translated one on both devices with `inputs`. */
export async function runBatch(
  runtime: Runtime,
  dir: string,
  label: string,
  kernels: FuzzKernel[],
  inputsOf: (kernel: FuzzKernel) => Inputs,
): Promise<BatchReport> {
  const host = runtime.devices.find((device) => device.info.plugin === 'host')!;
  const gpu = runtime.devices.find((device) => device.info.plugin === 'webgpu')!;
  const file = join(dir, `${label}.ts`);
  await writeFile(file, fileSource(kernels));
  // Unoptimized: binaryen's -O3 is most of a build's time, and the translation reads the syntax, not the wasm.
  const built = await buildBundle({ sources: [file], output: join(dir, label), optimize: false });
  const image = decodeBundle(built.bundle).images.find((candidate) => candidate.info.format === 'wgsl');
  const translated = new Set(image?.info.kernels?.map((kernel) => kernel.name) ?? []);
  const declined = new Map<string, number>();
  for (const note of built.notes) declined.set(note.reason, (declined.get(note.reason) ?? 0) + 1);
  const report: BatchReport = {
    generated: kernels.length,
    translated: translated.size,
    declined,
    trapped: 0,
    mismatches: [],
  };
  const library = await runtime.register(built.path);
  const source = fileSource(kernels);
  try {
    // A translation WGSL refuses fails the whole image: that kernel is a mismatch, the others run in a new bundle.
    const first = kernels.find((kernel) => translated.has(kernel.name));
    const loaded =
      first &&
      (await gpu.kernel(library, first.name).then(
        () => '',
        (error: Error) => error.message,
      ));
    if (first && loaded) {
      const text = new TextDecoder().decode(image!.bytes);
      const culprit = culpritOf(loaded, text) ?? first.name;
      const kernel = kernels.find((candidate) => candidate.name === culprit)!;
      const rest = await runBatch(
        runtime,
        dir,
        `${label}x`,
        kernels.filter((candidate) => candidate !== kernel),
        inputsOf,
      );
      rest.generated++;
      rest.translated++;
      rest.mismatches.unshift({
        kernel: culprit,
        source: kernelOnly(source, culprit),
        grid: kernel.grid,
        inputs: inputsOf(kernel),
        difference: `the WebGPU device cannot load its translation: ${loaded}`,
      });
      return rest;
    }
    for (const kernel of kernels) {
      if (!translated.has(kernel.name)) continue;
      const inputs = inputsOf(kernel);
      const expected = await run(host, library, kernel, inputs);
      if ('trap' in expected) {
        report.trapped++;
        continue;
      }
      let got: Outputs | { trap: string };
      try {
        got = await run(gpu, library, kernel, inputs);
      } catch (error) {
        report.mismatches.push({
          kernel: kernel.name,
          source: kernelOnly(source, kernel.name),
          grid: kernel.grid,
          inputs,
          difference: `the WebGPU device failed: ${(error as Error).message}`,
        });
        continue;
      }
      const differs = 'trap' in got ? `the WebGPU device trapped: ${got.trap}` : difference(expected, got);
      if (differs !== '')
        report.mismatches.push({
          kernel: kernel.name,
          source: kernelOnly(source, kernel.name),
          grid: kernel.grid,
          inputs,
          difference: differs,
        });
    }
  } finally {
    await library.unregister();
    await rm(built.path, { force: true });
  }
  return report;
}

/** The kernel a load error names: `kernel 'k9'`, or the translated function holding the WGSL line it quotes. */
function culpritOf(message: string, wgsl: string): string | undefined {
  const named = /kernel '(\w+)'/.exec(message)?.[1];
  if (named !== undefined) return named;
  const line = Number(/\.wgsl:(\d+):\d+/.exec(message)?.[1] ?? NaN);
  if (!Number.isInteger(line)) return undefined;
  const before = wgsl.split('\n').slice(0, line).reverse();
  return before.map((text) => /^fn (k\w*)\(/.exec(text)?.[1]).find((name) => name !== undefined);
}

/** One kernel's text out of a file (with the prelude). */
function kernelOnly(source: string, name: string): string {
  const start = source.indexOf(`export function ${name}(`);
  const end = source.indexOf('\n}\n', start);
  return `${PRELUDE}${source.slice(start, end + 3)}`;
}

/** Every kernel one step smaller than `kernel`: a statement removed, or an expression replaced by an operand or a zero. */
function smaller(kernel: FuzzKernel): FuzzKernel[] {
  const out: Node[] = [];
  const visit = (node: Node, replace: (next: Node) => Node): void => {
    node.kids.forEach((kid, i) => {
      const withKid = (next: Node): Node => replace({ ...node, kids: node.kids.map((k, j) => (j === i ? next : k)) });
      if (node.kind === 'block' && kid.kind === 'stmt')
        out.push(replace({ ...node, kids: node.kids.filter((_, j) => j !== i) }));
      if (kid.kind === 'expr') {
        for (const grand of kid.kids) if (grand.kind === 'expr' && grand.type === kid.type) out.push(withKid(grand));
        if (kid.kids.length > 0 && kid.type !== undefined)
          out.push(
            withKid(
              leaf(kid.type, kid.type === 'bool' ? 'false' : kid.type === 'f32' ? '(<f32>0.0)' : `(<${kid.type}>0)`),
            ),
          );
      }
      visit(kid, withKid);
    });
  };
  visit(kernel.body, (next) => next);
  return out.map((body, i) => ({ ...kernel, name: `${kernel.name}_s${i}`, body }));
}

function size(node: Node): number {
  return 1 + node.kids.reduce((sum, kid) => sum + size(kid), 0);
}

/**
 * Shrinks a mismatching kernel: each round builds every one-step-smaller kernel in one bundle
 * and keeps the smallest that still mismatches, until none does (or `rounds` run out).
 */
export async function shrink(
  runtime: Runtime,
  dir: string,
  kernel: FuzzKernel,
  inputs: Inputs,
  rounds = 12,
): Promise<Mismatch | undefined> {
  let best: { kernel: FuzzKernel; mismatch: Mismatch } | undefined;
  let current = kernel;
  for (let round = 0; round < rounds; round++) {
    const candidates = smaller(current).slice(0, 120);
    if (candidates.length === 0) break;
    const report = await runBatch(runtime, dir, `shrink${round}`, candidates, () => inputs);
    const failing = report.mismatches
      .map((mismatch) => ({ mismatch, kernel: candidates.find((c) => c.name === mismatch.kernel)! }))
      .sort((x, y) => size(x.kernel.body) - size(y.kernel.body));
    if (failing.length === 0) break;
    best = failing[0]!;
    current = best.kernel;
  }
  return best?.mismatch;
}

/** A mismatch as the fuzzer prints it: the kernel, its grid and inputs, and where the outputs differ. */
export function formatMismatch(mismatch: Mismatch): string {
  const { inputs } = mismatch;
  return [
    `kernel ${mismatch.kernel}: ${mismatch.difference}`,
    `grid: ${JSON.stringify(mismatch.grid)}`,
    `inputs: a=${inputs.a} b=${inputs.b} c=${inputs.c} pi=[${[...inputs.pi].join(', ')}] pf=[${[...inputs.pf].join(', ')}]`,
    mismatch.source,
  ].join('\n');
}
