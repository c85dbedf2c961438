/**
 * What a kernel's code can do, read from its wasm instructions: whether one run of it is
 * bounded by its size alone (no loop, no call but to the device's imports, no bulk memory
 * operation, no wait), and whether
 * it may block (an atomic wait, or code this reader cannot follow).
 *
 * The host device runs a launch on the calling thread only if it cannot loop there for ever:
 * a synchronous wasm call on the main thread cannot be interrupted. For untrusted images (a
 * proxy's clients) that must be proven from the code, and this is the proof: a function with no
 * `loop`, no call into the module and no bulk memory operation executes each of its
 * instructions at most once (the imports it may call return at once).
 *
 * The reader decodes every instruction's immediates (MVP, sign extension, saturating
 * truncation, bulk memory, reference types, SIMD, threads); an opcode it does not know ends the
 * reading of that function, which then counts as unbounded and synchronising.
 */
import { BARRIER_IMPORT, DEVICE_IMPORT_MODULE, HOST_CALL_IMPORT } from '../image/wasm-abi.js';
import { ByteReader, malformed, readWasmModuleInfo, type WasmModuleInfo } from './wasm-module-info.js';

export interface CodeShape {
  /** One run executes each instruction at most once: no loop, call, bulk memory operation or wait. */
  bounded: boolean;
  /**
   * It, or a function it calls, uses atomic operations or waits (or the reader could not tell):
   * its teams may wait for each other, so they must not run one after another on one thread.
   */
  synchronizes: boolean;
  /** Size of the kernel function's own body, in bytes. */
  codeBytes: number;
  /** It, or a function it calls, calls the program (the device library's hostCall), or the reader could not tell. */
  callsHost: boolean;
  /**
   * The most bytes asyncify can save of one thread's stack at a barrier (the deepest chain of
   * frames from the kernel to the barrier import, each frame its locals and parameters plus 8
   * bytes); 0 when it cannot reach the barrier; undefined when no bound exists (a recursion, an
   * indirect call or code the reader does not know on the way).
   */
  barrierStackBytes: number | undefined;
}

const SECTION_TYPE = 1;
const SECTION_FUNCTION = 3;
const SECTION_CODE = 10;

/** Facts of one function body. */
interface FunctionFacts {
  loops: boolean;
  /** Direct callees (function indices, imports included). */
  calls: Set<number>;
  /** Globals read or written (global.get/set). */
  globals: Set<number>;
  /** call_indirect */
  indirect: boolean;
  /** memory.init/copy/fill or a table operation: they cost up to their length. */
  bulk: boolean;
  /** memory.atomic.wait32/64 */
  waits: boolean;
  /** Any other atomic operation but the fence. */
  atomics: boolean;
  /** An opcode this reader does not know, or a malformed body. */
  unknown: boolean;
  bytes: number;
  /** Bytes of its declared locals (parameters not included). */
  localBytes: number;
}

