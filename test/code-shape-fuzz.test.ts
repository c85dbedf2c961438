/**
 * The reader that decides a kernel is provably short (src/build/wasm-code-shape.ts), against
 * modules binaryen builds at random: loops with and without back-edges, forward branches, calls
 * (to the device's quick imports, to the slow ones, to other functions, to itself), indirect
 * calls, loads and stores, bulk memory, atomics, SIMD, nested blocks and ifs. An oracle written
 * here from the generated tree says what each kernel is; the reader must agree, and in
 * particular never call a kernel bounded that has a loop or a call it cannot bound. The same
 * modules with bytes flipped must give a shape or an OffloadError, nothing else. Seeded
 * (CODE_SHAPE_FUZZ_SEED); a failure is shrunk to a small tree, printed, and kept below as a
 * regression case. binaryen comes with AssemblyScript (our kernel compiler).
 */
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import type * as Binaryen from 'binaryen';
import { OffloadError } from '../src/errors.js';
import { readCodeShapes, type CodeShape } from '../src/build/wasm-code-shape.js';

/** The imports a kernel may call: the first two return at once, the others do not (trace may block, barrier switches threads, host_call waits for the program). */
const IMPORTS = [
  { module: 'env', name: 'abort', quick: true },
  { module: 'offload', name: 'team_id', quick: true },
  { module: 'env', name: 'trace', quick: false },
  { module: 'offload', name: 'barrier', quick: false },
  { module: 'offload', name: 'host_call', quick: false },
] as const;
const HOST_CALL = 4;

/** A statement of a generated function body (every one leaves nothing on the stack). */
type Node =
  | { k: 'store' | 'load' | 'numeric' | 'simd' | 'fence' | 'rmw' | 'wait' | 'fill' | 'copy' | 'indirect' | 'select' }
  | { k: 'import'; index: number }
  | { k: 'call'; fn: number }
  | { k: 'block'; body: Node[]; exit: boolean }
  | { k: 'if'; then: Node[]; else?: Node[] }
  | { k: 'loop'; body: Node[]; backEdge: boolean };

/** A module: function i's body is functions[i]; each is exported as `k<i>`. */
type Program = Node[][];

class Random {
  constructor(private state: number) {
    if (this.state === 0) this.state = 0x9e3779b9;
  }
  next(): number {
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state;
  }
  below(n: number): number {
    return this.next() % n;
  }
}

const LEAVES = [
  'store',
  'load',
  'numeric',
  'simd',
  'fence',
  'rmw',
  'wait',
  'fill',
  'copy',
  'indirect',
  'select',
] as const;

function generate(random: Random): Program {
  const functions = 1 + random.below(4);
  const statements = (depth: number): Node[] => {
    const nodes: Node[] = [];
    for (let n = random.below(4); n > 0; n--) nodes.push(statement(depth));
    return nodes;
  };
  const statement = (depth: number): Node => {
    const roll = random.below(depth > 3 ? 10 : 20);
    if (roll < 5) return { k: 'numeric' };
    if (roll < 7) return { k: 'import', index: random.below(IMPORTS.length) };
    if (roll === 7) return { k: 'call', fn: random.below(functions) };
    if (roll < 10) {
      // The rarer leaves: each of them makes a kernel unbounded or synchronising.
      return random.below(3) === 0
        ? { k: LEAVES[random.below(LEAVES.length)]! }
        : { k: random.below(2) ? 'load' : 'store' };
    }
    if (roll < 13) return { k: 'block', body: statements(depth + 1), exit: random.below(2) === 0 };
    if (roll < 16)
      return random.below(2)
        ? { k: 'if', then: statements(depth + 1) }
        : { k: 'if', then: statements(depth + 1), else: statements(depth + 1) };
    // Loops are the rarest, so that many kernels are bounded.
    if (roll < 17) return { k: 'loop', body: statements(depth + 1), backEdge: random.below(2) === 0 };
    return { k: 'numeric' };
  };
  return Array.from({ length: functions }, () => statements(0));
}

/** What the oracle says of each kernel, from the tree alone. */
interface Expected {
  bounded: boolean;
  synchronizes: boolean;
  callsHost: boolean;
}

