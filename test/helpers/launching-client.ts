/**
 * A client process that launches the fixture's empty kernel on `proxy` over and over under
 * OFFLOAD_DEBUG, with the polling policy left to choose (OFFLOAD_POLL_US unset), for the tests
 * that read what its polling chose. Optionally pinned to `cpus` with taskset.
 */
import { execFile } from 'node:child_process';
import { fixtureBundle } from './fixtures.js';
import type { ProxyProcess } from './proxy.js';

export interface LaunchingClientOptions {
  /** Launches one after the other, or `ms` milliseconds of them. */
  launches?: number;
  ms?: number;
  /** A taskset CPU list to run the client on. */
  cpus?: string;
}

/** Runs the client to its end; its stderr (the debug lines). */
export async function launchingClient(proxy: ProxyProcess, options: LaunchingClientOptions): Promise<string> {
  const bundle = await fixtureBundle();
  const loop =
    options.ms !== undefined
      ? `const end = performance.now() + ${options.ms}; while (performance.now() < end) await launch();`
      : `for (let i = 0; i < ${options.launches ?? 600}; i++) await launch();`;
  const script = `
    import { Offload } from './src/index.js';
    const runtime = await Offload.init({ host: false, webgpu: false });
    const device = runtime.devices.find((d) => d.info.plugin === 'remote');
    const empty = await device.kernel(await runtime.register(${JSON.stringify(bundle)}), 'empty');
    const queue = device.queue();
    const launch = () => queue.launch(empty, { teams: 1 }, []).done;
    ${loop}
    await runtime.shutdown();
  `;
  const node = [process.execPath, '--import', 'tsx', '--input-type=module', '-e', script];
  const [command, ...args] = options.cpus === undefined ? node : ['taskset', '-c', options.cpus, ...node];
  return new Promise<string>((resolve, reject) =>
    execFile(
      command!,
      args,
      {
        cwd: new URL('../..', import.meta.url),
        encoding: 'utf8',
        timeout: 25_000,
        env: {
          ...process.env,
          OFFLOAD_DEBUG: '1',
          OFFLOAD_POLL_US: '',
          OFFLOAD_PROXIES: proxy.address,
          OFFLOAD_TOKEN: proxy.token,
        },
      },
      (error, _stdout, stderr) => (error ? reject(new Error(stderr.slice(-2000))) : resolve(stderr)),
    ),
  );
}
