/**
 * Translates the kernel subset of AssemblyScript to WGSL, by the WGSL kernel ABI
 * (docs/wgsl-abi.md), so that one kernel source runs on the host and the WebGPU devices. It reads
 * the compiler's own syntax trees and resolved types (compiler-worker.js sends them as
 * FunctionSyntax); README "One kernel source for every device" states the subset.
 *
 * How memory maps: a pointer parameter (`usize`) is a storage buffer of 32-bit words bound from
 * the pointer's offset, so in WGSL the pointer's value is 0 and an address traced back to it
 * (`x + offset`, a local computed from it) is a byte offset into its binding; `load<T>`/`store<T>`
 * at such an address index the binding's words (1- and 2-byte accesses shift and mask within
 * them, stores atomically so that neighbouring bytes written by other invocations survive). A
 * kernel that does anything else (i64, f64, addresses not traced to one parameter, traps,
 * printing, allocation) is not translated: the build reports it as a TranslationNote and the
 * kernel stays on the devices that run wasm.
 */
import type { ConstantSyntax, FunctionSyntax, KernelSignature, SyntaxNode } from './compiler-job.js';
import type { TranslationNote } from '../image/manifest.js';
import { TEAM_MEMORY_OVERRIDE } from './wgsl-kernels.js';
import {
  TRANSLATED_THREADS,
  TRANSLATED_THREADS_XYZ,
  TEAM_MEMORY_BASE,
  TEAM_MEMORY_WORDS,
  isConstant,
  keepsConstant,
  MAX_DEPTH,
  GRID_VARS,
  ITEM_VARS,
  ITEM_COUNT_NAMES,
  TYPED_POINTER,
  ARRAY_ELEMENTS,
  DEVICE_FUNCTIONS,
  DEVICE_PREFIX,
  MATH_BUILTINS,
  MATHF,
  MATHF_CONSTANTS,
  ATOMIC_RMW,
  SUPPORT_FUNCTIONS,
  atRunTime,
  atRunTimeIfConstant,
  mathName,
  MEMORY_TYPES,
  SMALL_INTEGERS,
  WGSL_RESERVED,
  wgslType,
  type Ty,
  type Value,
} from './wgsl-builtins.js';
import {
  SIMD_CONSTRUCTORS,
  SIMD_HELPERS,
  SIMD_MEMORY,
  SIMD_OPERATIONS,
  V128,
  type SimdOperation,
} from './wgsl-simd.js';
import { FAULT_BINDING_NAME, FAULT_ELEMENT_TYPES, POINTER_BYTES_PREFIX } from '../image/manifest.js';

export type { TranslationNote };

export interface Translation {
  /** The WGSL module of the translated kernels ('' when none translates). */
  wgsl: string;
  /** The kernels translated, in the order given. */
  kernels: string[];
  /** One per kernel that stays wasm-only, in the order given. */
  notes: TranslationNote[];
}

/** An untranslatable construct: the line and the reason (caught per kernel into a note). */
class Untranslatable extends Error {
  constructor(
    readonly line: number,
    reason: string,
  ) {
    super(reason);
  }
}

const fail = (node: { line: number }, reason: string): never => {
  throw new Untranslatable(node.line, reason);
};

/** A variable in scope: its WGSL name and type, and the pointer parameter an address derives from. */
interface Binding {
  wgsl: string;
  type: Ty;
  base?: string;
  constant: boolean;
  /** The WGSL name of a constant holding the value / 4 (see Value.words). */
  words?: string;
  /** For a typed pointer parameter (`ptr<T>`): T, the type its elements `x[i]` have. */
  element?: string;
}

/** What one kernel's translation found it needs of its pointer bindings. */
interface MemoryUse {
  written: Set<string>;
  atomic: Set<string>;
  /** Typed pointers used other than as `x[i]` (their binding stays 32-bit words). */
  raw?: Set<string>;
}

/**
 * Translates every kernel of `kernels` that the subset covers (all but those in `skip`, which a
 * hand-written WGSL file defines).
 * @param display turns a compiler source path into the path to show in notes.
 */
export function translateKernels(
  sources: { functions: FunctionSyntax[]; constants: ConstantSyntax[] },
  kernels: KernelSignature[],
  display: (source: string) => string,
  skip: ReadonlySet<string> = new Set(),
  options: { teamMemoryDeclared?: boolean } = {},
): Translation {
  const { functions } = sources;
  const byInternal = new Map(functions.map((fn) => [fn.internalName, fn]));
  const constants = new Map(sources.constants.map((constant) => [constant.internalName, constant]));
  const helpers = new Map<string, { code: string; barrier: boolean } | { error: Untranslatable }>();
  const chunks: string[] = [];
  const translated: string[] = [];
  const notes: TranslationNote[] = [];
  /** Translates a called function of the sources once; its failure is the caller's, naming where in it. */
  const helper = (internalName: string, stack: string[]): { fn: FunctionSyntax; barrier: boolean } => {
    const fn = byInternal.get(internalName)!;
    let known = helpers.get(internalName);
    if (known === undefined) {
      if (stack.includes(internalName))
        throw new Untranslatable(fn.line, `calls '${fn.name}' recursively (WGSL has no recursion)`);
      try {
        if (fn.body === null || fn.params === null) throw new Untranslatable(fn.line, fn.error ?? 'has no body');
        const translator = new FunctionTranslator(
          fn,
          'helper',
          byInternal,
          constants,
          (name) => helper(name, [...stack, internalName]),
          { written: new Set(), atomic: new Set() },
        );
        const code = translator.translate();
        known = { code, barrier: translator.barriers > 0 };
      } catch (error) {
        if (!(error instanceof Untranslatable)) throw error;
        known = {
          error: new Untranslatable(
            error.line,
            `calls '${fn.name}', which at ${display(fn.source)}:${error.line} ${error.message}`,
          ),
        };
      }
      helpers.set(internalName, known);
    }
    if ('error' in known) throw known.error;
    return { fn, barrier: known.barrier };
  };
  for (const kernel of kernels) {
    if (skip.has(kernel.name)) continue;
    // A per-item kernel: its body (the function the build renamed) is the entry point's, once per item.
    const body = kernel.wrapped === undefined ? undefined : byInternal.get(kernel.wrapped.body);
    const fn =
      body !== undefined
        ? { ...body, name: kernel.name }
        : functions.find((candidate) => candidate.name === kernel.name && candidate.source === kernel.source);
    const file = display(kernel.source);
    if (!isPlainName(kernel.name)) {
      notes.push({
        kernel: kernel.name,
        file,
        line: fn?.line ?? 1,
        reason: `is named '${kernel.name}', which WGSL reserves or the translation uses (a WGSL entry point keeps the kernel's name)`,
      });
      continue;
    }
    if (fn === undefined || fn.body === null || fn.params === null) {
      notes.push({
        kernel: kernel.name,
        file,
        line: fn?.line ?? 1,
        reason: fn?.error ?? 'its syntax tree is not available',
      });
      continue;
    }
    try {
      const use: MemoryUse = { written: new Set(), atomic: new Set(), raw: new Set() };
      const helperCall = (name: string) => helper(name, [fn.internalName]);
      const role = kernel.wrapped?.perItem ? 'items' : 'kernel';
      // Checked builds' pointer lengths: every ptr<T> access tests its index against them (offload_in_bounds).
      const lengths = (kernel.wrapped?.lengths ?? []).map((name) => `${POINTER_BYTES_PREFIX}${name}`);
      // The first pass learns which bindings are written and which need atomics; the second emits with that.
      new FunctionTranslator(fn, role, byInternal, constants, helperCall, use, lengths).translate();
      chunks.push(new FunctionTranslator(fn, role, byInternal, constants, helperCall, use, lengths).translate());
      translated.push(kernel.name);
    } catch (error) {
      // Source nested deeper than the translator's recursion reaches stays wasm-only too.
      if (error instanceof RangeError)
        notes.push({ kernel: kernel.name, file, line: fn.line, reason: 'is nested too deeply to translate' });
      else if (error instanceof Untranslatable)
        notes.push({ kernel: kernel.name, file, line: error.line, reason: error.message });
      else throw error;
    }
  }
  if (translated.length === 0) return { wgsl: '', kernels: [], notes };
  const used = [...helpers.values()].flatMap((helper) => ('code' in helper ? [helper.code] : []));
  const header = [
    `// Translated by offload build from AssemblyScript (docs/wgsl-abi.md): ${translated.join(', ')}.`,
    `override ${TRANSLATED_THREADS}: u32 = 64;`,
    ...TRANSLATED_THREADS_XYZ.slice(1).map((name) => `override ${name}: u32 = 1;`),
    ...[...GRID_VARS, ...ITEM_VARS].map((name) => `var<private> ${name}: vec3u;`),
  ];
  if ([...chunks, ...used].some((code) => code.includes(TEAM_MEMORY_WORDS))) {
    // A hand-written file may declare the override already: one module holds both.
    if (!options.teamMemoryDeclared) header.push(`override ${TEAM_MEMORY_OVERRIDE}: u32 = 16;`);
    header.push(`var<workgroup> ${TEAM_MEMORY_WORDS}: array<u32, ${TEAM_MEMORY_OVERRIDE} / 4u>;`);
  }
  // The support functions the kernels call, and those these call (offload_is_nan, which comes first).
  const calls = (texts: string[], name: string): boolean => texts.some((text) => text.includes(`${name}(`));
  const called = new Set(Object.keys(SUPPORT_FUNCTIONS).filter((name) => calls([...chunks, ...used], name)));
  for (let grew = true; grew;) {
    grew = false;
    for (const name of Object.keys(SUPPORT_FUNCTIONS))
      if (
        !called.has(name) &&
        calls(
          [...called].map((caller) => SUPPORT_FUNCTIONS[caller]!),
          name,
        )
      ) {
        called.add(name);
        grew = true;
      }
  }
  const support = Object.entries(SUPPORT_FUNCTIONS).flatMap(([name, code]) => (called.has(name) ? [code] : []));
  if (support.some((code) => code.startsWith('fn offload_fault_at(')))
    header.push(
      `@group(1) @binding(0) var<storage, read_write> ${FAULT_BINDING_NAME}: array<atomic<u32>, 8>;`,
      'var<private> offload_spent: u32;',
      'var<private> offload_budget: u32;',
    );
  return { wgsl: [...header, ...support, ...used, ...chunks].join('\n') + '\n', kernels: translated, notes };
}

