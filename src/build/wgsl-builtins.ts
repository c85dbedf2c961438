/**
 * What the WGSL translation maps AssemblyScript onto: its value types, the device library's and
 * the builtins' WGSL twins, memory access types, the support functions a translated module may
 * call, and the names WGSL reserves. Tables only; the translator (wgsl-translate.ts and the layers
 * it names) walks the syntax trees.
 */
import { FAULT_BINDING_NAME, FAULT_KINDS, FAULT_WORDS, ITEM_COUNT_PARAMS } from '../image/manifest.js';
import type { SyntaxNode } from './compiler-job.js';
import { V128 } from './wgsl-simd.js';
/** The override constant translated kernels take their workgroup size from (the launch's `threads`). */
export const TRANSLATED_THREADS = 'offload_threads';
/** The workgroup size's override constants along x, y and z (the launch's threads). */
export const TRANSLATED_THREADS_XYZ = [TRANSLATED_THREADS, 'offload_threads_y', 'offload_threads_z'] as const;
/**
 * Team memory (teamMemory()): a workgroup array of 32-bit words sized by the override the device
 * sets to the launch's teamMemoryBytes (docs/wgsl-abi.md), addressed like a pointer parameter.
 */
export const TEAM_MEMORY_BASE = 'teamMemory()';
export const TEAM_MEMORY_WORDS = 'offload_team_words';

/** Value types the subset computes with; `usize` is an unsigned 32-bit number that may be an address. */
export type Ty = 'i32' | 'u32' | 'usize' | 'f32' | 'bool' | 'void' | 'v128';

/** A translated expression: its WGSL text, its type, and for an address the pointer parameter it derives from. */
export interface Value {
  code: string;
  type: Ty;
  base?: string;
  /**
   * For an address (or a number added to one) known to be a multiple of 4: its value / 4, so
   * that a 4-byte access indexes its binding's words without shifting the byte offset back.
   */
  words?: string;
  /** An untyped literal whose type came from its context (it may adopt the other operand's). */
  literal?: SyntaxNode;
  /** A WGSL constant expression other than a literal (a cast literal): WGSL evaluates it when compiling. */
  constant?: boolean;
  /** `code` is one parenthesized expression, `(...)`: an operand, or `(x)` in the source, as it is. */
  grouped?: boolean;
}

/** `inner` in parentheses, marked as such (see Value.grouped). */
export function group(inner: string): { code: string; grouped: true } {
  return { code: `(${inner})`, grouped: true };
}

/** Whether WGSL evaluates `value` when compiling (and refuses an overflow or a division by zero there). */
export function isConstant(value: Value): boolean {
  return value.literal !== undefined || value.constant === true;
}

/**
 * `result`, an operation on `operand` alone, marked as a constant expression when the operand is
 * one: WGSL evaluates `~c` and `i32(c)` when compiling too, so what is computed from them (a
 * shift that changes the sign) must still be moved to run time.
 */
export function keepsConstant(operand: Value, result: Value): Value {
  return isConstant(operand) ? { ...result, constant: true } : result;
}

/**
 * How deeply expressions and statements may nest in a translated kernel: WGSL compilers bound
 * nesting (Tint at 127 brace levels), and the translation must load wherever its image does.
 */
export const MAX_DEPTH = 64;

/** A kernel's place, where a device library function reads it; filled at the start of each entry point. */
export const GRID_VARS = ['offload_team', 'offload_teams', 'offload_thread'] as const;
/** A per-item kernel's item and its range's sizes (itemId, itemCount), set where its entry point starts. */
export const ITEM_VARS = ['offload_item', 'offload_items'] as const;
/** The item counts a per-item kernel takes after its own parameters (ITEM_COUNT_PARAMS of the manifest). */
export const ITEM_COUNT_NAMES = ITEM_COUNT_PARAMS;
/** Element types a typed pointer's binding can be an array of, when nothing else reads it as words. */
export const ARRAY_ELEMENTS = new Set(['i32', 'u32', 'f32']);

