/**
 * One function in WGSL: a kernel as an entry point with its bindings (a uniform struct of its
 * scalars, a storage buffer per pointer parameter), a per-item kernel's body as an entry point
 * that runs it once per item, or a called function as a WGSL function.
 */
import {
  ARRAY_ELEMENTS,
  GRID_VARS,
  ITEM_COUNT_NAMES,
  ITEM_VARS,
  TRANSLATED_THREADS,
  TRANSLATED_THREADS_XYZ,
  wgslType,
} from './wgsl-builtins.js';
import { zero } from './wgsl-literals.js';
import { helperName } from './wgsl-names.js';
import { alwaysReturns, StatementTranslator } from './wgsl-statements.js';
import type { Binding } from './wgsl-translation-state.js';
import { typeOf } from './wgsl-types.js';
import { pointerElementOf } from './kernel-signatures.js';
import { POINTER_BYTES_PREFIX } from '../image/manifest.js';

/** Translates one function: a kernel (an entry point with its bindings) or a helper (a WGSL function). */
export class FunctionTranslator extends StatementTranslator {
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
    // A typed pointer's element type, read once from the compiler's name for `ptr<T>`.
    const entryParams = [
      ...(items ? params.slice(1) : params),
      ...this.extraParams.map((name) => ({ name, type: 'i32' })),
      ...(items ? ITEM_COUNT_NAMES.map((name) => ({ name, type: 'i32' })) : []),
    ].map((param) => ({ ...param, element: pointerElementOf(param.type) }));
    entryParams.forEach((param, index) => {
      const bytes = `${POINTER_BYTES_PREFIX}${param.name}`;
      if (this.extraParams.includes(bytes) && param.element !== undefined)
        this.checked.set(param.name, { bytes, param: index });
    });
    for (const param of entryParams) {
      const element = param.element;
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
}