/** The shape of each exported function named in `kernels`, keyed by name (`info`: the module's, when already read). */
export function readCodeShapes(
  bytes: Uint8Array,
  kernels: readonly string[],
  info: WasmModuleInfo = readWasmModuleInfo(bytes),
): Map<string, CodeShape> {
  const functionImports = info.imports.filter((imp) => imp.kind === 'function');
  const importedFunctions = functionImports.length;
  // Imports that return at once. `trace` is not one (it writes to stderr, which may block), nor
  // `barrier` (the host device switches threads there: a team's run is as long as its threads'),
  // nor `host_call` (it waits for the program).
  const slow = new Set([
    'env.trace',
    `${DEVICE_IMPORT_MODULE}.${BARRIER_IMPORT}`,
    `${DEVICE_IMPORT_MODULE}.${HOST_CALL_IMPORT}`,
  ]);
  const quick = (callee: number) =>
    callee < importedFunctions && !slow.has(`${functionImports[callee]!.module}.${functionImports[callee]!.name}`);
  const bodies = codeBodies(bytes);
  const facts = bodies.map(readFunction);
  const frameBytes = frameSizes(bytes, facts);
  const shapes = new Map<string, CodeShape>();
  for (const name of kernels) {
    const exported = info.exports.find((exp) => exp.kind === 'function' && exp.name === name);
    const own = exported === undefined ? undefined : facts[exported.index - importedFunctions];
    if (own === undefined) {
      shapes.set(name, {
        bounded: false,
        synchronizes: true,
        codeBytes: 0,
        callsHost: true,
        barrierStackBytes: undefined,
      });
      continue;
    }
    // Calls to the device library's imports and to abort and seed are allowed: each returns at once.
    const callsCode = [...own.calls].some((callee) => !quick(callee));
    const bounded = !own.loops && !callsCode && !own.indirect && !own.bulk && !own.waits && !own.unknown;
    const start = exported!.index - importedFunctions;
    const hostCall = functionImports.findIndex(
      (imp) => imp.module === DEVICE_IMPORT_MODULE && imp.name === HOST_CALL_IMPORT,
    );
    const barrier = functionImports.findIndex(
      (imp) => imp.module === DEVICE_IMPORT_MODULE && imp.name === BARRIER_IMPORT,
    );
    shapes.set(name, {
      bounded,
      synchronizes: reaches(
        start,
        facts,
        importedFunctions,
        (own) => own.waits || own.atomics || own.indirect || own.unknown,
        () => false,
      ),
      codeBytes: own.bytes,
      callsHost:
        hostCall >= 0 &&
        reaches(
          start,
          facts,
          importedFunctions,
          (own) => own.indirect || own.unknown,
          (imported) => imported === hostCall,
        ),
      barrierStackBytes: barrier < 0 ? 0 : deepestChain(start, facts, importedFunctions, barrier, frameBytes),
    });
  }
  return shapes;
}

/**
 * What each defined function of `bytes` calls directly and which globals it reads or writes, in
 * the code section's order (function index minus the imported functions); `unknown` when this
 * reader could not follow its code.
 */
export function functionUses(
  bytes: Uint8Array,
): { calls: ReadonlySet<number>; globals: ReadonlySet<number>; unknown: boolean }[] {
  return codeBodies(bytes).map(readFunction);
}

/**
 * True if function `start` (a defined function's index) or anything it may call has `fact`, or
 * calls an import for which `importHas` holds (a call past the known functions counts as both).
 */
function reaches(
  start: number,
  facts: readonly FunctionFacts[],
  importedFunctions: number,
  fact: (own: FunctionFacts) => boolean,
  importHas: (index: number) => boolean,
): boolean {
  const seen = new Set<number>([start]);
  const stack = [start];
  while (stack.length > 0) {
    const own = facts[stack.pop()!]!;
    if (fact(own)) return true;
    for (const callee of own.calls) {
      const defined = callee - importedFunctions;
      if (defined < 0) {
        if (importHas(callee)) return true;
        continue;
      }
      if (defined >= facts.length) return true;
      if (!seen.has(defined)) {
        seen.add(defined);
        stack.push(defined);
      }
    }
  }
  return false;
}

/** Bytes of a value of each value type as asyncify saves it (a reference or unknown type counts as 16). */
function valueBytes(type: number): number {
  return type === 0x7f || type === 0x7d ? 4 : type === 0x7e || type === 0x7c ? 8 : 16;
}

/**
 * Bytes asyncify may save of one frame of each defined function: its parameters (from the type
 * and function sections) and its locals (from its body, in facts[i].localBytes), plus 8 for the
 * call index and alignment. undefined entries: the reader could not tell.
 */