/** Translates one function: a kernel (an entry point with its bindings) or a helper (a WGSL function). */
class FunctionTranslator {
  private readonly scopes: Map<string, Binding>[] = [];
  private readonly pointers = new Map<string, string>();
  /** Typed pointer parameters bound as arrays of their element type (`x[i]` indexes them directly). */
  private readonly typedArrays = new Set<string>();
  private temps = 0;
  private readonly returnType: Ty;
  /** How deeply the expression and statement being translated nest. */
  private depth = 0;
  /** The top-level constants being inlined, innermost last. */
  private readonly inlining: string[] = [];
  /**
   * Statements that must run before the expression being translated (a conditional with effects
   * becomes an `if` that sets a variable): one list per statement or arm being translated, innermost last.
   */
  private readonly pending: string[][] = [];
  /**
   * How many constructs that have an effect or could trap under wasm (memory accesses, atomics,
   * calls of kernel functions) were translated so far: an expression is free of them when this
   * count did not move while translating it.
   */
  private effects = 0;
  /** How many barriers (workgroupBarrier, or calls of functions that hold one) were translated so far. */
  barriers = 0;
  /** A checked build's typed pointers: the WGSL name of each one's byte length and its launch parameter's index. */
  private readonly checked = new Map<string, { bytes: string; param: number }>();
  /** Whether a for-loop's update is being translated (a checked store, an `if`, cannot stand there). */
  private inUpdate = false;

  constructor(
    private readonly fn: FunctionSyntax,
    /** `items`: a per-item kernel's body, as an entry point that runs it for one item per invocation. */
    private readonly role: 'kernel' | 'helper' | 'items',
    private readonly functions: Map<string, FunctionSyntax>,
    private readonly constants: Map<string, ConstantSyntax>,
    private readonly helper: (internalName: string) => { fn: FunctionSyntax; barrier: boolean },
    private readonly memory: MemoryUse,
    /** Parameters (i32) the entry point takes after its own and before any item counts. */
    private readonly extraParams: readonly string[] = [],
  ) {
    this.returnType = role !== 'helper' ? 'void' : typeOf(fn.returnType!, fn, 'a result');
    this.pointers.set(TEAM_MEMORY_BASE, TEAM_MEMORY_WORDS);
  }

  translate(): string {
    const fn = this.fn;
    const params = fn.params!;
    const scope = new Map<string, Binding>();
    this.scopes.push(scope);
    const prologue: string[] = [];
    if (this.role === 'helper') {
      const declared = params.map((param) => {
        const type = typeOf(param.type, fn, `parameter '${param.name}'`);
        const name = this.declare(param.name, type, undefined, false);
        prologue.push(`  var ${name} = ${name}_in;`);
        return `${name}_in: ${wgslType(type)}`;
      });
      const body = this.block(fn.body!, 1);
      const ret = this.returnType === 'void' ? '' : ` -> ${wgslType(this.returnType)}`;
      // WGSL wants a function with a result to end in a return where its last statement may not
      // return (AssemblyScript checked that every path does); one after it would be unreachable.
      const end = this.returnType === 'void' || alwaysReturns(fn.body!) ? '' : `  return ${zero(this.returnType)};\n`;
      return `fn ${helperName(fn)}(${declared.join(', ')})${ret} {\n${prologue.join('\n')}${prologue.length ? '\n' : ''}${body}${end}}\n`;
    }
    const kernel = fn.name;
    const members: string[] = [];
    const bindings: string[] = [];
    let binding = 1;
    const items = this.role === 'items';
    // A per-item kernel takes its body's parameters but the item, and then the item counts.
    const entryParams = [
      ...(items ? params.slice(1) : params),
      ...this.extraParams.map((name) => ({ name, type: 'i32' })),
      ...(items ? ITEM_COUNT_NAMES.map((name) => ({ name, type: 'i32' })) : []),
    ];
    entryParams.forEach((param, index) => {
      const bytes = `${POINTER_BYTES_PREFIX}${param.name}`;
      if (this.extraParams.includes(bytes) && TYPED_POINTER.test(param.type))
        this.checked.set(param.name, { bytes, param: index });
    });
    for (const param of entryParams) {
      const element = TYPED_POINTER.exec(param.type)?.[1];
      if (element !== undefined) {
        // A typed pointer: an array of its element type where only `x[i]` reads and writes it, else words.
        const name = `${kernel}__p_${param.name}`;
        this.pointers.set(param.name, name);
        const written = this.memory.written.has(param.name) || this.memory.atomic.has(param.name);
        const typed =
          ARRAY_ELEMENTS.has(element) && !this.memory.raw?.has(param.name) && !this.memory.atomic.has(param.name);
        if (typed) this.typedArrays.add(param.name);
        const array = typed ? element : this.memory.atomic.has(param.name) ? 'atomic<u32>' : 'u32';
        bindings.push(
          `@group(0) @binding(${binding++}) var<storage, ${written ? 'read_write' : 'read'}> ${name}: array<${array}>;`,
        );
        prologue.push(`  _ = &${name};`);
        const local = this.declare(param.name, 'usize', param.name, false);
        const bound = this.scopes.at(-1)!.get(param.name)!;
        bound.words = `(${local} >> 2u)`;
        bound.element = element;
        prologue.push(`  var ${local}: u32 = 0u;`);
        continue;
      }
      if (param.type === 'usize') {
        const name = `${kernel}__p_${param.name}`;
        this.pointers.set(param.name, name);
        const access =
          this.memory.written.has(param.name) || this.memory.atomic.has(param.name) ? 'read_write' : 'read';
        const element = this.memory.atomic.has(param.name) ? 'atomic<u32>' : 'u32';
        bindings.push(`@group(0) @binding(${binding++}) var<storage, ${access}> ${name}: array<${element}>;`);
        prologue.push(`  _ = &${name};`);
        const local = this.declare(param.name, 'usize', param.name, false);
        this.scopes.at(-1)!.get(param.name)!.words = `(${local} >> 2u)`;
        prologue.push(`  var ${local}: u32 = 0u;`);
        continue;
      }
      const type = typeOf(param.type, fn, `parameter '${param.name}'`);
      const local = this.declare(param.name, type, undefined, false);
      if (type === 'bool') {
        members.push(`${local}: u32`);
        prologue.push(`  var ${local}: bool = ${kernel}__u.${local} != 0u;`);
      } else {
        members.push(`${local}: ${wgslType(type)}`);
        prologue.push(`  var ${local}: ${wgslType(type)} = ${kernel}__u.${local};`);
      }
    }
    const itemLines = items ? this.itemPrologue(params[0]!.name) : [];
    const body = this.block(fn.body!, 1);
    const out: string[] = [];
    if (members.length > 0) {
      // Named apart from the pointers' bindings (`__p_`) and the called functions (`__fn_`).
      out.push(`struct ${kernel}__U { ${members.join(', ')} }`);
      out.push(`@group(0) @binding(0) var<uniform> ${kernel}__u: ${kernel}__U;`);
      prologue.unshift(`  _ = &${kernel}__u;`);
    }
    out.push(...bindings);
    out.push(`@compute @workgroup_size(${TRANSLATED_THREADS_XYZ.join(', ')})`);
    out.push(
      `fn ${kernel}(@builtin(workgroup_id) team: vec3u, @builtin(num_workgroups) teams: vec3u, @builtin(local_invocation_id) thread: vec3u) {`,
    );
    out.push(`  ${GRID_VARS[0]} = team;\n  ${GRID_VARS[1]} = teams;\n  ${GRID_VARS[2]} = thread;`);
    out.push(...prologue);
    out.push(...itemLines);
    return `${out.join('\n')}\n${body}}\n`;
  }

  /**
   * The start of a per-item kernel's entry point: its invocation's linear index over the whole
   * dispatch (teams may span x and y), nothing past the last item (the tail of the last team),
   * and the item's place, the first parameter being its x.
   */
  private itemPrologue(item: string): string[] {
    const [nx, ny, nz] = ITEM_COUNT_NAMES.map((name) => this.scopes[0]!.get(name)!.wgsl);
    const [id, counts] = ITEM_VARS;
    const local = this.declare(item, 'i32', undefined, false);
    return [
      `  let offload_k = ((team.z * teams.y + team.y) * teams.x + team.x) * ${TRANSLATED_THREADS} + thread.x;`,
      `  ${counts} = vec3u(u32(${nx}), u32(${ny}), u32(${nz}));`,
      `  if (offload_k >= ${counts}.x * ${counts}.y * ${counts}.z) {\n    return;\n  }`,
      `  ${id} = vec3u(offload_k % ${counts}.x, (offload_k / ${counts}.x) % ${counts}.y, offload_k / (${counts}.x * ${counts}.y));`,
      `  var ${local}: i32 = i32(${id}.x);`,
    ];
  }

  // ---- scopes ----

  private declare(name: string, type: Ty, base: string | undefined, constant: boolean, words?: string): string {
    const wgsl = isPlainName(name) ? name : `${name.replace(/^_+/, 'u')}_v${this.temps++}`;
    this.scopes.at(-1)!.set(name, { wgsl, type, base, constant, ...(words ? { words } : {}) });
    return wgsl;
  }