function oracle(program: Program): Expected[] {
  const own = program.map((body) => {
    const facts = { loops: false, slowImport: false, calls: new Set<number>(), indirect: false, bulk: false };
    const sync = { waits: false, atomics: false, host: false };
    const walk = (nodes: readonly Node[]): void => {
      for (const node of nodes) {
        switch (node.k) {
          case 'loop':
            facts.loops = true;
            walk(node.body);
            break;
          case 'block':
            walk(node.body);
            break;
          case 'if':
            walk(node.then);
            walk(node.else ?? []);
            break;
          case 'import':
            if (!IMPORTS[node.index]!.quick) facts.slowImport = true;
            if (node.index === HOST_CALL) sync.host = true;
            break;
          case 'call':
            facts.calls.add(node.fn);
            break;
          case 'indirect':
            facts.indirect = true;
            break;
          case 'fill':
          case 'copy':
            facts.bulk = true;
            break;
          case 'wait':
            sync.waits = true;
            break;
          case 'rmw':
            sync.atomics = true;
            break;
          default:
            break;
        }
      }
    };
    walk(body);
    return { ...facts, ...sync };
  });
  const reachable = (start: number): number[] => {
    const seen = new Set([start]);
    const stack = [start];
    while (stack.length > 0) {
      for (const callee of own[stack.pop()!]!.calls) {
        if (seen.has(callee)) continue;
        seen.add(callee);
        stack.push(callee);
      }
    }
    return [...seen];
  };
  return own.map((facts, index) => {
    const closure = reachable(index).map((i) => own[i]!);
    return {
      bounded:
        !facts.loops && !facts.slowImport && facts.calls.size === 0 && !facts.indirect && !facts.bulk && !facts.waits,
      synchronizes: closure.some((f) => f.waits || f.atomics || f.indirect),
      callsHost: closure.some((f) => f.host || f.indirect),
    };
  });
}

let binaryen: typeof Binaryen.default;

/** The module of `program`, built with binaryen's API and written by its binary writer (no optimisation). */
function build(program: Program): Uint8Array {
  const m = new binaryen.Module();
  try {
    m.setFeatures(binaryen.Features.All);
    m.setMemory(1, 1, 'memory', [], true);
    m.addTable('table', 1, 1);
    const none = binaryen.none;
    const i32 = binaryen.i32;
    IMPORTS.forEach((imp, i) => m.addFunctionImport(`import${i}`, imp.module, imp.name, none, none));
    let labels = 0;
    const zero = () => m.i32.const(0);
    // This binaryen takes an i64 constant as one bigint (two numbers abort).
    const i64 = (value: bigint) => m.i64.const(value);
    const emit = (nodes: readonly Node[], outer: readonly string[]): Binaryen.default.ExpressionRef[] =>
      nodes.map((node) => expression(node, outer));
    const expression = (node: Node, outer: readonly string[]): Binaryen.default.ExpressionRef => {
      switch (node.k) {
        case 'numeric':
          return m.drop(m.i32.add(m.i32.const(1), m.i32.mul(m.i32.const(2), m.i32.const(3))));
        case 'select':
          return m.drop(m.select(zero(), m.f64.const(1.5), m.f64.const(2.5)));
        case 'load':
          return m.drop(m.i32.load(4, 4, zero()));
        case 'store':
          return m.i64.store(8, 8, zero(), i64(1n));
        case 'simd':
          return m.v128.store(16, 16, zero(), m.i32x4.splat(m.i32.load(0, 4, zero())));
        case 'fence':
          return m.atomic.fence();
        case 'rmw':
          return m.drop(m.i32.atomic.rmw.add(0, zero(), m.i32.const(1)));
        case 'wait':
          return m.drop(m.memory.atomic.wait32(zero(), zero(), i64(0n)));
        case 'fill':
          return m.memory.fill(zero(), zero(), m.i32.const(16));
        case 'copy':
          return m.memory.copy(zero(), m.i32.const(16), m.i32.const(16));
        case 'indirect':
          return m.call_indirect('table', zero(), [], none, none);
        case 'import':
          return m.call(`import${node.index}`, [], none);
        case 'call':
          return m.call(`k${node.fn}`, [], none);
        case 'block': {
          const label = `b${labels++}`;
          const body = emit(node.body, [...outer, label]);
          // A forward branch out of this block (or an outer one), conditional so no code after it is dead.
          if (node.exit) body.push(m.br(outer.length > 0 && labels % 2 ? outer[0]! : label, m.i32.load(0, 4, zero())));
          return m.block(label, body.length > 0 ? body : [m.nop()], none);
        }
        case 'if':
          return m.if(
            m.i32.load(0, 4, zero()),
            m.block(null, [m.nop(), ...emit(node.then, outer)], none),
            node.else ? m.block(null, [m.nop(), ...emit(node.else, outer)], none) : undefined,
          );
        case 'loop': {
          const label = `l${labels++}`;
          const body = emit(node.body, outer);
          if (node.backEdge) body.push(m.br(label, m.i32.load(0, 4, zero())));
          return m.loop(label, m.block(null, [m.nop(), ...body], none));
        }
      }
    };
    program.forEach((body, i) => {
      m.addFunction(`k${i}`, none, none, [i32], m.block(null, [m.nop(), ...emit(body, [])], none));
      m.addFunctionExport(`k${i}`, `k${i}`);
    });
    m.addActiveElementSegment('table', 'elements', ['k0'], m.i32.const(0));
    return m.emitBinary();
  } finally {
    m.dispose();
  }
}

const kernelNames = (program: Program) => program.map((_, i) => `k${i}`);

