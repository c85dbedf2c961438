// ESLint (flat config): eslint:recommended and typescript-eslint's type-checked rules over the
// TypeScript and JavaScript the project compiles or runs: src/, test/, bench/, scripts/.
// `npm run lint`; CI runs it with zero findings allowed.
import js from '@eslint/js';
import { defineConfig, globalIgnores } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  globalIgnores([
    'dist/',
    'native/mpi/build/',
    'bench/peers/build/',
    'test/fixtures/build/',
    '.tmp/',
    // AssemblyScript, not TypeScript the app compiles: the device library and the kernels
    // (every file importing `offload-ts/device`). buildBundle compiles and checks them.
    'assembly/',
    'examples/',
    'bench/kernels.ts',
    'bench/webgpu/kernels.ts',
    'test/fixtures/kernels.ts',
    'test/fixtures/item-kernels.ts',
    'test/fixtures/team-threads.ts',
    'test/fixtures/simd.ts',
    'test/fixtures/webgpu/',
  ]),
  js.configs.recommended,
  // Among them: no-floating-promises, no-misused-promises, await-thenable, no-unused-vars,
  // no-unnecessary-type-assertion (meaningful with tsconfig's noUncheckedIndexedAccess: the `!`
  // after an index is needed, a `!` or `as` that changes nothing is not), prefer-promise-reject-errors,
  // only-throw-error, restrict-template-expressions, no-base-to-string, unbound-method. A deliberate
  // fire-and-forget promise is written `void promise` (with a reason where it is not obvious).
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: globals.node,
      parserOptions: {
        // One program for everything: tsconfig.check.json includes src/, test/, bench/, scripts/.
        project: './tsconfig.check.json',
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        // node:test's describe/it return promises the runner itself awaits.
        {
          allowForKnownSafeCalls: [
            {
              from: 'package',
              package: 'node:test',
              name: ['describe', 'it', 'test', 'suite', 'before', 'after', 'beforeEach', 'afterEach'],
            },
          ],
        },
      ],
      // Unused names are errors, except those that say they are unused: `_`, `_offset`, and the
      // siblings of a rest element (`const { a, ...rest } = x` to leave `a` out of `rest`).
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          ignoreRestSiblings: true,
        },
      ],
      // A caught error (unknown or any) may be passed on as it is; a literal non-Error may not.
      '@typescript-eslint/prefer-promise-reject-errors': [
        'error',
        { allowThrowingAny: true, allowThrowingUnknown: true },
      ],
      // Off: the no-unsafe-* family. With it the code had over 300 findings, 260 of them in
      // src/build/compiler-worker.js (plain JavaScript against the AssemblyScript compiler's
      // untyped internals) and the rest in tests that poke at JSON manifests and generated
      // modules on purpose; `any` itself stays an error (no-explicit-any), so src/ does not grow it.
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      // Off: an `async` method without `await` is how the plugins implement an interface that
      // returns a promise: a synchronous throw inside becomes a rejection, as callers expect.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    files: ['src/**'],
    rules: {
      // Node 20's global `performance` is a lazy getter: every read is a call. It was two of an
      // inline launch's 0.45 us.
      'no-restricted-globals': [
        'error',
        { name: 'performance', message: "import { performance } from 'node:perf_hooks' (the global is a getter)" },
      ],
    },
  },
);