function frameSizes(bytes: Uint8Array, facts: readonly FunctionFacts[]): (number | undefined)[] {
  const paramBytes: number[] = [];
  const typeOf: number[] = [];
  try {
    const reader = new ByteReader(bytes, 8);
    while (!reader.atEnd()) {
      const id = reader.byte();
      const section = reader.sub(reader.leb());
      if (id === SECTION_TYPE) {
        for (let count = section.leb(), i = 0; i < count; i++) {
          if (section.byte() !== 0x60) throw new Error('not a function type');
          let sum = 0;
          for (let n = section.leb(), k = 0; k < n; k++) sum += valueBytes(section.byte());
          for (let n = section.leb(), k = 0; k < n; k++) section.byte();
          paramBytes.push(sum);
        }
      } else if (id === SECTION_FUNCTION) {
        for (let count = section.leb(), i = 0; i < count; i++) typeOf.push(section.leb());
      }
    }
  } catch {
    // Sections this reader cannot follow: no frame size is known (undefined, as documented above).
    return facts.map(() => undefined);
  }
  return facts.map((own, i) => {
    const params = paramBytes[typeOf[i] ?? -1];
    return params === undefined || own.unknown ? undefined : params + own.localBytes + 8;
  });
}

/**
 * The largest sum of frame sizes along a chain of calls from `start` to import `target`, through
 * functions that can reach it; undefined if a chain has no bound (a cycle, an indirect call,
 * unknown code or size).
 */
function deepestChain(
  start: number,
  facts: readonly FunctionFacts[],
  importedFunctions: number,
  target: number,
  frames: readonly (number | undefined)[],
): number | undefined {
  const memo = new Map<number, number | undefined>();
  const onPath = new Set<number>();
  const UNBOUNDED = -1;
  /** The deepest chain from defined function `f` to the target (0: it does not reach it). */
  const depth = (f: number): number => {
    if (memo.has(f)) return memo.get(f) ?? UNBOUNDED;
    if (onPath.has(f)) return UNBOUNDED;
    const own = facts[f];
    const frame = frames[f];
    if (own === undefined || frame === undefined) return UNBOUNDED;
    onPath.add(f);
    let deepest = 0;
    let reaches = false;
    for (const callee of own.calls) {
      if (callee === target) {
        reaches = true;
        continue;
      }
      const defined = callee - importedFunctions;
      if (defined < 0) continue;
      const below = depth(defined);
      if (below === UNBOUNDED) {
        deepest = UNBOUNDED;
        break;
      }
      if (below > 0) {
        reaches = true;
        deepest = Math.max(deepest, below);
      }
    }
    onPath.delete(f);
    // An indirect call may reach the barrier too: asyncify counts it as unwinding.
    const result = deepest === UNBOUNDED || own.indirect ? UNBOUNDED : reaches ? frame + deepest : 0;
    memo.set(f, result === UNBOUNDED ? undefined : result);
    return result;
  };
  const found = depth(start);
  return found === UNBOUNDED ? undefined : found;
}

/** The code section's function bodies, as readers over each body. */
function codeBodies(bytes: Uint8Array): ByteReader[] {
  const reader = new ByteReader(bytes, 8);
  while (!reader.atEnd()) {
    const id = reader.byte();
    const section = reader.sub(reader.leb());
    if (id === SECTION_CODE) return section.vector((r) => r.sub(r.leb()));
  }
  return [];
}

function readFunction(body: ByteReader): FunctionFacts {
  const facts: FunctionFacts = {
    loops: false,
    calls: new Set(),
    globals: new Set(),
    indirect: false,
    bulk: false,
    waits: false,
    atomics: false,
    unknown: false,
    bytes: body.remaining(),
    localBytes: 0,
  };
  try {
    const groups = body.leb();
    for (let i = 0; i < groups; i++) {
      const count = body.leb();
      // A value type (reference types with immediates are not emitted by the compilers we build with).
      facts.localBytes += count * valueBytes(body.byte());
    }
    while (!body.atEnd()) readInstruction(body, facts);
  } catch {
    // Code this reader cannot follow: its facts are unknown, which the caller treats as unbounded.
    facts.unknown = true;
  }
  return facts;
}

function memarg(r: ByteReader): void {
  const align = r.leb();
  if (align & 0x40) r.leb(); // multi-memory: a memory index follows
  r.leb();
}