/**
 * The device library (assembly/device.ts) in WGSL: each function's WGSL for its arguments, or
 * why it has none. One table, so that new device functions (3-D grids, barriers, team memory)
 * are one entry each.
 */
export const DEVICE_FUNCTIONS: Record<
  string,
  | {
      type: Ty;
      args: Ty[];
      optional?: number;
      /** The support functions (SUPPORT_FUNCTIONS) its WGSL calls. */
      support?: SupportName[];
      wgsl: (args: (Value | undefined)[]) => string;
    }
  | { unsupported: string }
> = {
  // The dimension argument (default x) picks a component of the builtin's vec3u.
  teamId: { type: 'i32', args: ['i32'], optional: 1, wgsl: ([d]) => `i32(${axis('offload_team', d, '0u')})` },
  numTeams: { type: 'i32', args: ['i32'], optional: 1, wgsl: ([d]) => `i32(${axis('offload_teams', d, '1u')})` },
  threadId: { type: 'i32', args: ['i32'], optional: 1, wgsl: ([d]) => `i32(${axis('offload_thread', d, '0u')})` },
  // Translated kernels have a one-dimensional workgroup: threads along y and z are 1.
  numThreads: {
    type: 'i32',
    args: ['i32'],
    optional: 1,
    support: ['offload_i32'],
    // Computed at run time: an expression of override constants alone is evaluated, and may be refused, when the pipeline is made.
    wgsl: ([d]) => `offload_i32(i32(${axis(`vec3u(${TRANSLATED_THREADS_XYZ.join(', ')})`, d, '1u')}))`,
  },
  barrier: { type: 'void', args: [], wgsl: () => 'workgroupBarrier()' },
  // A per-item kernel's item and range (set at the start of its entry point; see ITEM_VARS).
  itemId: { type: 'i32', args: ['i32'], optional: 1, wgsl: ([d]) => `i32(${axis(ITEM_VARS[0], d, '0u')})` },
  itemCount: { type: 'i32', args: ['i32'], optional: 1, wgsl: ([d]) => `i32(${axis(ITEM_VARS[1], d, '1u')})` },
  hostCall: { unsupported: 'a GPU cannot wait for the program in the middle of a dispatch' },
  print: { unsupported: 'print() writes to the host, which WGSL kernels cannot reach' },
};

/**
 * Component `d` (an i32 value, default x) of a vec3u builtin: a swizzle where `d` is a literal
 * 0 to 2, else the component chosen when the kernel runs and `past` beyond z.
 */
export function axis(vector: string, d: Value | undefined, past: '0u' | '1u'): string {
  const literal = d === undefined ? 0 : d.literal?.literalKind === 'Integer' ? Number(d.literal.value) : undefined;
  if (literal !== undefined && literal >= 0 && literal <= 2) return `${vector}.${'xyz'[literal]}`;
  // Past z a dimension has size 1 and index 0, as on the host device.
  return `select(${vector}[min(u32(${d!.code}), 2u)], ${past}, u32(${d!.code}) > 2u)`;
}
export const DEVICE_PREFIX = '~lib/offload-ts/device/';

/** Generic builtins of AssemblyScript (`~lib/builtins/<name>`) with a WGSL twin: which operand types they take. */
export const MATH_BUILTINS: Record<string, { wgsl: string; arity: number; types: Ty[] }> = {
  min: { wgsl: 'min', arity: 2, types: ['i32', 'u32', 'usize', 'f32'] },
  max: { wgsl: 'max', arity: 2, types: ['i32', 'u32', 'usize', 'f32'] },
  abs: { wgsl: 'abs', arity: 1, types: ['i32', 'f32'] },
  sqrt: { wgsl: 'sqrt', arity: 1, types: ['f32'] },
  floor: { wgsl: 'floor', arity: 1, types: ['f32'] },
  ceil: { wgsl: 'ceil', arity: 1, types: ['f32'] },
  trunc: { wgsl: 'trunc', arity: 1, types: ['f32'] },
  clz: { wgsl: 'countLeadingZeros', arity: 1, types: ['i32', 'u32'] },
  ctz: { wgsl: 'countTrailingZeros', arity: 1, types: ['i32', 'u32'] },
  popcnt: { wgsl: 'countOneBits', arity: 1, types: ['i32', 'u32'] },
};

