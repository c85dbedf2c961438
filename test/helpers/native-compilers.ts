/** Whether this machine has the compilers of C, C++ and Rust kernels (clang with wasm-ld, a rustc with the wasm32 std). */
import { findClang, findRust } from '../../src/build/native-toolchain.js';

let found: Promise<boolean> | undefined;

export function nativeCompilers(): Promise<boolean> {
  found ??= Promise.all([findClang(), findRust()]).then(
    () => true,
    () => false,
  );
  return found;
}