/** The first kernel on which the reader and the oracle disagree, as a message; undefined when they agree. */
function disagreement(program: Program): string | undefined {
  const bytes = build(program);
  const shapes = readCodeShapes(bytes, kernelNames(program));
  const expected = oracle(program);
  for (const [i, want] of expected.entries()) {
    const shape: CodeShape = shapes.get(`k${i}`)!;
    const got = { bounded: shape.bounded, synchronizes: shape.synchronizes, callsHost: shape.callsHost };
    if (got.bounded !== want.bounded || got.synchronizes !== want.synchronizes || got.callsHost !== want.callsHost)
      return `k${i}: the reader says ${JSON.stringify(got)}, the oracle ${JSON.stringify(want)}`;
  }
  return undefined;
}

/** Smaller programs that still fail: each statement removed, each compound statement replaced by its body. */
function* smaller(program: Program): Generator<Program> {
  const lists = (nodes: Node[], replace: (nodes: Node[]) => Program): Generator<Program> =>
    (function* () {
      for (let i = 0; i < nodes.length; i++) {
        yield replace([...nodes.slice(0, i), ...nodes.slice(i + 1)]);
        const node = nodes[i]!;
        const inner =
          node.k === 'block' || node.k === 'loop' ? [node.body] : node.k === 'if' ? [node.then, node.else ?? []] : [];
        for (const body of inner) yield replace([...nodes.slice(0, i), ...body, ...nodes.slice(i + 1)]);
        for (const [which, body] of inner.entries())
          yield* lists(body, (shrunk) =>
            replace([
              ...nodes.slice(0, i),
              node.k === 'if'
                ? which === 0
                  ? { ...node, then: shrunk }
                  : { ...node, else: shrunk }
                : { ...(node as { k: 'block' | 'loop'; body: Node[] } & Node), body: shrunk },
              ...nodes.slice(i + 1),
            ]),
          );
      }
    })();
  if (program.length > 1) yield program.slice(0, -1);
  for (const [f, body] of program.entries())
    yield* lists(body, (shrunk) => program.map((b, i) => (i === f ? shrunk : b)));
}

function shrink(program: Program): Program {
  let current = program;
  for (let improved = true; improved;) {
    improved = false;
    for (const candidate of smaller(current)) {
      let fails: boolean;
      try {
        fails = disagreement(candidate) !== undefined;
      } catch {
        fails = false; // a candidate binaryen refuses (a call to a function no longer there)
      }
      if (fails) {
        current = candidate;
        improved = true;
        break;
      }
    }
  }
  return current;
}

/** Shrunk failures found by this fuzzer, kept: each must agree with the oracle. */
const REGRESSIONS: Program[] = [];

describe('the provably-short reader against random binaryen modules', { timeout: 300_000 }, () => {
  before(async () => {
    binaryen = (await import('binaryen')).default;
  });

  it('agrees with the oracle on the kept regression cases', () => {
    for (const program of REGRESSIONS) assert.equal(disagreement(program), undefined, JSON.stringify(program));
  });

  it('agrees with an oracle built from the generated tree, over thousands of modules', () => {
    const seed = process.env.CODE_SHAPE_FUZZ_SEED ? Number(process.env.CODE_SHAPE_FUZZ_SEED) : Date.now() >>> 0;
    const random = new Random(seed);
    const cases = process.env.CODE_SHAPE_FUZZ_CASES ? Number(process.env.CODE_SHAPE_FUZZ_CASES) : 2000;
    let bounded = 0;
    let unbounded = 0;
    for (let round = 0; round < cases; round++) {
      const program = generate(random);
      const wrong = disagreement(program);
      if (wrong !== undefined) {
        const small = shrink(program);
        assert.fail(
          `seed ${seed}, case ${round}: ${disagreement(small) ?? wrong}\nshrunk program (add it to REGRESSIONS): ${JSON.stringify(small)}`,
        );
      }
      for (const want of oracle(program)) {
        if (want.bounded) bounded++;
        else unbounded++;
      }
    }
    // The generator reaches both answers often: a fuzzer that only ever saw loops would prove nothing.
    assert.ok(bounded > cases / 10 && unbounded > cases / 10, `seed ${seed}: ${bounded} bounded, ${unbounded} not`);
  });

  it('never crashes on the same modules with bytes flipped: a shape or an OffloadError', () => {
    const seed = process.env.CODE_SHAPE_FUZZ_SEED ? Number(process.env.CODE_SHAPE_FUZZ_SEED) : Date.now() >>> 0;
    const random = new Random(seed ^ 0x5bd1e995);
    for (let round = 0; round < 1000; round++) {
      const program = generate(random);
      const bytes = build(program);
      for (let flips = 1 + random.below(4); flips > 0; flips--)
        bytes[8 + random.below(bytes.length - 8)] = random.below(256);
      try {
        const shapes = readCodeShapes(bytes, kernelNames(program));
        for (const shape of shapes.values()) assert.equal(typeof shape.bounded, 'boolean', `seed ${seed}`);
      } catch (error) {
        assert.ok(error instanceof OffloadError, `seed ${seed}, case ${round}: ${String(error)}`);
      }
    }
  });
});