  private lookup(node: SyntaxNode): Binding | undefined {
    const name = node.text as string;
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const found = this.scopes[i]!.get(name);
      if (found) return found;
    }
    return undefined;
  }

  private scoped<T>(body: () => T): T {
    this.scopes.push(new Map());
    try {
      return body();
    } finally {
      this.scopes.pop();
    }
  }

  // ---- statements ----

  private block(node: SyntaxNode, depth: number): string {
    return this.scoped(() => {
      const statements = node.k === 'Block' ? (node.statements as SyntaxNode[]) : [node];
      return statements.map((statement) => this.statement(statement, depth)).join('');
    });
  }

  private statement(node: SyntaxNode, depth: number): string {
    if (++this.depth > MAX_DEPTH)
      fail(node, `nests expressions and statements deeper than ${MAX_DEPTH} (WGSL compilers may refuse deeper)`);
    this.pending.push([]);
    try {
      const text = this.statementAt(node, depth);
      const pad = '  '.repeat(depth);
      return (
        this.pending
          .at(-1)!
          .map((line) => `${pad}${line}\n`)
          .join('') + text
      );
    } finally {
      this.pending.pop();
      this.depth--;
    }
  }

  /** Translates with a list of its own for the statements it needs first; returns both. */
  private collect<T>(translate: () => T): { value: T; before: string[] } {
    this.pending.push([]);
    try {
      const value = translate();
      return { value, before: this.pending.at(-1)! };
    } finally {
      this.pending.pop();
    }
  }

  /** Runs `code` before the expression being translated (within the statement that holds it). */
  private hoist(node: SyntaxNode, code: string): void {
    const list = this.pending.at(-1);
    if (list === undefined)
      return fail(
        node,
        'needs a statement to evaluate lazily where WGSL takes only an expression (a top-level constant)',
      );
    list.push(code);
  }

  private statementAt(node: SyntaxNode, depth: number): string {
    const pad = '  '.repeat(depth);
    switch (node.k) {
      case 'Block':
        return `${pad}{\n${this.block(node, depth + 1)}${pad}}\n`;
      case 'Empty':
        return '';
      case 'Variable':
        return (node.declarations as SyntaxNode[])
          .map((declaration) => `${pad}${this.variable(declaration)};\n`)
          .join('');
      case 'Expression':
        return `${pad}${this.simpleStatement(node.expression as SyntaxNode)};\n`;
      case 'If': {
        const condition = this.condition(node.condition as SyntaxNode);
        let out = `${pad}if (${condition}) {\n${this.block(node.ifTrue as SyntaxNode, depth + 1)}${pad}}`;
        if (node.ifFalse) out += ` else {\n${this.block(node.ifFalse as SyntaxNode, depth + 1)}${pad}}`;
        return `${out}\n`;
      }
      case 'For':
        return this.scoped(() => {
          const init = node.initializer as SyntaxNode | null;
          let head = '';
          let hoisted = '';
          if (init?.k === 'Variable' && (init.declarations as SyntaxNode[]).length === 1)
            head = this.variable((init.declarations as SyntaxNode[])[0]!, true);
          else if (init?.k === 'Variable')
            hoisted = (init.declarations as SyntaxNode[]).map((d) => `${pad}  ${this.variable(d)};\n`).join('');
          else if (init?.k === 'Expression') head = this.simpleStatement(init.expression as SyntaxNode);
          else if (init) fail(init, 'has a for-loop initializer WGSL cannot express');
          const test = node.condition ? this.collect(() => this.condition(node.condition as SyntaxNode)) : undefined;
          this.inUpdate = true;
          const step = node.incrementor
            ? this.collect(() => this.simpleStatement(node.incrementor as SyntaxNode))
            : undefined;
          this.inUpdate = false;
          if (step !== undefined && step.before.length > 0)
            fail(
              node.incrementor as SyntaxNode,
              'has a for-loop update that needs statements (a conditional with effects): move it into the body',
            );
          // A condition that needs statements first is checked at the top of the body, as WGSL's for does.
          const lazy = test !== undefined && test.before.length > 0;
          const condition = test === undefined || lazy ? '' : test.value;
          const check = lazy ? `${pad}  ${test.before.join(' ')} if (!(${test.value})) { break; }\n` : '';
          const update = step?.value ?? '';
          const inner = depth + (hoisted ? 2 : 1);
          const body = this.loopBody(node.body as SyntaxNode, inner);
          const loop = `for (${head}; ${condition}; ${update}) {\n${body.guard}${check}${body.code}`;
          return hoisted ? `${pad}{\n${hoisted}${pad}  ${loop}${pad}  }\n${pad}}\n` : `${pad}${loop}${pad}}\n`;
        });
      case 'While': {
        const test = this.collect(() => this.condition(node.condition as SyntaxNode));
        const body = this.loopBody(node.body as SyntaxNode, depth + 1);
        if (test.before.length === 0) return `${pad}while (${test.value}) {\n${body.guard}${body.code}${pad}}\n`;
        // The statements the condition needs run before each check.
        return `${pad}loop {\n${body.guard}${pad}  ${test.before.join(' ')} if (!(${test.value})) { break; }\n${body.code}${pad}}\n`;
      }
      case 'Do': {
        // `continue` in the body goes to the continuing block, where the condition is checked: as in a do-while.
        const loopBody = this.loopBody(node.body as SyntaxNode, depth + 1);
        const body = loopBody.guard + loopBody.code;
        const test = this.collect(() => this.condition(node.condition as SyntaxNode));
        const before = test.before.length > 0 ? `${pad}    ${test.before.join(' ')}\n` : '';
        return `${pad}loop {\n${body}${pad}  continuing {\n${before}${pad}    break if !(${test.value});\n${pad}  }\n${pad}}\n`;
      }
      case 'Break':
      case 'Continue':
        if (node.label) fail(node, `uses a labelled ${node.k.toLowerCase()} (WGSL has no labels)`);
        return `${pad}${node.k.toLowerCase()};\n`;
      case 'Return': {
        if (!node.value) return `${pad}return;\n`;
        if (this.returnType === 'void')
          return `${pad}${this.simpleStatement(node.value as SyntaxNode)};\n${pad}return;\n`;
        return `${pad}return ${this.coerce(this.expression(node.value as SyntaxNode, this.returnType), this.returnType, node).code};\n`;
      }
      default:
        return fail(node, `uses a ${describe(node)} statement, which the WGSL translation does not cover`);
    }
  }

  /**
   * A loop's body, and the check that opens it: every iteration counts against the invocation's
   * loop budget, and past it the loop ends (the launch fails with TIMEOUT). Not where the body
   * holds a barrier: WGSL wants a barrier's control flow uniform, which a per-invocation count is not.
   */
  private loopBody(node: SyntaxNode, depth: number): { code: string; guard: string } {
    const barriers = this.barriers;
    const code = this.block(node, depth);
    const guard = this.barriers === barriers ? `${'  '.repeat(depth)}if (offload_over_budget()) { break; }\n` : '';
    return { code, guard };
  }

  private variable(node: SyntaxNode, inline = false): string {
    const name = (node.name as SyntaxNode).text as string;
    const declared = node.type ? typeOfNode(node.type as SyntaxNode, `variable '${name}'`) : undefined;
    const constant = ((node.flags as number) & 8) !== 0; // CommonFlags.Const
    let value: Value | undefined;
    if (node.initializer) {
      value = this.expression(node.initializer as SyntaxNode, declared);
      if (declared) value = this.coerce(value, declared, node);
      if (!declared && value.literal === undefined && isSmallLoad(node.initializer as SyntaxNode)) {
        fail(node, `infers a small integer type for '${name}' from a load; declare it i32 or u32`);
      }
    }
    const type = declared ?? value!.type;
    if (type === 'void') fail(node, `declares '${name}' from a call without a value`);
    // A constant that is a multiple of 4 keeps its value / 4 beside it, for the accesses through it.
    const words = constant && !inline && value?.words !== undefined ? `offload_w${this.temps++}` : undefined;
    const wgsl = this.declare(name, type, value?.base, constant, words);
    const init = value ? ` = ${value.code}` : '';
    const declaration = `${constant && value ? 'let' : 'var'} ${wgsl}: ${wgslType(type)}${init}`;
    return words ? `${declaration}; let ${words}: u32 = ${value!.words}` : declaration;
  }

  /** An expression statement: an assignment, ++/--, or a call whose value is dropped. */
  private simpleStatement(node: SyntaxNode): string {
    if (node.k === 'Binary' && isAssignment(node.operator as string)) return this.assignment(node);
    if (
      (node.k === 'UnaryPostfix' || node.k === 'UnaryPrefix') &&
      (node.operator === 'Plus_Plus' || node.operator === 'Minus_Minus')
    ) {
      const target = this.target(node.operand as SyntaxNode);
      if (target.type === 'bool' || (target.base !== undefined && target.type !== 'usize'))
        fail(node, `increments '${target.wgsl}' of type ${target.type}`);
      return `${target.wgsl} ${node.operator === 'Plus_Plus' ? '+=' : '-='} ${one(target.type)}`;
    }
    if (node.k === 'Call') {
      const value = this.expression(node, undefined, true);
      return value.type === 'void' ? value.code : `_ = ${value.code}`;
    }
    if (node.k === 'Parenthesized') return this.simpleStatement(node.expression as SyntaxNode);
    return fail(node, `uses a ${describe(node)} expression as a statement, which WGSL cannot express`);
  }

  private target(node: SyntaxNode): Binding {
    if (node.k !== 'Identifier')
      return fail(node, `assigns to a ${describe(node)}; only local variables and parameters can be assigned`);
    const found = this.lookup(node);
    if (!found) return fail(node, `assigns to '${node.text as string}', which is not a local variable or parameter`);
    if (found.constant) fail(node, `assigns to constant '${node.text as string}'`);
    return found;
  }

  private assignment(node: SyntaxNode): string {
    const leftNode = node.left as SyntaxNode;
    if (leftNode.k === 'ElementAccess') {
      const op = COMPOUND[node.operator as string];
      const element = this.lookup(leftNode.expression as SyntaxNode)?.element ?? 'i32';
      const type = MEMORY_TYPES[element]?.type ?? 'i32';
      return this.element(leftNode, (read) =>
        op === undefined
          ? this.coerce(this.expression(node.right as SyntaxNode, type), type, node)
          : this.binary(node, op, read, node.right as SyntaxNode),
      ).code;
    }
    const target = this.target(leftNode);
    const operator = node.operator as string;
    const op = COMPOUND[operator];
    if (op === undefined) {
      const value = this.coerce(this.expression(node.right as SyntaxNode, target.type), target.type, node);
      if (target.base !== value.base)
        fail(
          node,
          `assigns an address that does not derive from pointer '${target.base ?? value.base}' to '${(node.left as SyntaxNode).text as string}' (an address must trace back to one pointer parameter)`,
        );
      return `${target.wgsl} = ${value.code}`;
    }
    const left: Value = { code: target.wgsl, type: target.type, base: target.base };
    const result = this.binary(node, op, left, node.right as SyntaxNode);
    if (result.base !== target.base)
      fail(
        node,
        `assigns an address that does not derive from pointer '${target.base ?? result.base}' to '${(node.left as SyntaxNode).text as string}'`,
      );
    return `${target.wgsl} = ${this.coerce(result, target.type, node).code}`;
  }

  // ---- expressions ----

  private condition(node: SyntaxNode): string {
    return truthy(this.expression(node, 'bool'), node);
  }

  private expression(node: SyntaxNode, context?: Ty, statement = false): Value {
    if (++this.depth > MAX_DEPTH)
      fail(node, `nests expressions and statements deeper than ${MAX_DEPTH} (WGSL compilers may refuse deeper)`);
    try {
      return this.expressionAt(node, context, statement);
    } finally {
      this.depth--;
    }
  }

  private expressionAt(node: SyntaxNode, context: Ty | undefined, statement: boolean): Value {
    switch (node.k) {
      case 'Parenthesized': {
        const inner = this.expression(node.expression as SyntaxNode, context);
        return /^\(.*\)$/.test(inner.code) && balanced(inner.code.slice(1, -1))
          ? inner
          : { ...inner, code: `(${inner.code})` };
      }
      case 'Literal':
        return literal(node, context);
      case 'True':
        return { code: 'true', type: 'bool' };
      case 'False':
        return { code: 'false', type: 'bool' };
      case 'Identifier': {
        const found = this.lookup(node);
        // A typed pointer used as an address (`x.at(...)`, `load(x + ...)`): its binding stays words.
        if (found?.element !== undefined) this.memory.raw?.add(found.base!);
        if (found)
          return {
            code: found.wgsl,
            type: found.type,
            base: found.base,
            ...(found.words ? { words: found.words } : {}),
          };
        const constant = this.constants.get(node.element as string);
        if (constant !== undefined) return this.constant(node, constant, context);
        return fail(
          node,
          `reads '${node.text as string}', which is not a local variable, a parameter or a top-level constant`,
        );
      }
      case 'Assertion':
        return this.assertion(node);
      case 'Binary': {
        if (isAssignment(node.operator as string)) return fail(node, 'uses an assignment inside an expression');
        const mark = this.effects;
        const left = this.expression(node.left as SyntaxNode, context);
        return this.binary(
          node,
          node.operator as string,
          left,
          node.right as SyntaxNode,
          context,
          this.effects !== mark,
        );
      }
      case 'UnaryPrefix':
        return this.prefix(node, context);
      case 'UnaryPostfix':
        return fail(
          node,
          `uses ${node.operator === 'Plus_Plus' ? '++' : '--'} inside an expression; write it as a statement`,
        );
      case 'Ternary':
        return this.conditional(node, context);
      case 'Call':
        return this.call(node, context, statement);
      case 'PropertyAccess':
        return this.property(node);
      case 'ElementAccess':
        return this.element(node);
      default:
        return fail(node, `uses a ${describe(node)} expression, which the WGSL translation does not cover`);
    }
  }

  /**
   * `c ? a : b` evaluates one arm, as AssemblyScript does: WGSL's select() (which evaluates both)
   * only where neither arm has an effect or could trap under wasm, else an `if` that sets a variable.
   */
  private conditional(node: SyntaxNode, context: Ty | undefined): Value {
    const condition = truthy(this.expression(node.condition as SyntaxNode, 'bool'), node);
    const mark = this.effects;
    const first = this.collect(() => this.expression(node.ifThen as SyntaxNode, context));
    let a = first.value;
    const second = this.collect(() => this.expression(node.ifElse as SyntaxNode, a.literal ? context : a.type));
    let b = second.value;
    if (a.literal && !b.literal) a = literal(a.literal, b.type);
    if (b.literal && !a.literal) b = literal(b.literal, a.type);
    if (a.type !== b.type && !(isInteger(a.type) && isInteger(b.type) && unsignedness(a.type) === unsignedness(b.type)))
      fail(node, `mixes ${a.type} and ${b.type}`);
    if (a.base !== b.base) fail(node, 'chooses between addresses of different pointers');
    if (this.effects === mark && first.before.length === 0 && second.before.length === 0)
      return { code: `select(${b.code}, ${a.code}, ${condition})`, type: a.type, base: a.base };
    if (a.type === 'void') return fail(node, 'chooses between calls without a value');
    const name = `offload_c${this.temps++}`;
    const type = wgslType(a.type);
    this.hoist(
      node,
      `var ${name}: ${type}; if (${condition}) { ${[...first.before, `${name} = ${a.code};`].join(' ')} } else { ${[...second.before, `${name} = ${b.code};`].join(' ')} }`,
    );
    return { code: name, type: a.type, base: a.base };
  }

  /**
   * `a && b` and `a || b`: WGSL's && and || evaluate the right operand only when needed, as
   * AssemblyScript does; one that needs statements first becomes an `if` around them.
   */
  private logical(node: SyntaxNode, operator: string, left: Value, rightNode: SyntaxNode): Value {
    const test = truthy(left, node);
    const right = this.collect(() => truthy(this.expression(rightNode, 'bool'), rightNode));
    if (right.before.length === 0) return { code: `(${test} ${OPERATORS[operator]!} ${right.value})`, type: 'bool' };
    const name = `offload_c${this.temps++}`;
    const when = operator === 'Ampersand_Ampersand' ? name : `!${name}`;
    this.hoist(node, `var ${name} = ${test}; if (${when}) { ${right.before.join(' ')} ${name} = ${right.value}; }`);
    return { code: name, type: 'bool' };
  }

  /** A top-level constant, inlined: its initializer in its own scope (no locals), in its declared type. */
  private constant(node: SyntaxNode, constant: ConstantSyntax, context?: Ty): Value {
    if (constant.initializer === null)
      return fail(node, `reads constant '${constant.name}', which has no initializer to translate`);
    if (this.inlining.includes(constant.internalName))
      return fail(node, `reads constant '${constant.name}', which refers to itself`);
    const declared = constant.type ? typeOfNode(constant.type, `constant '${constant.name}'`) : undefined;
    const scopes = this.scopes.splice(0);
    this.inlining.push(constant.internalName);
    try {
      let value = this.expression(constant.initializer, declared ?? context);
      if (declared) value = this.coerce(value, declared, node);
      if (value.base !== undefined) fail(node, `reads constant '${constant.name}', which holds an address`);
      return { code: value.code, type: value.type, literal: declared ? undefined : value.literal };
    } catch (error) {
      if (!(error instanceof Untranslatable) || error.line === node.line) throw error;
      throw new Untranslatable(
        node.line,
        `reads constant '${constant.name}' (line ${error.line}), which ${error.message}`,
      );
    } finally {
      this.inlining.pop();
      this.scopes.push(...scopes);
    }
  }

  /** Translates `left op right` (left already translated); `right` adopts left's type, or left a literal's. */
  private binary(
    node: SyntaxNode,
    operator: string,
    left: Value,
    rightNode: SyntaxNode,
    context?: Ty,
    leftEffects = false,
  ): Value {
    if (operator === 'Ampersand_Ampersand' || operator === 'Bar_Bar')
      return this.logical(node, operator, left, rightNode);
    const queued = this.pending.at(-1)?.length ?? 0;
    let right = this.expression(rightNode, left.literal ? context : left.type);
    // The right operand needed statements first: a left operand with effects runs before them, as in wasm.
    if (leftEffects && (this.pending.at(-1)?.length ?? 0) > queued) {
      const name = `offload_e${this.temps++}`;
      this.pending.at(-1)!.splice(queued, 0, `let ${name} = ${left.code};`);
      left = { code: name, type: left.type, base: left.base };
    }
    if (left.literal && !right.literal && left.type !== right.type) left = literal(left.literal, right.type);
    const symbol = OPERATORS[operator];
    if (symbol === undefined)
      return fail(node, `uses the operator ${operator}, which the WGSL translation does not cover`);
    if (left.type === 'f32' || right.type === 'f32' || left.type === 'bool' || right.type === 'bool') {
      if (left.type !== right.type) fail(node, `mixes ${left.type} and ${right.type} in '${symbol}'`);
    }
    const shift =
      operator === 'LessThan_LessThan' ||
      operator === 'GreaterThan_GreaterThan' ||
      operator === 'GreaterThan_GreaterThan_GreaterThan';
    if (shift) {
      if (!isInteger(left.type) || !isInteger(right.type)) fail(node, `shifts a ${left.type} by a ${right.type}`);
      if (left.base !== undefined || right.base !== undefined) fail(node, 'shifts an address');
      // WGSL shifts by a u32; its operands are unary expressions (hence the parentheses everywhere).
      // wasm shifts by the count's low 5 bits, as WGSL does at run time; WGSL refuses a constant count of 32 or more.
      if (isConstant(left) && isConstant(right)) left = atRunTime(left);
      // A count the kernel computes is masked too: WGSL refuses 32 or more where it can evaluate it early (from the overrides).
      const amount = right.literal
        ? `${BigInt.asUintN(5, BigInt(right.literal.value as string))}u`
        : `(${right.type === 'i32' ? `u32(${right.code})` : right.code} & 31u)`;
      if (operator === 'GreaterThan_GreaterThan_GreaterThan' && left.type === 'i32')
        return { code: `bitcast<i32>(bitcast<u32>(${left.code}) >> ${amount})`, type: 'i32' };
      const code = `(${left.code} ${operator === 'LessThan_LessThan' ? '<<' : '>>'} ${amount})`;
      // x << 2 is 4x: its value / 4 is x (the bits shifted out are the same either way).
      const quarter =
        operator === 'LessThan_LessThan' && right.literal && Number(right.literal.value) === 2
          ? left.type === 'i32'
            ? `u32(${left.code})`
            : left.code
          : undefined;
      return { code, type: left.type, ...(quarter ? { words: quarter } : {}) };
    }
    if (isInteger(left.type) && isInteger(right.type) && unsignedness(left.type) !== unsignedness(right.type)) {
      if (right.literal) right = literal(right.literal, left.type);
      else fail(node, `mixes ${left.type} and ${right.type} in '${symbol}'; cast one operand`);
    }
    const type: Ty = left.type === 'usize' || right.type === 'usize' ? 'usize' : left.type;
    let base: string | undefined;
    if (left.base !== undefined || right.base !== undefined) {
      if (operator === 'Plus') {
        if (left.base !== undefined && right.base !== undefined) fail(node, 'adds two addresses');
        base = left.base ?? right.base;
      } else if (operator === 'Minus') {
        if (right.base !== undefined && left.base !== right.base)
          fail(node, 'subtracts addresses of different pointers');
        base = right.base === undefined ? left.base : undefined;
      } else if (COMPARISONS.has(operator)) {
        if (left.base !== right.base)
          fail(
            node,
            "compares an address with a number or with another pointer's address (their values differ between devices)",
          );
      } else {
        fail(node, `uses an address in '${symbol}' (only +, - and comparisons keep it traceable to its pointer)`);
      }
    }
    if (COMPARISONS.has(operator)) return { code: `(${left.code} ${symbol} ${right.code})`, type: 'bool' };
    if (operator === 'Percent' && type === 'f32')
      fail(
        node,
        "computes an f32 remainder: AssemblyScript's is exact (fmod), WGSL's is x - y * trunc(x / y), which rounds",
      );
    // Two constants: WGSL would evaluate them when compiling and refuse an overflow or a division by zero.
    if (isConstant(left) && isConstant(right)) left = atRunTime(left);
    else if (
      (operator === 'Slash' || operator === 'Percent') &&
      isConstant(right) &&
      !(right.literal?.literalKind === 'Integer' && BigInt(right.literal.value as string) !== 0n)
    )
      // WGSL refuses a constant divisor of 0 (wasm traps when it runs).
      right = atRunTime(right);
    const lw = left.words ?? literalWords(left);
    const rw = right.words ?? literalWords(right);
    const words =
      (operator === 'Plus' || operator === 'Minus') && unsignedness(type) && lw !== undefined && rw !== undefined
        ? `(${lw} ${symbol} ${rw})`
        : undefined;
    return { code: `(${left.code} ${symbol} ${right.code})`, type, base, ...(words ? { words } : {}) };
  }

  private unify(node: SyntaxNode, a: SyntaxNode, b: SyntaxNode, context?: Ty): [Value, Value] {
    let left = this.expression(a, context);
    let right = this.expression(b, left.literal ? context : left.type);
    if (left.literal && !right.literal) left = literal(left.literal, right.type);
    if (right.literal && !left.literal) right = literal(right.literal, left.type);
    if (
      left.type !== right.type &&
      !(isInteger(left.type) && isInteger(right.type) && unsignedness(left.type) === unsignedness(right.type))
    ) {
      fail(node, `mixes ${left.type} and ${right.type}`);
    }
    return [left, right];
  }

  private prefix(node: SyntaxNode, context?: Ty): Value {
    const operand = node.operand as SyntaxNode;
    switch (node.operator) {
      case 'Minus': {
        if (operand.k === 'Literal') return literal(operand, context, true);
        let value = this.expression(operand, context);
        if (isConstant(value)) value = atRunTime(value);
        if (value.base !== undefined) fail(node, 'negates an address');
        if (value.type === 'bool') fail(node, 'negates a bool');
        // WGSL has no unary minus on u32; AssemblyScript's wraps.
        return { code: unsignedness(value.type) ? `(0u - ${value.code})` : `-${value.code}`, type: value.type };
      }
      case 'Plus':
        return this.expression(operand, context);
      case 'Exclamation':
        return { code: `!(${truthy(this.expression(operand, 'bool'), node)})`, type: 'bool' };
      case 'Tilde': {
        const value = this.expression(operand, context === 'bool' ? undefined : context);
        if (!isInteger(value.type) || value.base !== undefined) fail(node, `complements a ${value.type}`);
        return keepsConstant(value, { code: `~${value.code}`, type: value.type });
      }
      default:
        return fail(
          node,
          `uses ${node.operator === 'Plus_Plus' ? '++' : '--'} inside an expression; write it as a statement`,
        );
    }
  }

  private assertion(node: SyntaxNode): Value {
    if (node.assertionKind !== 'Prefix' && node.assertionKind !== 'As')
      return fail(node, `uses a ${String(node.assertionKind)} assertion`);
    const small = SMALL_INTEGERS[typeName(node.toType as SyntaxNode)];
    if (small !== undefined) {
      // A cast to i8..u16 wraps to its width; the result computes on as an i32 or u32.
      let value = this.expression(node.expression as SyntaxNode);
      if (isConstant(value)) value = atRunTime(value);
      if (!isInteger(value.type) || value.base !== undefined)
        fail(node, `casts a ${value.base ? 'address' : value.type} to a small integer`);
      if (!small.signed)
        return { code: `(u32(${value.code}) & ${small.bits === 8 ? '0xffu' : '0xffffu'})`, type: 'u32' };
      return { code: `((i32(${value.code}) << ${32 - small.bits}u) >> ${32 - small.bits}u)`, type: 'i32' };
    }
    const to = typeOfNode(node.toType as SyntaxNode, 'a cast');
    const value = this.expression(node.expression as SyntaxNode, to);
    return this.convert(value, to, node);
  }

  /** An explicit conversion (`<T>x`, `x as T`), as AssemblyScript converts. */
  private convert(value: Value, to: Ty, node: SyntaxNode): Value {
    if (
      value.type === to ||
      (value.type === 'u32' && to === 'usize') ||
      (value.type === 'usize' && to === 'u32' && value.base === undefined)
    ) {
      return { code: value.code, type: to, base: value.base, ...(isConstant(value) ? { constant: true } : {}) };
    }
    if (value.base !== undefined)
      return fail(node, `converts an address to ${to} (an address's value differs between devices)`);
    if (to === 'bool') return { code: truthy(value, node), type: 'bool' };
    if (value.type === 'bool') return { code: `select(${zero(to)}, ${one(to)}, ${value.code})`, type: to };
    if (value.type === 'void') return fail(node, 'converts a call without a value');
    if (value.type === 'f32' && isInteger(to))
      return { code: `offload_f32_to_${wgslType(to)}(${value.code})`, type: to };
    return keepsConstant(value, { code: `${wgslType(to)}(${value.code})`, type: to });
  }

  /** An implicit conversion (an argument, an initializer, an assignment): only between 32-bit integers. */
  private coerce(value: Value, to: Ty, node: SyntaxNode): Value {
    if (value.literal && value.type !== to) value = literal(value.literal, to);
    if (value.type === to) return value;
    if (to === 'usize' && value.type === 'u32') return { ...value, type: 'usize' };
    if (isInteger(value.type) && isInteger(to)) {
      if (value.base !== undefined)
        fail(node, `uses an address as a ${to} (an address's value differs between devices)`);
      return keepsConstant(value, { code: `${wgslType(to)}(${value.code})`, type: to });
    }
    if (value.type === 'bool' && isInteger(to)) return this.convert(value, to, node);
    return fail(node, `uses a ${value.type} where a ${to} is expected`);
  }

  private property(node: SyntaxNode): Value {
    const object = node.expression as SyntaxNode;
    const name = (node.property as SyntaxNode).text as string;
    const element = object.k === 'Identifier' && !this.lookup(object) ? (object.element as string | null) : null;
    if (element === '~lib/math/NativeMathf' && name in MATHF_CONSTANTS)
      return { code: f32Literal(MATHF_CONSTANTS[name]!), type: 'f32' };
    if (object.k === 'Identifier' && !this.lookup(object)) {
      // Constants as their literals (an operation on two of them is computed at run time, as for literals).
      const integer = (value: string, type: Ty): Value =>
        literal({ k: 'Literal', literalKind: 'Integer', value, line: node.line }, type);
      const float = (value: number): Value => ({
        code: f32Literal(value),
        type: 'f32',
        literal: { k: 'Literal', literalKind: 'Float', value, line: node.line },
      });
      const limits: Record<string, Value> = {
        'i32.MAX_VALUE': integer('2147483647', 'i32'),
        'i32.MIN_VALUE': integer('-2147483648', 'i32'),
        'u32.MAX_VALUE': integer('4294967295', 'u32'),
        'u32.MIN_VALUE': integer('0', 'u32'),
        'f32.MAX_VALUE': float(3.4028234663852886e38),
        'f32.EPSILON': float(1.1920928955078125e-7),
      };
      const found = limits[`${object.text as string}.${name}`];
      if (found) return found;
    }
    return fail(
      node,
      `reads '${(object.text as string | undefined) ?? describe(object)}.${name}', which the WGSL translation does not cover`,
    );
  }

  private call(node: SyntaxNode, context: Ty | undefined, statement: boolean): Value {
    const callee = node.expression as SyntaxNode;
    const args = node.args as SyntaxNode[];
    const typeArgs = ((node.typeArguments as SyntaxNode[] | null) ?? []).map((arg) => typeName(arg));
    if (callee.k === 'PropertyAccess') {
      const object = callee.expression as SyntaxNode;
      const name = (callee.property as SyntaxNode).text as string;
      const element = object.k === 'Identifier' && !this.lookup(object) ? (object.element as string | null) : null;
      if (element === '~lib/builtins/atomic') return this.atomic(node, name, typeArgs, args, statement);
      if (element === '~lib/math/NativeMathf') {
        const math = MATHF[name];
        if (!math || math.arity !== args.length) return fail(node, `calls Mathf.${name}, which WGSL has no twin for`);
        const values = args.map((arg) => this.coerce(this.expression(arg, 'f32'), 'f32', arg));
        return { code: `${mathName(math.wgsl, 'f32')}(${atRunTimeIfConstant(values).join(', ')})`, type: 'f32' };
      }
      if (element === '~lib/math/NativeMath')
        return fail(node, `calls Math.${name}, which computes in f64 (WGSL has no f64): use Mathf.${name}`);
      if (element?.startsWith('~lib/builtins/') && SIMD_TYPES.has(element.slice('~lib/builtins/'.length))) {
        const namespace = element.slice('~lib/builtins/'.length);
        const operation = SIMD_OPERATIONS[namespace]?.[name];
        if (operation === undefined)
          return fail(
            node,
            `calls ${namespace}.${name}, which the WGSL translation of 128-bit SIMD does not cover${NO_V128}`,
          );
        return this.simd(node, `${namespace}.${name}`, operation, args);
      }
      return fail(
        node,
        `calls '${(object.text as string | undefined) ?? describe(object)}.${name}', which the WGSL translation does not cover`,
      );
    }
    if (callee.k !== 'Identifier' || this.lookup(callee))
      return fail(node, 'calls something other than a function of the file, the device library or a builtin');
    const element = callee.element as string | null;
    const name = callee.text as string;
    if (element?.startsWith(DEVICE_PREFIX)) {
      if (element.slice(DEVICE_PREFIX.length) === 'teamMemory') {
        if (args.length > 0) fail(node, 'calls teamMemory() with arguments');
        return { code: '0u', type: 'usize', base: TEAM_MEMORY_BASE, words: '0u' };
      }
      const helperName = element.slice(DEVICE_PREFIX.length);
      if (SIMD_MEMORY.has(helperName)) return this.simdMemory(node, helperName, args);
      const simd = SIMD_HELPERS[helperName];
      if (simd !== undefined) return this.simd(node, name, simd, args);
      const device = DEVICE_FUNCTIONS[helperName];
      if (device === undefined) return fail(node, `calls device function ${name}(), which has no WGSL translation`);
      if ('unsupported' in device) return fail(node, `calls ${name}(): ${device.unsupported}`);
      if (args.length > device.args.length || args.length < device.args.length - (device.optional ?? 0))
        fail(node, `calls ${name}() with ${args.length} arguments`);
      const values = args.map((arg, i) => this.coerce(this.expression(arg, device.args[i]), device.args[i]!, arg).code);
      if (device === DEVICE_FUNCTIONS.barrier) this.barriers++;
      return { code: device.wgsl(values), type: device.type };
    }
    if (element?.startsWith('~lib/builtins/'))
      return this.builtin(node, element.slice('~lib/builtins/'.length), typeArgs, args, context);
    const target = element === null ? undefined : this.functions.get(element);
    if (target === undefined)
      return fail(
        node,
        `calls '${name}', which is not a function of the kernel sources, the device library or a builtin the translation covers`,
      );
    const called = this.helper(element!);
    const fn = called.fn;
    if (called.barrier) this.barriers++;
    // A kernel function may store, trap or loop: treated as having an effect.
    this.effects++;
    const params = fn.params!;
    if (args.length !== params.length)
      fail(
        node,
        `calls '${name}' with ${args.length} of its ${params.length} arguments (optional parameters are not translated)`,
      );
    const values = args.map((arg, i) => {
      const type = typeOf(params[i]!.type, fn, `parameter '${params[i]!.name}'`);
      const value = this.coerce(this.expression(arg, type), type, arg);
      if (value.base !== undefined)
        fail(arg, `passes an address to '${name}' (addresses stay in the kernel that takes the pointer)`);
      return value.code;
    });
    return { code: `${helperName(fn)}(${values.join(', ')})`, type: typeOf(fn.returnType!, fn, 'a result') };
  }

  /** A SIMD operation (wgsl-simd.ts) on its arguments. */
  private simd(node: SyntaxNode, name: string, operation: SimdOperation, args: SyntaxNode[]): Value {
    const count = operation.args.length + (operation.lane ? 1 : 0);
    if (args.length !== count) return fail(node, `calls ${name}() with ${args.length} arguments`);
    const codes = operation.args.map((type, i) => {
      const value = this.coerce(this.expression(args[i]!, type), type, args[i]!);
      if (value.base !== undefined) fail(node, `gives ${name}() an address (its value differs between devices)`);
      return value.code;
    });
    if (operation.lane) {
      const lane = args[operation.args.length]!;
      if (
        lane.k !== 'Literal' ||
        lane.literalKind !== 'Integer' ||
        !(Number(lane.value) >= 0 && Number(lane.value) <= 3)
      )
        fail(node, `calls ${name}() with a lane that is not a constant 0 to 3`);
      codes.push(`${Number(lane.value)}`);
    }
    return { code: operation.wgsl(codes), type: operation.type };
  }

  /** loadF32x4 / loadI32x4 (`base`, `index`): the four 32-bit words from element `index` on; storeF32x4 / storeI32x4 write them. */
  private simdMemory(node: SyntaxNode, name: string, args: SyntaxNode[]): Value {
    const isStore = name.startsWith('store');
    if (args.length !== (isStore ? 3 : 2)) return fail(node, `calls ${name}() with ${args.length} arguments`);
    const pointer = this.expression(args[0]!, 'usize');
    if (pointer.base === undefined)
      return fail(node, 'accesses memory at an address that cannot be traced back to one pointer parameter');
    const index = this.coerce(this.expression(args[1]!, 'i32'), 'i32', args[1]!);
    const param = pointer.base;
    // Read and written as 32-bit words (a ptr<T> passed this way is bound as words).
    this.memory.raw?.add(param);
    const binding = this.pointers.get(param)!;
    const atomic = this.memory.atomic.has(param);
    const first = `offload_w${this.temps++}`;
    this.hoist(node, `let ${first} = ${pointer.words ?? `((${pointer.code}) >> 2u)`} + bitcast<u32>(${index.code});`);
    this.effects++;
    const word = (lane: number): string => `${binding}[${first} + ${lane}u]`;
    if (!isStore) {
      const lanes = [0, 1, 2, 3].map((lane) => (atomic ? `atomicLoad(&${word(lane)})` : word(lane)));
      return { code: `${V128}(${lanes.join(', ')})`, type: 'v128' };
    }
    this.memory.written.add(param);
    const value = this.coerce(this.expression(args[2]!, 'v128'), 'v128', args[2]!);
    const lanes = `offload_v${this.temps++}`;
    const stores = [0, 1, 2, 3].map((lane) =>
      atomic ? `atomicStore(&${word(lane)}, ${lanes}[${lane}]);` : `${word(lane)} = ${lanes}[${lane}];`,
    );
    return { code: `{ let ${lanes} = ${value.code}; ${stores.join(' ')} }`, type: 'void' };
  }

  private builtin(node: SyntaxNode, name: string, typeArgs: string[], args: SyntaxNode[], context?: Ty): Value {
    const constructor = SIMD_CONSTRUCTORS[name];
    if (constructor !== undefined) return this.simd(node, name, constructor, args);
    if (name === 'load' || name === 'store') return this.memoryAccess(node, name, typeArgs, args);
    if (name === 'select') {
      const [a, b] = this.unify(
        node,
        args[0]!,
        args[1]!,
        typeArgs[0] ? typeOf(typeArgs[0], this.fn, 'a select<T> type argument') : context,
      );
      if (a.base !== b.base) fail(node, 'selects between addresses of different pointers');
      return {
        code: `select(${b.code}, ${a.code}, ${truthy(this.expression(args[2]!, 'bool'), node)})`,
        type: a.type,
        base: a.base,
      };
    }
    const math = MATH_BUILTINS[name];
    if (math === undefined) {
      if (name === 'unreachable' || name === 'assert' || name === 'abort')
        return fail(node, `calls ${name}(), which traps: WGSL kernels cannot trap`);
      return fail(node, `calls the builtin ${name}(), which the WGSL translation does not cover`);
    }
    if (args.length !== math.arity) fail(node, `calls ${name}() with ${args.length} arguments`);
    const declared = typeArgs[0] ? typeOf(typeArgs[0], this.fn, `a ${name}<T> type argument`) : undefined;
    const values =
      math.arity === 2
        ? this.unify(node, args[0]!, args[1]!, declared ?? context)
        : [this.expression(args[0]!, declared ?? context)];
    const type = declared ?? values[0]!.type;
    if (!math.types.includes(type) || values.some((value) => value.base !== undefined))
      fail(node, `calls ${name}() on a ${values.some((v) => v.base) ? 'address' : type}`);
    const coerced = values.map((value) => this.coerce(value, type, node));
    return { code: `${mathName(math.wgsl, type)}(${atRunTimeIfConstant(coerced).join(', ')})`, type };
  }

  /** The binding and byte offset of an address argument plus a constant offset. */
  private address(
    node: SyntaxNode,
    pointer: SyntaxNode,
    offsetArg?: SyntaxNode,
  ): { binding: string; param: string; offset: string; word: string } {
    const value = this.expression(pointer, 'usize');
    if (value.base === undefined)
      return fail(node, 'accesses memory at an address that cannot be traced back to one pointer parameter');
    let immediate = 0;
    if (offsetArg !== undefined) {
      if (offsetArg.k !== 'Literal' || offsetArg.literalKind !== 'Integer')
        return fail(node, 'gives a memory access an offset that is not a constant');
      immediate = Number(offsetArg.value);
    }
    const offset = immediate === 0 ? value.code : `(${value.code}) + ${immediate}u`;
    // The word a 4-byte access at this address reads: from the value / 4 where it is known.
    const word =
      value.words !== undefined && immediate % 4 === 0
        ? immediate === 0
          ? value.words
          : `${value.words} + ${immediate / 4}u`
        : `(${offset}) >> 2u`;
    return { binding: this.pointers.get(value.base)!, param: value.base, offset, word };
  }

  private memoryAccess(node: SyntaxNode, name: 'load' | 'store', typeArgs: string[], args: SyntaxNode[]): Value {
    const declared = typeArgs[0];
    if (declared === undefined) return fail(node, `calls ${name}() without a type argument (write ${name}<T>)`);
    const memoryType = MEMORY_TYPES[declared];
    if (memoryType === undefined)
      return fail(
        node,
        `${name}s a ${declared}, which WGSL has no type for (kernels on WebGPU move i8..i32, u8..u32, f32 and bool)`,
      );
    const isStore = name === 'store';
    const at = this.address(node, args[0]!, args[isStore ? 2 : 1]);
    return this.access(node, declared, isStore, at, () =>
      this.coerce(this.expression(args[1]!, memoryType.type), memoryType.type, node),
    );
  }

  /**
   * A load (or a store of `valueOf()`) of a `declared` at `at`: a word of its binding, or a byte or
   * two within one. `declared` is one of MEMORY_TYPES.
   */
  private access(
    node: SyntaxNode,
    declared: string,
    isStore: boolean,
    at: { binding: string; param: string; offset: string; word: string },
    valueOf: () => Value,
  ): Value {
    const memoryType = MEMORY_TYPES[declared]!;
    const name = isStore ? 'store' : 'load';
    this.effects++;
    if (at.param === TEAM_MEMORY_BASE && memoryType.bytes !== 4)
      fail(node, `${name}s a ${declared} in team memory (translated kernels move 4-byte values there)`);
    const atomic = this.memory.atomic.has(at.param);
    if (isStore) this.memory.written.add(at.param);
    const element = declared === 'usize' ? 'usize' : memoryType.type;
    if (memoryType.bytes === 4) {
      const index = `${at.binding}[${at.word}]`;
      if (!isStore) {
        const word = atomic ? `atomicLoad(&${index})` : index;
        return {
          code: memoryType.type === 'u32' ? word : `bitcast<${memoryType.type}>(${word})`,
          type: element === 'usize' ? 'usize' : memoryType.type,
        };
      }
      const value = valueOf();
      if (value.base !== undefined) fail(node, 'stores an address in memory (its value differs between devices)');
      const bits = memoryType.type === 'u32' ? value.code : `bitcast<u32>(${value.code})`;
      return { code: atomic ? `atomicStore(&${index}, ${bits})` : `${index} = ${bits}`, type: 'void' };
    }
    const mask = memoryType.bytes === 1 ? '0xffu' : '0xffffu';
    const byte = `(${at.offset})`;
    const word = `${at.binding}[${byte} >> 2u]`;
    const shift = `((${byte} & 3u) * 8u)`;
    if (!isStore) {
      const raw = atomic ? `atomicLoad(&${word})` : word;
      if (!memoryType.signed) return { code: `((${raw} >> ${shift}) & ${mask})`, type: 'u32' };
      const width = memoryType.bytes * 8;
      return { code: `(bitcast<i32>(${raw} << (${32 - width}u - ${shift})) >> ${32 - width}u)`, type: 'i32' };
    }
    // Neighbouring bytes may belong to other invocations: clear and set this one's bits atomically.
    this.memory.atomic.add(at.param);
    const value = valueOf();
    const temp = `offload_at${this.temps++}`;
    const bits = memoryType.type === 'u32' ? value.code : `bitcast<u32>(${value.code})`;
    return {
      code: `{ let ${temp} = ${byte}; atomicAnd(&${at.binding}[${temp} >> 2u], ~(${mask} << ((${temp} & 3u) * 8u))); atomicOr(&${at.binding}[${temp} >> 2u], (${bits} & ${mask}) << ((${temp} & 3u) * 8u)); }`,
      type: 'void',
    };
  }

  /**
   * `x[i]` of a typed pointer parameter `x: ptr<T>` (or a store to it, of `valueOf()`): element i
   * of its binding when that is an array of T, else the T at byte i * sizeof<T>() of its words.
   */
  private element(node: SyntaxNode, valueOf?: (read: Value) => Value): Value {
    const object = node.expression as SyntaxNode;
    const bound = object.k === 'Identifier' ? this.lookup(object) : undefined;
    if (bound?.element === undefined || bound.base === undefined)
      return fail(node, 'indexes something other than a ptr<T> parameter (x[i] reads element i of a typed pointer)');
    const declared = bound.element;
    const memoryType = MEMORY_TYPES[declared];
    if (memoryType === undefined)
      return fail(
        node,
        `indexes a ptr<${declared}>, which WGSL has no type for (kernels on WebGPU move i8..i32, u8..u32 and f32)`,
      );
    const mark = this.effects;
    const index = this.expression(node.elementExpression as SyntaxNode, 'i32');
    if (!isInteger(index.type) || index.base !== undefined)
      fail(node, `indexes '${object.text as string}' with a ${index.type}; an index is an i32`);
    if (valueOf !== undefined && this.effects !== mark)
      fail(
        node,
        `updates '${object.text as string}[...]' at an index that loads, stores or calls; compute the index first`,
      );
    const at = atRunTime(index);
    const u = index.type === 'i32' ? `u32(${at.code})` : at.code;
    const param = bound.base;
    const binding = this.pointers.get(param)!;
    // A checked build: a read outside reads element 0 and a store outside is skipped, each recording the fault.
    const checked = this.checked.get(param);
    const check = checked && {
      args: `${this.scopes[0]!.get(checked.bytes)!.wgsl}, ${Math.log2(memoryType.bytes)}u, ${checked.param}u, ${FAULT_ELEMENT_TYPES.indexOf(declared as (typeof FAULT_ELEMENT_TYPES)[number])}u`,
    };
    if (check && valueOf !== undefined && this.inUpdate)
      fail(
        node,
        `stores to '${object.text as string}[...]' in a for-loop's update, where a checked build's test cannot stand: move it into the body`,
      );
    const guarded = (store: Value): Value =>
      check ? { code: `if (offload_in_bounds(${u}, ${check.args})) { ${store.code}; }`, type: 'void' } : store;
    const checkedAt = check && valueOf === undefined ? `offload_checked_index(${u}, ${check.args})` : u;
    if (this.typedArrays.has(param)) {
      const slot = `${binding}[${checkedAt}]`;
      this.effects++;
      const read: Value = { code: slot, type: memoryType.type };
      if (valueOf === undefined) return read;
      this.memory.written.add(param);
      const value = valueOf(read);
      if (value.base !== undefined) fail(node, 'stores an address in memory (its value differs between devices)');
      return guarded({ code: `${slot} = ${this.coerce(value, memoryType.type, node).code}`, type: 'void' });
    }
    const offset = memoryType.bytes === 1 ? checkedAt : `(${checkedAt} << ${memoryType.bytes === 2 ? 1 : 2}u)`;
    const where = { binding, param, offset, word: checkedAt };
    if (valueOf === undefined) return this.access(node, declared, false, where, () => fail(node, 'no value'));
    return guarded(
      this.access(node, declared, true, where, () => {
        const read = this.access(node, declared, false, where, () => fail(node, 'no value'));
        return this.coerce(valueOf(read), memoryType.type, node);
      }),
    );
  }

  private atomic(node: SyntaxNode, op: string, typeArgs: string[], args: SyntaxNode[], statement: boolean): Value {
    const declared = typeArgs[0];
    if (declared !== 'i32' && declared !== 'u32')
      return fail(node, `calls atomic.${op}<${declared ?? ''}>: WGSL atomics are on i32 and u32`);
    const type: Ty = declared;
    const rmw = ATOMIC_RMW[op];
    const isLoad = op === 'load';
    const isStore = op === 'store';
    if (!rmw && !isLoad && !isStore) return fail(node, `calls atomic.${op}, which WGSL has no twin for`);
    const offsetArg = isLoad ? args[1] : args[2];
    const at = this.address(node, args[0]!, offsetArg);
    this.effects++;
    if (at.param === TEAM_MEMORY_BASE)
      fail(node, `calls atomic.${op} on team memory (translated kernels use atomics on pointer parameters only)`);
    this.memory.atomic.add(at.param);
    if (!isLoad) this.memory.written.add(at.param);
    const index = `&${at.binding}[${at.word}]`;
    if (isLoad) return { code: type === 'u32' ? `atomicLoad(${index})` : `bitcast<i32>(atomicLoad(${index}))`, type };
    const value = this.coerce(this.expression(args[1]!, type), type, node);
    const bits = type === 'u32' ? value.code : `bitcast<u32>(${value.code})`;
    if (isStore) return { code: `atomicStore(${index}, ${bits})`, type: 'void' };
    const call = `${rmw}(${index}, ${bits})`;
    return { code: type === 'u32' || statement ? call : `bitcast<i32>(${call})`, type: statement ? 'u32' : type };
  }
}

