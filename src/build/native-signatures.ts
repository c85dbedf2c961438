/**
 * The kernels of a C, C++ or Rust source and their parameter types, read from the source text:
 * the wasm function types alone cannot tell a device pointer from an int (both are i32), nor a
 * struct passed by value (the C ABI passes it as a hidden pointer). A C or C++ kernel is a
 * function marked `OFFLOAD_KERNEL` (assembly/offload.h); a Rust kernel is a
 * `#[no_mangle] pub extern "C" fn` (assembly/offload.rs). Every problem found is reported with
 * the file, the line, the kernel and what to write instead.
 */
import { errors } from '../errors.js';
import type { EntryInfo, ParamInfo, ParamType } from '../image/manifest.js';

/** A kernel as its source declares it. */
export interface NativeKernel {
  entry: EntryInfo;
  /** The source file as shown in messages, and the line of the declaration (from 1). */
  file: string;
  line: number;
}

export type NativeLanguage = 'C' | 'C++' | 'Rust';

/** The language of a kernel source by its extension, or undefined for other files. */
export function nativeLanguageOf(file: string): NativeLanguage | undefined {
  if (/\.c$/i.test(file)) return 'C';
  if (/\.(cpp|cc|cxx)$/i.test(file)) return 'C++';
  if (/\.rs$/.test(file)) return 'Rust';
  return undefined;
}

/** C and C++ scalar types (wasm32: long is 32 bits) and how they travel. */
const C_TYPES = new Map<string, ParamType>([
  ...[
    'char',
    'signed char',
    'unsigned char',
    'short',
    'short int',
    'unsigned short',
    'unsigned short int',
    'int',
    'signed',
    'signed int',
    'unsigned',
    'unsigned int',
    'long',
    'long int',
    'unsigned long',
    'unsigned long int',
    '_Bool',
    'bool',
    'int8_t',
    'uint8_t',
    'int16_t',
    'uint16_t',
    'int32_t',
    'uint32_t',
    'size_t',
    'ptrdiff_t',
    'intptr_t',
    'uintptr_t',
  ].map((type): [string, ParamType] => [type, 'i32']),
  ...['long long', 'long long int', 'unsigned long long', 'unsigned long long int', 'int64_t', 'uint64_t'].map(
    (type): [string, ParamType] => [type, 'i64'],
  ),
  ['float', 'f32'],
  ['double', 'f64'],
]);

const RUST_TYPES = new Map<string, ParamType>([
  ...['i8', 'u8', 'i16', 'u16', 'i32', 'u32', 'isize', 'usize', 'bool'].map((type): [string, ParamType] => [
    type,
    'i32',
  ]),
  ['i64', 'i64'],
  ['u64', 'i64'],
  ['f32', 'f32'],
  ['f64', 'f64'],
]);

const C_SCALARS = 'int, unsigned, long long, int32_t, uint64_t, float, double, ...';
const RUST_SCALARS = 'i8..i64, u8..u64, isize, usize, bool, f32, f64';

/**
 * The kernels `text` declares, in order.
 * @param shown the file as messages name it.
 * @throws OffloadError INVALID_ARGUMENT listing every kernel that breaks the kernel ABI (a
 *   returned value, a struct or reference parameter, a type the build does not know), one a line.
 */
export function nativeKernels(text: string, shown: string, language: NativeLanguage): NativeKernel[] {
  const code = blankComments(text, language);
  const problems: string[] = [];
  const kernels = language === 'Rust' ? rustKernels(code, shown, problems) : cKernels(code, shown, problems);
  if (problems.length > 0) throw errors.invalidArgument(problems.join('\n'));
  return kernels;
}

