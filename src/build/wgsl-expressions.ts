/**
 * Expressions of the kernel subset in WGSL: operators, conversions, conditionals and constants,
 * with the types AssemblyScript gives them and the addresses traced back to their pointer
 * parameter. Calls and memory accesses are the layers above (wgsl-calls.ts, wgsl-memory.ts).
 */
import type { ConstantSyntax, SyntaxNode } from './compiler-job.js';
import {
  group,
  isConstant,
  keepsConstant,
  MATHF_CONSTANTS,
  MAX_DEPTH,
  runTimeIdentity,
  SMALL_INTEGERS,
  wgslType,
  type Ty,
  type Value,
} from './wgsl-builtins.js';
import { f32Literal, literal, literalWords, one, zero } from './wgsl-literals.js';
import { COMPARISONS, isAssignment, OPERATORS } from './wgsl-operators.js';
import { TranslationState } from './wgsl-translation-state.js';
import { describe, fail, isInteger, typeName, typeOfNode, unsignedness, Untranslatable } from './wgsl-types.js';

/** Translates expressions; calls and `x[i]` are the hooks the layers above fill in. */
export abstract class ExpressionTranslator extends TranslationState {
  protected abstract call(node: SyntaxNode, context: Ty | undefined, statement: boolean): Value;
  protected abstract element(node: SyntaxNode, valueOf?: (read: Value) => Value): Value;

  protected condition(node: SyntaxNode): string {
    return this.truthy(this.expression(node, 'bool'), node).code;
  }

  /** AssemblyScript's truthiness of `value`, as a bool. */
  protected truthy(value: Value, node: SyntaxNode): Value {
    if (value.base !== undefined) return fail(node, 'tests an address for zero (its value differs between devices)');
    switch (value.type) {
      case 'bool':
        return value;
      case 'f32':
        return { code: `${this.use('offload_truthy_f32')}(${value.code})`, type: 'bool' };
      case 'void':
        return fail(node, 'tests a call without a value');
      case 'v128':
        return fail(node, 'tests a v128 for truth (test its lanes with anyLane or v128.any_true)');
      default:
        return { ...group(`${value.code} != ${zero(value.type)}`), type: 'bool' };
    }
  }

  /** `value` computed when the kernel runs (see SUPPORT_FUNCTIONS.offload_i32). */
  protected atRunTime(value: Value): Value {
    const identity = runTimeIdentity(value.type);
    if (identity === undefined) return value;
    return { code: `${this.use(identity)}(${value.code})`, type: value.type };
  }

  protected expression(node: SyntaxNode, context?: Ty, statement = false): Value {
    if (++this.depth > MAX_DEPTH)
      fail(node, `nests expressions and statements deeper than ${MAX_DEPTH} (WGSL compilers may refuse deeper)`);
    try {
      return this.expressionAt(node, context, statement);
    } finally {
      this.depth--;
    }
  }