const OPERATORS: Record<string, string> = {
  Plus: '+',
  Minus: '-',
  Asterisk: '*',
  Slash: '/',
  Percent: '%',
  Ampersand: '&',
  Bar: '|',
  Caret: '^',
  LessThan_LessThan: '<<',
  GreaterThan_GreaterThan: '>>',
  GreaterThan_GreaterThan_GreaterThan: '>>>',
  LessThan: '<',
  LessThan_Equals: '<=',
  GreaterThan: '>',
  GreaterThan_Equals: '>=',
  Equals_Equals: '==',
  Exclamation_Equals: '!=',
  Equals_Equals_Equals: '==',
  Exclamation_Equals_Equals: '!=',
  Ampersand_Ampersand: '&&',
  Bar_Bar: '||',
};
const COMPARISONS = new Set([
  'LessThan',
  'LessThan_Equals',
  'GreaterThan',
  'GreaterThan_Equals',
  'Equals_Equals',
  'Exclamation_Equals',
  'Equals_Equals_Equals',
  'Exclamation_Equals_Equals',
]);
const COMPOUND: Record<string, string> = {
  Plus_Equals: 'Plus',
  Minus_Equals: 'Minus',
  Asterisk_Equals: 'Asterisk',
  Slash_Equals: 'Slash',
  Percent_Equals: 'Percent',
  Ampersand_Equals: 'Ampersand',
  Bar_Equals: 'Bar',
  Caret_Equals: 'Caret',
  LessThan_LessThan_Equals: 'LessThan_LessThan',
  GreaterThan_GreaterThan_Equals: 'GreaterThan_GreaterThan',
  GreaterThan_GreaterThan_GreaterThan_Equals: 'GreaterThan_GreaterThan_GreaterThan',
};

