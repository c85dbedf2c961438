/**
 * The layer rules (.dependency-cruiser.json, run by `npm run lint` through scripts/check-layers.ts):
 * src/ as it is breaks none, and each kind of forbidden import in a small tree of modules written
 * for the test is reported under the rule that forbids it, while allowed imports beside them are not.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { checkLayers } from '../scripts/check-layers.js';

describe('layer rules', { timeout: 60_000 }, () => {
  const root = mkdtempSync(path.join(tmpdir(), 'offload-layers-'));
  after(() => rmSync(root, { recursive: true, force: true }));

  /** Writes src/<file> importing each of `imports` (paths under src/, `type:` before one for a type-only import). */
  function module(file: string, ...imports: string[]): void {
    const full = path.join(root, 'src', file);
    mkdirSync(path.dirname(full), { recursive: true });
    const lines = imports.map((target, i) => {
      const typeOnly = target.startsWith('type:');
      const to = path.relative(path.dirname(full), path.join(root, 'src', target.replace(/^type:/, '')));
      const specifier = (to.startsWith('.') ? to : `./${to}`).replace(/\.ts$/, '.js');
      return typeOnly
        ? `import type { T } from '${specifier}';\nexport type T${i} = T;`
        : `import { v } from '${specifier}';\nexport const v${i} = v;`;
    });
    writeFileSync(full, `${lines.join('\n')}\nexport const v = 1;\nexport type T = number;\n`);
  }

  it('passes on src/ as it is', async () => {
    const { violations, report } = await checkLayers();
    assert.deepEqual(violations, [], report);
  });

  it('fails on each kind of forbidden import, and only on those', async () => {
    writeFileSync(
      path.join(root, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', strict: true } }),
    );
    module('errors.ts');
    module('api/runtime.ts', 'runtime/trace.ts', 'omp/spread.ts', 'plugins/interface.ts');
    module('api/queue.ts', 'omp/mapper.ts'); // only api/runtime.ts may make the Mapper
    module('omp/spread.ts', 'api/queue.ts', 'type:image/manifest.ts');
    module('omp/mapper.ts', 'api/queue.ts', 'image/manifest.ts', 'api/internal.ts'); // a value of image
    module('omp/map.ts', 'api/checks.ts'); // the api's insides only through api/internal.ts
    module('api/internal.ts', 'api/checks.ts');
    module('api/checks.ts', 'errors.ts');
    module('apps/xsbench.ts', 'api/runtime.ts', 'api/internal.ts'); // a program of the public API
    module('image/manifest.ts', 'errors.ts');
    module('transport/tcp.ts', 'api/runtime.ts'); // transport knows nothing of devices
    module('plugins/interface.ts', 'type:runtime/trace.ts');
    module('plugins/host/device.ts', 'plugins/interface.ts', 'plugins/remote/queue.ts', 'api/queue.ts');
    module('plugins/remote/queue.ts', 'protocol/messages.ts', 'transport/tcp.ts');
    module('plugins/webgpu/device.ts', 'transport/tcp.ts'); // only remote opens transports
    module('runtime/trace.ts', 'type:plugins/host/device.ts', 'plugins/remote/queue.ts');
    module('protocol/messages.ts', 'transport/tcp.ts', 'proxy/server.ts');
    module('proxy/server.ts', 'api/runtime.ts', 'plugins/remote/connection.ts', 'plugins/host/device.ts');
    module('plugins/remote/connection.ts');
    module('proxy/connection.ts', 'type:proxy/handlers.ts'); // a circle, of types too
    module('proxy/handlers.ts', 'proxy/connection.ts', 'proxy/session.ts');
    module('proxy/session.ts');
    module('cli/main.ts', 'proxy/server.ts', 'plugins/host/device.ts');
    module('build/compile.ts', 'cli/main.ts');

    const { violations, report } = await checkLayers(root);
    const found = violations.map((v) => `${v.rule}: ${v.from} -> ${v.to}`).sort();
    assert.deepEqual(
      found,
      [
        'api: src/api/queue.ts -> src/omp/mapper.ts',
        'api-internal-surface-users: src/apps/xsbench.ts -> src/api/internal.ts',
        'api-public-modules: src/omp/map.ts -> src/api/checks.ts',
        'build: src/build/compile.ts -> src/cli/main.ts',
        'nothing-imports-cli: src/build/compile.ts -> src/cli/main.ts',
        'omp-image-types-only: src/omp/mapper.ts -> src/image/manifest.ts',
        'plugins-independent: src/plugins/host/device.ts -> src/plugins/remote/queue.ts',
        'plugins-wire-only-remote: src/plugins/webgpu/device.ts -> src/transport/tcp.ts',
        'plugins: src/plugins/host/device.ts -> src/api/queue.ts',
        'protocol: src/protocol/messages.ts -> src/proxy/server.ts',
        'proxy: src/proxy/server.ts -> src/plugins/host/device.ts',
        'proxy-no-circular: src/proxy/connection.ts -> src/proxy/handlers.ts',
        'runtime-names-plugin-types-only: src/runtime/trace.ts -> src/plugins/remote/queue.ts',
        'transport: src/transport/tcp.ts -> src/api/runtime.ts',
      ].sort(),
    );
    assert.match(report, /transport: src\/transport\/tcp\.ts → src\/api\/runtime\.ts/);
  });
});