/** Mathf (AssemblyScript's f32 math) functions WGSL has, by arity. */
export const MATHF: Record<string, { wgsl: string; arity: number }> = Object.fromEntries([
  ...[
    'sqrt',
    'abs',
    'floor',
    'ceil',
    'trunc',
    'sin',
    'cos',
    'tan',
    'asin',
    'acos',
    'atan',
    'sinh',
    'cosh',
    'tanh',
    'exp',
    'exp2',
    'log',
    'log2',
    'sign',
  ].map((name) => [name, { wgsl: name, arity: 1 }]),
  ['atan2', { wgsl: 'atan2', arity: 2 }],
  ['pow', { wgsl: 'pow', arity: 2 }],
  ['min', { wgsl: 'min', arity: 2 }],
  ['max', { wgsl: 'max', arity: 2 }],
]);
export const MATHF_CONSTANTS: Record<string, number> = {
  PI: Math.PI,
  E: Math.E,
  LN2: Math.LN2,
  LN10: Math.LN10,
  SQRT2: Math.SQRT2,
};

/** atomic.<op> on 32-bit integers, as WGSL atomic builtins. */
export const ATOMIC_RMW: Record<string, string> = {
  add: 'atomicAdd',
  sub: 'atomicSub',
  and: 'atomicAnd',
  or: 'atomicOr',
  xor: 'atomicXor',
  xchg: 'atomicExchange',
};

/**
 * WGSL functions that make the translation compute what wasm computes (docs/wgsl-abi.md,
 * "Semantics"), emitted into a module that calls them, with those they call. The translator
 * records each one it calls (TranslationState.use); the module takes those and what they call.
 */