/** A u32 literal's value / 4 when it is a multiple of 4 (as code), else undefined. */
function literalWords(value: Value): string | undefined {
  if (value.literal?.literalKind !== 'Integer' || !unsignedness(value.type)) return undefined;
  const n = BigInt.asUintN(32, BigInt(value.literal.value as string));
  return n % 4n === 0n ? `${n / 4n}u` : undefined;
}

/** Whether `node` returns on every path, by WGSL's rules (a return, or an if/else whose branches both do). */
function alwaysReturns(node: SyntaxNode): boolean {
  if (node.k === 'Return') return true;
  if (node.k === 'Block') {
    const last = (node.statements as SyntaxNode[]).at(-1);
    return last !== undefined && alwaysReturns(last);
  }
  if (node.k === 'If')
    return (
      node.ifFalse !== null && alwaysReturns(node.ifTrue as SyntaxNode) && alwaysReturns(node.ifFalse as SyntaxNode)
    );
  return false;
}

/** Whether WGSL takes `name` as it is: not reserved, and clear of the names the translation makes (`__`, `offload_`). */
function isPlainName(name: string): boolean {
  return !WGSL_RESERVED.has(name) && !name.startsWith('_') && !name.includes('__') && !name.startsWith('offload_');
}

/** Whether `code`'s parentheses balance (so that `(code)` is one group). */
function balanced(code: string): boolean {
  let depth = 0;
  for (const char of code) {
    if (char === '(') depth++;
    else if (char === ')' && --depth < 0) return false;
  }
  return depth === 0;
}

