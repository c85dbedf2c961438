/**
 * Calls in WGSL: the device library, AssemblyScript's builtins and Mathf, SIMD operations
 * (wgsl-simd.ts), and the kernel sources' own functions (translated once each as helpers).
 */
import type { SyntaxNode } from './compiler-job.js';
import {
  DEVICE_FUNCTIONS,
  DEVICE_PREFIX,
  isConstant,
  MATH_BUILTINS,
  MATHF,
  mathSupport,
  TEAM_MEMORY_BASE,
  type Ty,
  type Value,
} from './wgsl-builtins.js';
import { SIMD_CONSTRUCTORS, SIMD_HELPERS, SIMD_MEMORY, SIMD_OPERATIONS, type SimdOperation } from './wgsl-simd.js';
import { MemoryTranslator } from './wgsl-memory.js';
import { helperName } from './wgsl-names.js';
import { describe, fail, NO_V128, SIMD_TYPES, typeName, typeOf } from './wgsl-types.js';

/** Translates calls. */
export abstract class CallTranslator extends MemoryTranslator {
  protected call(node: SyntaxNode, context: Ty | undefined, statement: boolean): Value {
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
        return { code: this.math(math.wgsl, 'f32', values), type: 'f32' };
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
      const values = args.map((arg, i) => this.coerce(this.expression(arg, device.args[i]), device.args[i]!, arg));
      if (device === DEVICE_FUNCTIONS.barrier) this.barriers++;
      for (const support of device.support ?? []) this.use(support);
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
  protected simd(node: SyntaxNode, name: string, operation: SimdOperation, args: SyntaxNode[]): Value {
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
    return { code: operation.wgsl(codes), type: operation.type, ...(operation.grouped ? { grouped: true } : {}) };
  }

  protected builtin(node: SyntaxNode, name: string, typeArgs: string[], args: SyntaxNode[], context?: Ty): Value {
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
        code: `select(${b.code}, ${a.code}, ${this.truthy(this.expression(args[2]!, 'bool'), node).code})`,
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
    return { code: this.math(math.wgsl, type, coerced), type };
  }

  /**
   * A math function on `values`: f32 min and max as wasm's, and the first argument computed at
   * run time when all are constants (WGSL would evaluate, and may refuse, sqrt(-1.0)).
   */
  private math(wgsl: string, type: Ty, values: Value[]): string {
    const support = mathSupport(wgsl, type);
    const name = support === undefined ? wgsl : this.use(support);
    const constant = values.every(isConstant);
    const args = values.map((value, i) => (constant && i === 0 ? this.atRunTime(value) : value).code);
    return `${name}(${args.join(', ')})`;
  }
}
