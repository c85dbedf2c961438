/**
 * Statements of the kernel subset in WGSL: declarations, assignments, branches and loops (each
 * loop's iterations counted against the invocation's budget), and the statements an expression
 * needs run before it (a conditional with effects becomes an `if` that sets a variable).
 */
import type { SyntaxNode } from './compiler-job.js';
import { MAX_DEPTH, MEMORY_TYPES, wgslType, type Value } from './wgsl-builtins.js';
import { CallTranslator } from './wgsl-calls.js';
import { one } from './wgsl-literals.js';
import { COMPOUND, isAssignment } from './wgsl-operators.js';
import type { Binding } from './wgsl-translation-state.js';
import { describe, fail, typeName, typeOfNode } from './wgsl-types.js';

/** Translates statements. */
export abstract class StatementTranslator extends CallTranslator {
  protected block(node: SyntaxNode, depth: number): string {
    return this.scoped(() => {
      const statements = node.k === 'Block' ? (node.statements as SyntaxNode[]) : [node];
      return statements.map((statement) => this.statement(statement, depth)).join('');
    });
  }

  protected statement(node: SyntaxNode, depth: number): string {
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

  protected statementAt(node: SyntaxNode, depth: number): string {
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
  protected loopBody(node: SyntaxNode, depth: number): { code: string; guard: string } {
    const barriers = this.barriers;
    const code = this.block(node, depth);
    const guard =
      this.barriers === barriers ? `${'  '.repeat(depth)}if (${this.use('offload_over_budget')}()) { break; }\n` : '';
    return { code, guard };
  }

  protected variable(node: SyntaxNode, inline = false): string {
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
  protected simpleStatement(node: SyntaxNode): string {
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

  protected target(node: SyntaxNode): Binding {
    if (node.k !== 'Identifier')
      return fail(node, `assigns to a ${describe(node)}; only local variables and parameters can be assigned`);
    const found = this.lookup(node);
    if (!found) return fail(node, `assigns to '${node.text as string}', which is not a local variable or parameter`);
    if (found.constant) fail(node, `assigns to constant '${node.text as string}'`);
    return found;
  }

  protected assignment(node: SyntaxNode): string {
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
}

/** Whether `node` returns on every path, by WGSL's rules (a return, or an if/else whose branches both do). */
export function alwaysReturns(node: SyntaxNode): boolean {
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

export function isSmallLoad(node: SyntaxNode): boolean {
  const callee = node.k === 'Call' ? (node.expression as SyntaxNode) : undefined;
  const type = ((node.typeArguments as SyntaxNode[] | null) ?? [])[0];
  return (
    callee?.element === '~lib/builtins/load' &&
    type !== undefined &&
    ['i8', 'u8', 'i16', 'u16', 'bool'].includes(typeName(type))
  );
}