function isAssignment(operator: string): boolean {
  return operator === 'Equals' || operator in COMPOUND;
}

function isInteger(type: Ty): boolean {
  return type === 'i32' || type === 'u32' || type === 'usize';
}

function unsignedness(type: Ty): boolean {
  return type === 'u32' || type === 'usize';
}

function zero(type: Ty): string {
  if (type === 'v128') return `${V128}(0u)`;
  return type === 'f32' ? '0.0f' : type === 'i32' ? '0i' : type === 'bool' ? 'false' : '0u';
}

function one(type: Ty): string {
  return type === 'f32' ? '1.0f' : type === 'i32' ? '1i' : '1u';
}

function truthy(value: Value, node: SyntaxNode): string {
  if (value.base !== undefined) return fail(node, 'tests an address for zero (its value differs between devices)');
  switch (value.type) {
    case 'bool':
      return value.code;
    case 'f32':
      return `offload_truthy_f32(${value.code})`;
    case 'void':
      return fail(node, 'tests a call without a value');
    case 'v128':
      return fail(node, 'tests a v128 for truth (test its lanes with anyLane or v128.any_true)');
    default:
      return `(${value.code} != ${zero(value.type)})`;
  }
}

/** wasm's 128-bit SIMD types and the builtin namespaces of their operations (v128.load, f64x2.add, ...). */
const SIMD_TYPES = new Set(['v128', 'i8x16', 'i16x8', 'i32x4', 'i64x2', 'f32x4', 'f64x2']);
const NO_V128 = ' (a kernel using it stays wasm-only)';

