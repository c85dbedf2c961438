/**
 * What the translation of one function keeps while it walks the function's syntax tree: the
 * variables in scope, the pointer parameters' bindings, the statements an expression needs run
 * first, and counts of effects and barriers. The translator's layers (expressions, memory, calls,
 * statements, the function itself) extend it in that order, each calling only those below it
 * and the hooks declared here.
 */
import type { ConstantSyntax, FunctionSyntax, SyntaxNode } from './compiler-job.js';
import { TEAM_MEMORY_BASE, TEAM_MEMORY_WORDS, type SupportName, type Ty } from './wgsl-builtins.js';
import { isPlainName } from './wgsl-names.js';
import { fail, typeOf } from './wgsl-types.js';

/** A variable in scope: its WGSL name and type, and the pointer parameter an address derives from. */
export interface Binding {
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
export interface MemoryUse {
  written: Set<string>;
  atomic: Set<string>;
  /** Typed pointers used other than as `x[i]` (their binding stays 32-bit words). */
  raw?: Set<string>;
}

/** The state of one function's translation (see the file's header). */
export abstract class TranslationState {
  protected readonly scopes: Map<string, Binding>[] = [];
  protected readonly pointers = new Map<string, string>();
  /** Typed pointer parameters bound as arrays of their element type (`x[i]` indexes them directly). */
  protected readonly typedArrays = new Set<string>();
  protected temps = 0;
  protected readonly returnType: Ty;
  /** How deeply the expression and statement being translated nest. */
  protected depth = 0;
  /** The top-level constants being inlined, innermost last. */
  protected readonly inlining: string[] = [];
  /**
   * Statements that must run before the expression being translated (a conditional with effects
   * becomes an `if` that sets a variable): one list per statement or arm being translated, innermost last.
   */
  protected readonly pending: string[][] = [];
  /**
   * How many constructs that have an effect or could trap under wasm (memory accesses, atomics,
   * calls of kernel functions) were translated so far: an expression is free of them when this
   * count did not move while translating it.
   */
  protected effects = 0;
  /** How many barriers (workgroupBarrier, or calls of functions that hold one) were translated so far. */
  barriers = 0;
  /** A checked build's typed pointers: the WGSL name of each one's byte length and its launch parameter's index. */
  protected readonly checked = new Map<string, { bytes: string; param: number }>();
  /** Whether a for-loop's update is being translated (a checked store, an `if`, cannot stand there). */
  protected inUpdate = false;
  /** The support functions (SUPPORT_FUNCTIONS) the translation calls, by name. */
  readonly support = new Set<SupportName>();
  /** Whether the translation reads or writes team memory (the module then declares its array). */
  teamMemory = false;

  constructor(
    protected readonly fn: FunctionSyntax,
    /** `items`: a per-item kernel's body, as an entry point that runs it for one item per invocation. */
    protected readonly role: 'kernel' | 'helper' | 'items',
    protected readonly functions: Map<string, FunctionSyntax>,
    protected readonly constants: Map<string, ConstantSyntax>,
    protected readonly helper: (internalName: string) => { fn: FunctionSyntax; barrier: boolean },
    protected readonly memory: MemoryUse,
    /** Parameters (i32) the entry point takes after its own and before any item counts. */
    protected readonly extraParams: readonly string[] = [],
  ) {
    this.returnType = role !== 'helper' ? 'void' : typeOf(fn.returnType!, fn, 'a result');
    this.pointers.set(TEAM_MEMORY_BASE, TEAM_MEMORY_WORDS);
  }

  protected declare(name: string, type: Ty, base: string | undefined, constant: boolean, words?: string): string {
    const wgsl = isPlainName(name) ? name : `${name.replace(/^_+/, 'u')}_v${this.temps++}`;
    this.scopes.at(-1)!.set(name, { wgsl, type, base, constant, ...(words ? { words } : {}) });
    return wgsl;
  }

  protected lookup(node: SyntaxNode): Binding | undefined {
    const name = node.text as string;
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const found = this.scopes[i]!.get(name);
      if (found) return found;
    }
    return undefined;
  }

  protected scoped<T>(body: () => T): T {
    this.scopes.push(new Map());
    try {
      return body();
    } finally {
      this.scopes.pop();
    }
  }

  /** Records a call of support function `name`, and returns its name for the call. */
  protected use(name: SupportName): string {
    this.support.add(name);
    return name;
  }

  /** The WGSL name of the binding of pointer parameter `param` (or of team memory). */
  protected binding(param: string): string {
    if (param === TEAM_MEMORY_BASE) this.teamMemory = true;
    return this.pointers.get(param)!;
  }

  /** Translates with a list of its own for the statements it needs first; returns both. */
  protected collect<T>(translate: () => T): { value: T; before: string[] } {
    this.pending.push([]);
    try {
      const value = translate();
      return { value, before: this.pending.at(-1)! };
    } finally {
      this.pending.pop();
    }
  }

  /** Runs `code` before the expression being translated (within the statement that holds it). */
  protected hoist(node: SyntaxNode, code: string): void {
    const list = this.pending.at(-1);
    if (list === undefined)
      return fail(
        node,
        'needs a statement to evaluate lazily where WGSL takes only an expression (a top-level constant)',
      );
    list.push(code);
  }
}
