/**
 * Memory accesses in WGSL: load<T>/store<T>, `x[i]` of a typed pointer, atomics and the SIMD
 * loads and stores, each at an address traced back to one pointer parameter and lowered to its
 * binding's words (1- and 2-byte accesses shift and mask within a word, stores atomically).
 */
import type { SyntaxNode } from './compiler-job.js';
import { ATOMIC_RMW, group, MEMORY_TYPES, TEAM_MEMORY_BASE, type Ty, type Value } from './wgsl-builtins.js';
import { V128 } from './wgsl-simd.js';
import { ExpressionTranslator } from './wgsl-expressions.js';
import { fail, isInteger } from './wgsl-types.js';
import { FAULT_ELEMENT_TYPES } from '../image/manifest.js';

/** Translates expressions that read or write memory. */
export abstract class MemoryTranslator extends ExpressionTranslator {
  /** loadF32x4 / loadI32x4 (`base`, `index`): the four 32-bit words from element `index` on; storeF32x4 / storeI32x4 write them. */
  protected simdMemory(node: SyntaxNode, name: string, args: SyntaxNode[]): Value {
    const isStore = name.startsWith('store');
    if (args.length !== (isStore ? 3 : 2)) return fail(node, `calls ${name}() with ${args.length} arguments`);
    const pointer = this.expression(args[0]!, 'usize');
    if (pointer.base === undefined)
      return fail(node, 'accesses memory at an address that cannot be traced back to one pointer parameter');
    const index = this.coerce(this.expression(args[1]!, 'i32'), 'i32', args[1]!);
    const param = pointer.base;
    // Read and written as 32-bit words (a ptr<T> passed this way is bound as words).
    this.memory.raw?.add(param);
    const binding = this.binding(param);
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

  /** The binding and byte offset of an address argument plus a constant offset. */
  protected address(
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
    return { binding: this.binding(value.base), param: value.base, offset, word };
  }

  protected memoryAccess(node: SyntaxNode, name: 'load' | 'store', typeArgs: string[], args: SyntaxNode[]): Value {
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
  protected access(
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
      if (!memoryType.signed) return { ...group(`(${raw} >> ${shift}) & ${mask}`), type: 'u32' };
      const width = memoryType.bytes * 8;
      return { ...group(`bitcast<i32>(${raw} << (${32 - width}u - ${shift})) >> ${32 - width}u`), type: 'i32' };
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
  protected element(node: SyntaxNode, valueOf?: (read: Value) => Value): Value {
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
    const at = this.atRunTime(index);
    const u = index.type === 'i32' ? `u32(${at.code})` : at.code;
    const param = bound.base;
    const binding = this.binding(param);
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
      check
        ? { code: `if (${this.use('offload_in_bounds')}(${u}, ${check.args})) { ${store.code}; }`, type: 'void' }
        : store;
    const checkedAt = check && valueOf === undefined ? `${this.use('offload_checked_index')}(${u}, ${check.args})` : u;
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

  protected atomic(node: SyntaxNode, op: string, typeArgs: string[], args: SyntaxNode[], statement: boolean): Value {
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
