/**
 * wasm's 128-bit SIMD in WGSL: a v128 is a `vec4u` of its four 32-bit lanes' bits, and each
 * f32x4 / i32x4 / v128 operation reinterprets them (bitcast) as the lanes it works on, so that
 * a value keeps its bits whichever view the kernel takes of it, as in wasm. Only the operations
 * on 32-bit lanes that kernels use are covered; the others keep the kernel wasm-only with a note.
 */

/** The WGSL type of a v128 value. */
export const V128 = 'vec4u';

/** A SIMD operation: the types of its arguments, its result's, and its WGSL from its arguments' code. */
export interface SimdOperation {
  args: ('f32' | 'i32' | 'v128')[];
  type: 'f32' | 'i32' | 'v128' | 'bool';
  /** The lane an extract_lane reads: its last argument, a constant 0..3. */
  lane?: true;
  /** Its WGSL is one parenthesized expression (see Value.grouped). */
  grouped?: true;
  wgsl: (args: string[]) => string;
}

const asF = (code: string): string => `bitcast<vec4f>(${code})`;
const asI = (code: string): string => `bitcast<vec4i>(${code})`;
const fromF = (code: string): string => `bitcast<${V128}>(${code})`;
/** A lane mask from a comparison: all ones where true, as wasm's comparisons give. */
const mask = (test: string): string => `select(${V128}(0u), ${V128}(0xffffffffu), ${test})`;

const f32Binary = (op: string): SimdOperation => ({
  args: ['v128', 'v128'],
  type: 'v128',
  wgsl: ([a, b]) => fromF(`${asF(a!)} ${op} ${asF(b!)}`),
});
const f32Compare = (op: string): SimdOperation => ({
  args: ['v128', 'v128'],
  type: 'v128',
  wgsl: ([a, b]) => mask(`${asF(a!)} ${op} ${asF(b!)}`),
});
const i32Compare = (op: string): SimdOperation => ({
  args: ['v128', 'v128'],
  type: 'v128',
  wgsl: ([a, b]) => mask(`${asI(a!)} ${op} ${asI(b!)}`),
});
// Lanes wrap on overflow in both: u32 arithmetic on the bits is i32's.
const bitsBinary = (op: string): SimdOperation => ({
  args: ['v128', 'v128'],
  type: 'v128',
  grouped: true,
  wgsl: ([a, b]) => `(${a!} ${op} ${b!})`,
});

/** The operations by namespace and name (`f32x4.add`). */
export const SIMD_OPERATIONS: Record<string, Record<string, SimdOperation>> = {
  f32x4: {
    splat: { args: ['f32'], type: 'v128', wgsl: ([x]) => fromF(`vec4f(${x!})`) },
    add: f32Binary('+'),
    sub: f32Binary('-'),
    mul: f32Binary('*'),
    div: f32Binary('/'),
    eq: f32Compare('=='),
    ne: f32Compare('!='),
    lt: f32Compare('<'),
    le: f32Compare('<='),
    gt: f32Compare('>'),
    ge: f32Compare('>='),
    neg: { args: ['v128'], type: 'v128', grouped: true, wgsl: ([a]) => `(${a!} ^ ${V128}(0x80000000u))` },
    abs: { args: ['v128'], type: 'v128', grouped: true, wgsl: ([a]) => `(${a!} & ${V128}(0x7fffffffu))` },
    sqrt: { args: ['v128'], type: 'v128', wgsl: ([a]) => fromF(`sqrt(${asF(a!)})`) },
    convert_i32x4_s: { args: ['v128'], type: 'v128', wgsl: ([a]) => fromF(`vec4f(${asI(a!)})`) },
    extract_lane: { args: ['v128'], type: 'f32', lane: true, wgsl: ([a, lane]) => `bitcast<f32>(${a!}[${lane!}])` },
  },
  i32x4: {
    splat: { args: ['i32'], type: 'v128', wgsl: ([x]) => `${V128}(bitcast<u32>(${x!}))` },
    add: bitsBinary('+'),
    sub: bitsBinary('-'),
    mul: bitsBinary('*'),
    eq: i32Compare('=='),
    ne: i32Compare('!='),
    lt_s: i32Compare('<'),
    le_s: i32Compare('<='),
    gt_s: i32Compare('>'),
    ge_s: i32Compare('>='),
    extract_lane: { args: ['v128'], type: 'i32', lane: true, wgsl: ([a, lane]) => `bitcast<i32>(${a!}[${lane!}])` },
  },
  v128: {
    and: bitsBinary('&'),
    or: bitsBinary('|'),
    xor: bitsBinary('^'),
    not: { args: ['v128'], type: 'v128', grouped: true, wgsl: ([a]) => `(~${a!})` },
    any_true: { args: ['v128'], type: 'bool', wgsl: ([a]) => `any(${a!} != ${V128}(0u))` },
    bitselect: {
      args: ['v128', 'v128', 'v128'],
      type: 'v128',
      grouped: true,
      wgsl: ([a, b, m]) => `((${a!} & ${m!}) | (${b!} & ~${m!}))`,
    },
  },
};

/** The four-lane constructors `i32x4(a, b, c, d)` and `f32x4(a, b, c, d)`. */
export const SIMD_CONSTRUCTORS: Record<string, SimdOperation> = {
  i32x4: {
    args: ['i32', 'i32', 'i32', 'i32'],
    type: 'v128',
    wgsl: (lanes) => `${V128}(${lanes.map((lane) => `bitcast<u32>(${lane})`).join(', ')})`,
  },
  f32x4: { args: ['f32', 'f32', 'f32', 'f32'], type: 'v128', wgsl: (lanes) => fromF(`vec4f(${lanes.join(', ')})`) },
};

/**
 * The device library's SIMD helpers that compute (assembly/device.ts); its four-lane loads and
 * stores (loadF32x4, storeF32x4, loadI32x4, storeI32x4) address memory, which the translator does.
 */
export const SIMD_HELPERS: Record<string, SimdOperation> = {
  laneIndices: {
    args: ['i32'],
    type: 'v128',
    grouped: true,
    wgsl: ([first]) => `(${V128}(bitcast<u32>(${first!})) + ${V128}(0u, 1u, 2u, 3u))`,
  },
  anyLane: SIMD_OPERATIONS.v128!.any_true!,
  // A true lane is -1: subtracting the mask adds one where it holds.
  countWhere: bitsBinary('-'),
  selectLanes: SIMD_OPERATIONS.v128!.bitselect!,
};

/** The four-lane loads and stores of the device library. */
export const SIMD_MEMORY = new Set(['loadF32x4', 'storeF32x4', 'loadI32x4', 'storeI32x4']);