/** Reads one instruction and its immediates; records what matters; throws on an unknown opcode. */
function readInstruction(r: ByteReader, facts: FunctionFacts): void {
  const op = r.byte();
  if (op >= 0x45 && op <= 0xc4) return; // numeric and sign extension: no immediates
  if (op >= 0x28 && op <= 0x3e) return memarg(r); // loads and stores
  if (op === 0x23 || op === 0x24) {
    facts.globals.add(r.leb()); // global.get/set
    return;
  }
  if (op >= 0x20 && op <= 0x26) {
    r.leb(); // local.get/set/tee, table.get/set
    return;
  }
  switch (op) {
    case 0x00: // unreachable
    case 0x01: // nop
    case 0x05: // else
    case 0x0b: // end
    case 0x0f: // return
    case 0x1a: // drop
    case 0x1b: // select
    case 0xd1: // ref.is_null
      return;
    case 0x03: // loop
      facts.loops = true;
      r.skipSleb();
      return;
    case 0x02: // block
    case 0x04: // if
      r.skipSleb();
      return;
    case 0x0c: // br
    case 0x0d: // br_if
    case 0xd2: // ref.func
      r.leb();
      return;
    case 0x0e: {
      // br_table
      const count = r.leb();
      for (let i = 0; i <= count; i++) r.leb();
      return;
    }
    case 0x10: // call
    case 0x12: // return_call
      facts.calls.add(r.leb());
      return;
    case 0x11: // call_indirect
    case 0x13: // return_call_indirect
      facts.indirect = true;
      r.leb();
      r.leb();
      return;
    case 0x1c: {
      // select with types
      const count = r.leb();
      for (let i = 0; i < count; i++) r.byte();
      return;
    }
    case 0x3f: // memory.size
    case 0x40: // memory.grow
      r.leb();
      return;
    case 0x41: // i32.const
    case 0x42: // i64.const
      r.skipSleb();
      return;
    case 0x43:
      r.skip(4);
      return;
    case 0x44:
      r.skip(8);
      return;
    case 0xd0: // ref.null
      r.byte();
      return;
    case 0xfc:
      return readMisc(r, facts);
    case 0xfd:
      return readSimd(r);
    case 0xfe:
      return readAtomic(r, facts);
    default:
      throw malformed(`opcode 0x${op.toString(16)}`);
  }
}

/** 0xFC: saturating truncation, bulk memory and table operations. */
function readMisc(r: ByteReader, facts: FunctionFacts): void {
  const sub = r.leb();
  if (sub <= 7) return; // trunc_sat
  facts.bulk = true; // memory.init/copy/fill and the table operations cost up to their length
  const immediates = [2, 1, 2, 1, 2, 1, 2, 1, 1, 1][sub - 8];
  if (immediates === undefined) throw malformed(`opcode 0xfc ${sub}`);
  for (let i = 0; i < immediates; i++) r.leb();
}

/** 0xFD: SIMD. */
function readSimd(r: ByteReader): void {
  const sub = r.leb();
  if (sub <= 0x0b || sub === 0x5c || sub === 0x5d) return memarg(r); // loads and stores
  if (sub === 0x0c || sub === 0x0d) return r.skip(16); // v128.const, i8x16.shuffle
  if (sub >= 0x15 && sub <= 0x22) return r.skip(1); // extract/replace lane
  if (sub >= 0x54 && sub <= 0x5b) {
    memarg(r); // load/store lane
    r.skip(1);
  }
  // Every other SIMD instruction (relaxed SIMD included) takes no immediate.
}

/** 0xFE: threads. */
function readAtomic(r: ByteReader, facts: FunctionFacts): void {
  const sub = r.leb();
  if (sub === 0x03) return r.skip(1); // atomic.fence
  if (sub > 0x4e) throw malformed(`opcode 0xfe ${sub}`);
  if (sub === 0x01 || sub === 0x02)
    facts.waits = true; // memory.atomic.wait32/64
  else facts.atomics = true;
  memarg(r);
}