/** Why a type the subset lacks is not in WGSL, for the note ('' when the subset simply leaves it out). */
function whyNot(name: string): string {
  if (name === 'f64' || name === 'i64' || name === 'u64') return ` (WGSL has no ${name})`;
  return SIMD_TYPES.has(name) ? NO_V128 : '';
}

/** A resolved AssemblyScript type name as a type of the subset. */
function typeOf(name: string, fn: FunctionSyntax, what: string): Ty {
  if (
    name === 'i32' ||
    name === 'u32' ||
    name === 'usize' ||
    name === 'f32' ||
    name === 'bool' ||
    name === 'void' ||
    name === 'v128'
  )
    return name;
  if (name === 'isize') return 'i32';
  const why = whyNot(name);
  throw new Untranslatable(
    fn.line,
    `has ${what} of type ${name}${why}; translated kernels compute with i32, u32, f32 and bool`,
  );
}

function typeName(node: SyntaxNode): string {
  return (
    (node.resolved as string | null) ??
    (((node.name as SyntaxNode | undefined)?.identifier as SyntaxNode | undefined)?.text as string | undefined) ??
    '?'
  );
}

function typeOfNode(node: SyntaxNode, what: string): Ty {
  const name = typeName(node);
  if (name === 'i32' || name === 'u32' || name === 'usize' || name === 'f32' || name === 'bool' || name === 'v128')
    return name;
  if (name === 'isize') return 'i32';
  const why = whyNot(name);
  return fail(node, `gives ${what} the type ${name}${why}; translated kernels compute with i32, u32, f32 and bool`);
}

