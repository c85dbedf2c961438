/**
 * The page program of test/browser-conformance.test.ts: the conformance suite of
 * test/conformance/suite.ts, bundled with node:test and node:assert/strict replaced by the page
 * shims beside this file, run against one device kind the page finds (`?device=webgpu`, `remote`
 * or `host`), with the page's other devices as copy peers. The results go to `#out` as JSON:
 * `{ plugins, results }`, or `{ plugins, missing }` when the page has no device of that kind.
 */
import { conformance } from '../conformance/suite.js';
import { runDeclared } from './page-node-test.js';
import { Offload, type RuntimeOptions } from '../../src/index.js';

const params = new URLSearchParams(location.search);
const kind = params.get('device') ?? 'webgpu';
const bundle = params.get('bundle') ?? 'kernels.offload';
const options: RuntimeOptions = {
  webgpu: { fallback: true },
  proxies: params.getAll('proxy'),
  token: params.get('token') ?? undefined,
};

const out = document.getElementById('out')!;
try {
  const probe = await Offload.init(options);
  const plugins: string[] = probe.devices.map((device) => device.info.plugin);
  await probe.shutdown();
  if (!plugins.includes(kind)) {
    out.textContent = JSON.stringify({ plugins, missing: kind });
  } else {
    conformance(`${kind} device in a page`, async () => {
      const runtime = await Offload.init(options);
      const device = runtime.devices.find((candidate) => candidate.info.plugin === kind)!;
      const peer = runtime.devices.find((candidate) => candidate.info.plugin !== kind);
      return { runtime, device, peer, bundle, otherRuntime: () => Offload.init(options) };
    });
    const results = await runDeclared();
    out.textContent = JSON.stringify({ plugins, results });
  }
} catch (error) {
  out.textContent = JSON.stringify({
    error: error instanceof Error ? `${error.message}\n${error.stack}` : String(error),
  });
}