export const SUPPORT_FUNCTIONS = {
  // NaN tested on the bits: lavapipe (and other drivers' fast math) fold `x != x` to false.
  offload_is_nan: 'fn offload_is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }',
  // AssemblyScript's truthiness of an f32 (neither zero nor NaN), evaluating it once.
  offload_truthy_f32: 'fn offload_truthy_f32(x: f32) -> bool { return x != 0.0f && !offload_is_nan(x); }',
  // wasm's f32.min and f32.max: NaN when either is NaN, and -0 below +0 (WGSL leaves both open).
  offload_min_f32:
    'fn offload_min_f32(a: f32, b: f32) -> f32 { if (offload_is_nan(a) || offload_is_nan(b)) { return bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b) | 0x7fc00000u); } if (a == b) { return bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b)); } return min(a, b); }',
  offload_max_f32:
    'fn offload_max_f32(a: f32, b: f32) -> f32 { if (offload_is_nan(a) || offload_is_nan(b)) { return bitcast<f32>(bitcast<u32>(a) | bitcast<u32>(b) | 0x7fc00000u); } if (a == b) { return bitcast<f32>(bitcast<u32>(a) & bitcast<u32>(b)); } return max(a, b); }',
  // wasm's saturating i32.trunc_sat_f32_s/u (AssemblyScript's <i32>x, <u32>x): NaN is 0, out of range clamps.
  offload_f32_to_i32:
    'fn offload_f32_to_i32(x: f32) -> i32 { if (offload_is_nan(x)) { return 0i; } if (x >= 2147483648.0f) { return 2147483647i; } if (x <= -2147483648.0f) { return i32(-2147483648); } return i32(x); }',
  offload_f32_to_u32:
    'fn offload_f32_to_u32(x: f32) -> u32 { if (offload_is_nan(x) || x <= -1.0f) { return 0u; } if (x >= 4294967296.0f) { return 4294967295u; } return u32(x); }',
  // A value WGSL computes when the kernel runs: an operation on two constants would be evaluated by
  // the WGSL compiler, which refuses what wasm computes (an overflow wraps, a division by zero traps at run time).
  offload_i32: 'fn offload_i32(x: i32) -> i32 { return x; }',
  offload_u32: 'fn offload_u32(x: u32) -> u32 { return x; }',
  offload_f32: 'fn offload_f32(x: f32) -> f32 { return x; }',
  // The first fault of the dispatch wins the fault word (FAULT_WORDS); the device reads it after.
  offload_fault_at: `fn offload_fault_at(kind: u32, param: u32, index: u32, elements: u32, element: u32) { if (atomicAdd(&${FAULT_BINDING_NAME}[${FAULT_WORDS.count}], 1u) == 0u) { atomicStore(&${FAULT_BINDING_NAME}[${FAULT_WORDS.kind}], kind); atomicStore(&${FAULT_BINDING_NAME}[${FAULT_WORDS.param}], param); atomicStore(&${FAULT_BINDING_NAME}[${FAULT_WORDS.index}], index); atomicStore(&${FAULT_BINDING_NAME}[${FAULT_WORDS.elements}], elements); atomicStore(&${FAULT_BINDING_NAME}[${FAULT_WORDS.elementType}], element); } }`,
  // A checked build's ptr<T> access: element `index` of a buffer of `bytes` bytes (from the pointer) of 1 << shift-byte elements.
  offload_in_bounds: `fn offload_in_bounds(index: u32, bytes: i32, shift: u32, param: u32, element: u32) -> bool { let elements = u32(max(bytes, 0i)) >> shift; if (index < elements) { return true; } offload_fault_at(${FAULT_KINDS.bounds}u, param, index, elements, element); return false; }`,
  // A read outside reads element 0 (whatever it holds: the launch fails).
  offload_checked_index: `fn offload_checked_index(index: u32, bytes: i32, shift: u32, param: u32, element: u32) -> u32 { if (offload_in_bounds(index, bytes, shift, param, element)) { return index; } return 0u; }`,
  // Every loop's iteration counts against the invocation's budget, which the device sets (a GPU cannot stop a dispatch).
  offload_over_budget: `fn offload_over_budget() -> bool { if (offload_budget == 0u) { offload_budget = max(atomicLoad(&${FAULT_BINDING_NAME}[${FAULT_WORDS.budget}]), 1u); } offload_spent += 1u; if (offload_spent <= offload_budget) { return false; } offload_fault_at(${FAULT_KINDS.budget}u, 0u, offload_spent, offload_budget, 0u); return true; }`,
};

export type SupportName = keyof typeof SUPPORT_FUNCTIONS;

/** The support functions each support function calls (so that a module that calls it has them too). */
export const SUPPORT_CALLS: Partial<Record<SupportName, SupportName[]>> = {
  offload_truthy_f32: ['offload_is_nan'],
  offload_min_f32: ['offload_is_nan'],
  offload_max_f32: ['offload_is_nan'],
  offload_f32_to_i32: ['offload_is_nan'],
  offload_f32_to_u32: ['offload_is_nan'],
  offload_in_bounds: ['offload_fault_at'],
  offload_checked_index: ['offload_in_bounds'],
  offload_over_budget: ['offload_fault_at'],
};

/** The support function that hands a value of `type` through unchanged, so that WGSL computes it at run time (see offload_i32). */
export function runTimeIdentity(type: Ty): SupportName | undefined {
  if (type === 'i32' || type === 'f32') return `offload_${type}`;
  return type === 'u32' || type === 'usize' ? 'offload_u32' : undefined;
}