function isSmallLoad(node: SyntaxNode): boolean {
  const callee = node.k === 'Call' ? (node.expression as SyntaxNode) : undefined;
  const type = ((node.typeArguments as SyntaxNode[] | null) ?? [])[0];
  return (
    callee?.element === '~lib/builtins/load' &&
    type !== undefined &&
    ['i8', 'u8', 'i16', 'u16', 'bool'].includes(typeName(type))
  );
}

/** A called function's WGSL name: its name and where it comes from (two files may each have a `helper`). */
function helperName(fn: FunctionSyntax): string {
  return `${fn.name.replace(/[^A-Za-z0-9]/g, '')}__fn_${fn.internalName.replace(/[^A-Za-z0-9]/g, '_').replace(/_+/g, '_')}`;
}

function describe(node: SyntaxNode): string {
  return node.k.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();
}

/** An f32 literal that WGSL reads back to the same value. */
function f32Literal(value: number): string {
  const rounded = Math.fround(value);
  const text = String(rounded);
  return `${text}${/[.e]/.test(text) ? '' : '.0'}f`;
}

/** A numeric literal in its context's type (i32 without one), as AssemblyScript types it. */
function literal(node: SyntaxNode, context?: Ty, negate = false): Value {
  const kind = node.literalKind;
  if (kind === 'Float') {
    const value = (negate ? -1 : 1) * (node.value as number);
    const shown = Number.isInteger(value) ? value.toFixed(1) : String(value);
    if (context !== 'f32')
      return fail(
        node,
        `uses the float literal ${shown} where AssemblyScript computes in f64 (WGSL has no f64): give it an f32 context, as <f32>${shown}`,
      );
    if (!Number.isFinite(Math.fround(value))) return fail(node, `uses the literal ${value}, which f32 cannot hold`);
    return { code: f32Literal(value), type: 'f32', literal: negate ? { ...node, value } : node };
  }
  if (kind !== 'Integer')
    return fail(
      node,
      `uses a ${String(kind).toLowerCase()} literal (kernels on WebGPU have no strings, arrays or objects)`,
    );
  const big = BigInt(node.value as string) * (negate ? -1n : 1n);
  const tagged = { literal: negate ? { ...node, value: String(big) } : node };
  if (context === 'f32') return { code: f32Literal(Number(big)), type: 'f32', ...tagged };
  if (big < -(2n ** 31n) || big >= 2n ** 32n)
    return fail(node, `uses the literal ${big}, which needs 64 bits (WGSL has no i64)`);
  if (context === 'u32' || context === 'usize')
    return { code: `${BigInt.asUintN(32, big)}u`, type: context, ...tagged };
  if (big >= 2n ** 31n && context !== 'i32')
    return fail(
      node,
      `uses the literal ${big}, which AssemblyScript types i64 here (WGSL has no i64): write <u32>${big}`,
    );
  const n = Number(BigInt.asIntN(32, big));
  return { code: n === -(2 ** 31) ? 'i32(-2147483648)' : n < 0 ? `(${n}i)` : `${n}i`, type: 'i32', ...tagged };
}
