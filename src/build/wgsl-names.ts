/** The names the WGSL translation gives: those it keeps from the source, and the called functions'. */
import type { FunctionSyntax } from './compiler-job.js';
import { WGSL_RESERVED } from './wgsl-builtins.js';

/** Whether WGSL takes `name` as it is: not reserved, and clear of the names the translation makes (`__`, `offload_`). */
export function isPlainName(name: string): boolean {
  return !WGSL_RESERVED.has(name) && !name.startsWith('_') && !name.includes('__') && !name.startsWith('offload_');
}

/** A called function's WGSL name: its name and where it comes from (two files may each have a `helper`). */
export function helperName(fn: FunctionSyntax): string {
  return `${fn.name.replace(/[^A-Za-z0-9]/g, '')}__fn_${fn.internalName.replace(/[^A-Za-z0-9]/g, '_').replace(/_+/g, '_')}`;
}