/** The support function computing a math builtin on `type` in place of WGSL's: min and max of f32 as wasm's. */
export function mathSupport(wgsl: string, type: Ty): SupportName | undefined {
  return type !== 'f32'
    ? undefined
    : wgsl === 'min'
      ? 'offload_min_f32'
      : wgsl === 'max'
        ? 'offload_max_f32'
        : undefined;
}

/** Sizes and value types of what load<T>/store<T> can move. */
export const MEMORY_TYPES: Record<string, { bytes: 1 | 2 | 4; type: Ty; signed: boolean }> = {
  i32: { bytes: 4, type: 'i32', signed: true },
  u32: { bytes: 4, type: 'u32', signed: false },
  usize: { bytes: 4, type: 'u32', signed: false },
  f32: { bytes: 4, type: 'f32', signed: false },
  i16: { bytes: 2, type: 'i32', signed: true },
  u16: { bytes: 2, type: 'u32', signed: false },
  i8: { bytes: 1, type: 'i32', signed: true },
  u8: { bytes: 1, type: 'u32', signed: false },
  bool: { bytes: 1, type: 'u32', signed: false },
};

/**
 * Names a variable of the translation must not take: WGSL's keywords and reserved words, the
 * builtins the translation calls, and the keywords of wgsl_reflect (which reads the result).
 */
/** Casts to these wrap to their width (stores of them go through load<T>/store<T>). */
export const SMALL_INTEGERS: Record<string, { bits: 8 | 16; signed: boolean }> = {
  i8: { bits: 8, signed: true },
  u8: { bits: 8, signed: false },
  i16: { bits: 16, signed: true },
  u16: { bits: 16, signed: false },
};

export const WGSL_RESERVED = new Set(
  (
    'alias array atomic bitcast block bool break case const const_assert continue continuing default diagnostic discard else enable ' +
    'f16 f32 fallthrough false fn for function i32 if immediate let loop mcheckedAtx2 mcheckedAtx3 mcheckedAtx4 mat3x2 mat3x3 mat3x4 mat4x2 mat4x3 mat4x4 ' +
    'override private ptr read read_write requires return sampler sampler_comparison static_assert storage struct switch true type u32 ' +
    'uniform var vec2 vec3 vec4 vec2i vec3i vec4i vec2u vec3u vec4u vec2f vec3f vec4f while workgroup write ' +
    // WGSL's reserved words.
    'NULL Self abstract active alignas alignof as asm asm_fragment async attribute auto await become cast catch class co_await co_return ' +
    'co_yield coherent column_major common compile compile_fragment concept const_cast consteval constexpr constinit crate debugger decltype ' +
    'delete demote demote_to_helper do dynamic_cast enum explicit export extends extern external fallthrough filter final finally friend ' +
    'from fxgroup get goto groupshared highp impl implements import inline instanceof interface layout lowp macro macro_rules match ' +
    'mediump meta mod module move mut mutable namespace new nil noexcept noinline nointerpolation non_coherent noncoherent noperspective ' +
    'null nullptr of operator package packoffset partition pass patch pixelfragment precise precision premerge priv protected pub public ' +
    'readonly ref regardless register reinterpret_cast require resource restrict self set shared sizeof smooth snorm static static_cast ' +
    'std subroutine super target template this thread_local throw trait try typedef typeid typename typeof union unless unorm unsafe ' +
    'unsized use using varying virtual volatile wgsl where with writeonly yield ' +
    // Builtins the translation calls.
    'select min max abs sqrt floor ceil trunc sin cos tan asin acos atan atan2 sinh cosh tanh exp exp2 log log2 pow sign ' +
    'countLeadingZeros countTrailingZeros countOneBits atomicLoad atomicStore atomicAdd atomicSub atomicAnd atomicOr atomicXor atomicExchange ' +
    'team teams thread'
  ).split(' '),
);

/** The WGSL type of a value type. */
export function wgslType(type: Ty): string {
  return type === 'usize' ? 'u32' : type === 'v128' ? V128 : type;
}