function cKernels(code: string, shown: string, problems: string[]): NativeKernel[] {
  const kernels: NativeKernel[] = [];
  // The macro's own definition (`#define OFFLOAD_KERNEL ...`) is not a kernel.
  for (const match of code.matchAll(/(?<!#\s*define\s+)\bOFFLOAD_KERNEL\b/g)) {
    const start = match.index + match[0].length;
    const open = code.indexOf('(', start);
    const line = lineOf(code, match.index);
    const head = open < 0 ? '' : code.slice(start, open).trim();
    const nameMatch = /([A-Za-z_]\w*)$/.exec(head);
    if (nameMatch === null) {
      problems.push(`${shown}:${line}: OFFLOAD_KERNEL must mark a function: OFFLOAD_KERNEL void name(params) { ... }`);
      continue;
    }
    const name = nameMatch[1]!;
    const where = `${shown}:${line}: kernel '${name}'`;
    const returned = normalize(head.slice(0, -name.length).replace(/\b(static|inline|extern)\b/g, ''));
    if (returned !== 'void') {
      problems.push(
        `${where} returns '${returned}'; kernels return void: write the result through a pointer parameter instead ` +
          `(OFFLOAD_KERNEL void ${name}(..., offload_ptr(${returned}) result))`,
      );
    }
    const close = matchingParen(code, open);
    const params: ParamInfo[] = [];
    const list = code.slice(open + 1, close).trim();
    const parts = list === '' || list === 'void' ? [] : splitTopLevel(list);
    parts.forEach((raw, i) => {
      const param = cParam(raw.trim(), i, `${where}: parameter ${i + 1}`);
      if (typeof param === 'string') problems.push(param);
      else params.push(param);
    });
    kernels.push({ entry: { name, kind: 'kernel', params }, file: shown, line });
  }
  return kernels;
}

/** One C parameter as a manifest parameter, or the problem with it. */
function cParam(raw: string, index: number, where: string): ParamInfo | string {
  const pointer = /^offload_ptr\s*\(([^)]*)\)\s*([A-Za-z_]\w*)?$/.exec(raw);
  if (pointer !== null) return { name: pointer[2] ?? `arg${index}`, type: 'ptr' };
  if (raw.includes('(')) {
    return `${where} ('${raw}') is a function pointer; a kernel takes scalars and device pointers only`;
  }
  const name = /([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$/.exec(raw);
  const bare = raw.replace(/\b(const|volatile|register|restrict|__restrict|__restrict__)\b/g, ' ');
  if (raw.includes('*') || /\[[^\]]*\]\s*$/.test(raw)) {
    const last = /([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$/.exec(bare.replace(/.*\*/, ''));
    return { name: last?.[1] ?? `arg${index}`, type: 'ptr' };
  }
  const words = normalize(bare).split(' ');
  // A name follows the type unless the parameter is unnamed (a lone known type).
  const typeWords = C_TYPES.has(words.join(' ')) ? words : words.slice(0, -1);
  const type = typeWords.join(' ');
  const paramName = C_TYPES.has(words.join(' ')) ? `arg${index}` : (name?.[1] ?? `arg${index}`);
  if (/^(struct|union)\b/.test(type)) {
    return (
      `${where} ('${paramName}') takes ${type} by value; a kernel takes scalars and device pointers: ` +
      `pass a pointer to it in device memory instead (offload_ptr(${type}) ${paramName})`
    );
  }
  if (/^enum\b/.test(type)) return { name: paramName, type: 'i32' };
  const travel = C_TYPES.get(type);
  if (travel === undefined) {
    return (
      `${where} ('${paramName}') has type '${type}', which a kernel cannot take (a struct passed by value, or a type ` +
      `the build does not know): use ${C_SCALARS}, or a device pointer (offload_ptr(${type}) ${paramName})`
    );
  }
  return { name: paramName, type: travel };
}

function rustKernels(code: string, shown: string, problems: string[]): NativeKernel[] {
  const kernels: NativeKernel[] = [];
  const pattern =
    /#\s*\[\s*no_mangle\s*\]\s*(?:#\s*\[[^\]]*\]\s*)*pub\s+(?:unsafe\s+)?extern\s+"C"\s+fn\s+([A-Za-z_]\w*)\s*\(/g;
  for (const match of code.matchAll(pattern)) {
    const name = match[1]!;
    const line = lineOf(code, match.index + match[0].indexOf('fn'));
    const where = `${shown}:${line}: kernel '${name}'`;
    const open = match.index + match[0].length - 1;
    const close = matchingParen(code, open);
    const after = /^\s*->\s*([^{]*?)\s*(?:where\b|\{)/.exec(code.slice(close + 1));
    const returned = after === null ? '()' : normalize(after[1]!);
    if (returned !== '()') {
      problems.push(
        `${where} returns '${returned}'; kernels return (): write the result through a pointer parameter instead ` +
          `(result: *mut ${returned === '!' ? 'T' : returned})`,
      );
    }
    const params: ParamInfo[] = [];
    const list = code.slice(open + 1, close).trim();
    splitTopLevel(list)
      .map((part) => part.trim())
      .filter((part) => part !== '')
      .forEach((raw, i) => {
        const colon = raw.indexOf(':');
        const paramName =
          colon < 0
            ? `arg${i}`
            : raw
                .slice(0, colon)
                .replace(/\bmut\b/, '')
                .trim();
        const type = normalize(colon < 0 ? raw : raw.slice(colon + 1));
        const at = `${where}: parameter '${paramName}'`;
        if (/^\*\s*(mut|const)\b/.test(type)) params.push({ name: paramName, type: 'ptr' });
        else if (type.startsWith('&')) {
          problems.push(
            `${at} is a reference ('${type}'); a kernel takes device pointers as raw pointers: ` +
              `write ${paramName}: *mut ${type.replace(/^&\s*(mut\s+)?/, '').replace(/^\[(.*)\]$/, '$1')}`,
          );
        } else {
          const travel = RUST_TYPES.get(type);
          if (travel === undefined) {
            problems.push(
              `${at} takes '${type}' by value; a kernel takes scalars (${RUST_SCALARS}) and device pointers: ` +
                `pass a pointer to it in device memory instead (${paramName}: *const ${type})`,
            );
          } else params.push({ name: paramName, type: travel });
        }
      });
    kernels.push({ entry: { name, kind: 'kernel', params }, file: shown, line });
  }
  return kernels;
}

/** `text` with comments, string and character literals blanked (newlines kept, so lines count the same). */
function blankComments(text: string, language: NativeLanguage): string {
  const blank = (s: string) => s.replace(/[^\n]/g, ' ');
  // Rust's `extern "C"` must stay: only C and C++ string literals are blanked (Rust's rarely hold
  // what looks like a kernel, and a lifetime `'a` is no character literal).
  const pattern =
    language === 'Rust'
      ? /\/\*[\s\S]*?\*\/|\/\/[^\n]*/g
      : /\/\*[\s\S]*?\*\/|\/\/[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'/g;
  return text.replace(pattern, blank);
}

function lineOf(text: string, index: number): number {
  let line = 1;
  for (let i = 0; i < index; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/** Index of the parenthesis closing the one at `open` (the text's end when unbalanced). */
function matchingParen(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')' && --depth === 0) return i;
  }
  return text.length;
}

/** `list` split at the commas outside parentheses, brackets and angle brackets. */
function splitTopLevel(list: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < list.length; i++) {
    const c = list[i];
    if (c === '(' || c === '[' || c === '<') depth++;
    else if (c === ')' || c === ']' || c === '>') depth--;
    else if (c === ',' && depth === 0) {
      parts.push(list.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(list.slice(start));
  return parts;
}

function normalize(type: string): string {
  return type.replace(/\s+/g, ' ').trim();
}