  protected expressionAt(node: SyntaxNode, context: Ty | undefined, statement: boolean): Value {
    switch (node.k) {
      case 'Parenthesized': {
        const inner = this.expression(node.expression as SyntaxNode, context);
        return inner.grouped ? inner : { ...inner, ...group(inner.code) };
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
  protected conditional(node: SyntaxNode, context: Ty | undefined): Value {
    const condition = this.truthy(this.expression(node.condition as SyntaxNode, 'bool'), node).code;
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
  protected logical(node: SyntaxNode, operator: string, left: Value, rightNode: SyntaxNode): Value {
    const test = this.truthy(left, node).code;
    const right = this.collect(() => this.truthy(this.expression(rightNode, 'bool'), rightNode).code);
    if (right.before.length === 0) return { ...group(`${test} ${OPERATORS[operator]!} ${right.value}`), type: 'bool' };
    const name = `offload_c${this.temps++}`;
    const when = operator === 'Ampersand_Ampersand' ? name : `!${name}`;
    this.hoist(node, `var ${name} = ${test}; if (${when}) { ${right.before.join(' ')} ${name} = ${right.value}; }`);
    return { code: name, type: 'bool' };
  }

  /** A top-level constant, inlined: its initializer in its own scope (no locals), in its declared type. */
  protected constant(node: SyntaxNode, constant: ConstantSyntax, context?: Ty): Value {
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
      return {
        code: value.code,
        type: value.type,
        literal: declared ? undefined : value.literal,
        ...(value.grouped ? { grouped: true } : {}),
      };
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
  protected binary(
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
      if (isConstant(left) && isConstant(right)) left = this.atRunTime(left);
      // A count the kernel computes is masked too: WGSL refuses 32 or more where it can evaluate it early (from the overrides).
      const amount = right.literal
        ? `${BigInt.asUintN(5, BigInt(right.literal.value as string))}u`
        : `(${right.type === 'i32' ? `u32(${right.code})` : right.code} & 31u)`;
      if (operator === 'GreaterThan_GreaterThan_GreaterThan' && left.type === 'i32')
        return { code: `bitcast<i32>(bitcast<u32>(${left.code}) >> ${amount})`, type: 'i32' };
      const shifted = group(`${left.code} ${operator === 'LessThan_LessThan' ? '<<' : '>>'} ${amount}`);
      // x << 2 is 4x: its value / 4 is x (the bits shifted out are the same either way).
      const quarter =
        operator === 'LessThan_LessThan' && right.literal && Number(right.literal.value) === 2
          ? left.type === 'i32'
            ? `u32(${left.code})`
            : left.code
          : undefined;
      return { ...shifted, type: left.type, ...(quarter ? { words: quarter } : {}) };
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
    if (COMPARISONS.has(operator)) return { ...group(`${left.code} ${symbol} ${right.code}`), type: 'bool' };
    if (operator === 'Percent' && type === 'f32')
      fail(
        node,
        "computes an f32 remainder: AssemblyScript's is exact (fmod), WGSL's is x - y * trunc(x / y), which rounds",
      );
    // Two constants: WGSL would evaluate them when compiling and refuse an overflow or a division by zero.
    if (isConstant(left) && isConstant(right)) left = this.atRunTime(left);
    else if (
      (operator === 'Slash' || operator === 'Percent') &&
      isConstant(right) &&
      !(right.literal?.literalKind === 'Integer' && BigInt(right.literal.value as string) !== 0n)
    )
      // WGSL refuses a constant divisor of 0 (wasm traps when it runs).
      right = this.atRunTime(right);
    const lw = left.words ?? literalWords(left);
    const rw = right.words ?? literalWords(right);
    const words =
      (operator === 'Plus' || operator === 'Minus') && unsignedness(type) && lw !== undefined && rw !== undefined
        ? `(${lw} ${symbol} ${rw})`
        : undefined;
    return { ...group(`${left.code} ${symbol} ${right.code}`), type, base, ...(words ? { words } : {}) };
  }

  protected unify(node: SyntaxNode, a: SyntaxNode, b: SyntaxNode, context?: Ty): [Value, Value] {
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

  protected prefix(node: SyntaxNode, context?: Ty): Value {
    const operand = node.operand as SyntaxNode;
    switch (node.operator) {
      case 'Minus': {
        if (operand.k === 'Literal') return literal(operand, context, true);
        let value = this.expression(operand, context);
        if (isConstant(value)) value = this.atRunTime(value);
        if (value.base !== undefined) fail(node, 'negates an address');
        if (value.type === 'bool') fail(node, 'negates a bool');
        // WGSL has no unary minus on u32; AssemblyScript's wraps.
        return unsignedness(value.type)
          ? { ...group(`0u - ${value.code}`), type: value.type }
          : { code: `-${value.code}`, type: value.type };
      }
      case 'Plus':
        return this.expression(operand, context);
      case 'Exclamation':
        return { code: `!(${this.truthy(this.expression(operand, 'bool'), node).code})`, type: 'bool' };
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

  protected assertion(node: SyntaxNode): Value {
    if (node.assertionKind !== 'Prefix' && node.assertionKind !== 'As')
      return fail(node, `uses a ${String(node.assertionKind)} assertion`);
    const small = SMALL_INTEGERS[typeName(node.toType as SyntaxNode)];
    if (small !== undefined) {
      // A cast to i8..u16 wraps to its width; the result computes on as an i32 or u32.
      let value = this.expression(node.expression as SyntaxNode);
      if (isConstant(value)) value = this.atRunTime(value);
      if (!isInteger(value.type) || value.base !== undefined)
        fail(node, `casts a ${value.base ? 'address' : value.type} to a small integer`);
      if (!small.signed)
        return { ...group(`u32(${value.code}) & ${small.bits === 8 ? '0xffu' : '0xffffu'}`), type: 'u32' };
      return { ...group(`(i32(${value.code}) << ${32 - small.bits}u) >> ${32 - small.bits}u`), type: 'i32' };
    }
    const to = typeOfNode(node.toType as SyntaxNode, 'a cast');
    const value = this.expression(node.expression as SyntaxNode, to);
    return this.convert(value, to, node);
  }

  /** An explicit conversion (`<T>x`, `x as T`), as AssemblyScript converts. */
  protected convert(value: Value, to: Ty, node: SyntaxNode): Value {
    if (
      value.type === to ||
      (value.type === 'u32' && to === 'usize') ||
      (value.type === 'usize' && to === 'u32' && value.base === undefined)
    ) {
      return {
        code: value.code,
        type: to,
        base: value.base,
        ...(isConstant(value) ? { constant: true } : {}),
        ...(value.grouped ? { grouped: true } : {}),
      };
    }
    if (value.base !== undefined)
      return fail(node, `converts an address to ${to} (an address's value differs between devices)`);
    if (to === 'bool') return this.truthy(value, node);
    if (value.type === 'bool') return { code: `select(${zero(to)}, ${one(to)}, ${value.code})`, type: to };
    if (value.type === 'void') return fail(node, 'converts a call without a value');
    if (value.type === 'f32' && isInteger(to))
      return {
        code: `${this.use(to === 'i32' ? 'offload_f32_to_i32' : 'offload_f32_to_u32')}(${value.code})`,
        type: to,
      };
    return keepsConstant(value, { code: `${wgslType(to)}(${value.code})`, type: to });
  }

  /** An implicit conversion (an argument, an initializer, an assignment): only between 32-bit integers. */
  protected coerce(value: Value, to: Ty, node: SyntaxNode): Value {
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

  protected property(node: SyntaxNode): Value {
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
}
