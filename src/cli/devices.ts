/** `offload devices`: what Offload.init() finds, one column per device. */
import { parseArgs } from 'node:util';
import { Offload } from '../api/runtime.js';
import type { DeviceInfo } from '../plugins/interface.js';
import { webgpuUnavailable } from '../plugins/webgpu/adapter.js';
import { table, wrapHelp } from './format.js';
import { formatBytes, parseCount, parseMilliseconds } from '../units.js';
import type { Runtime } from '../api/runtime.js';
import { readToken } from './token.js';
import { writeStdout } from '../platform.js';

export const summary = 'List the devices the runtime finds, with their properties';

const HELP = wrapHelp(`Usage: offload devices [--json] [--proxies <host:port,...>] [--token-file <file>]
       offload devices --watch [--interval <ms>] [--count <n>] [--proxies ...]

${summary}: local devices first (the host
device, then a WebGPU device when Dawn finds an adapter; OFFLOAD_WEBGPU=fallback also
takes a software one, OFFLOAD_WEBGPU=off none), then those of each proxy
(OFFLOAD_PROXIES unless --proxies is given), with where they live.

Options:
  --json                 Print a JSON array of { id, ...info } instead of a table
  --proxies <list>       Comma-separated proxy addresses
  --token-file <file>    File holding the proxies' token (default: OFFLOAD_TOKEN)
  --watch                Print each device's figures live (runtime.metrics(), and the
                         memory free on it now: a proxy's shrinks as its other clients
                         allocate) until Ctrl-C; redrawn in place on a terminal
  --interval <ms>        How often --watch prints (default 1000)
  --count <n>            Stop --watch after n prints
  -h, --help             Show this help`);

/** Table rows: a property's label and how to show it. */
const PROPERTIES: [string, (info: DeviceInfo) => string][] = [
  ['name', (info) => info.name],
  ['kind', (info) => info.kind],
  ['vendor', (info) => info.vendor],
  ['plugin', (info) => info.plugin],
  ['location', (info) => info.location],
  ['memory', (info) => formatBytes(info.memoryBytes)],
  ['compute units', (info) => String(info.computeUnits)],
  ['max threads per team', (info) => String(info.maxThreadsPerTeam)],
  ['max teams', (info) => String(info.maxTeams)],
  ['image formats', (info) => info.imageFormats.join(', ')],
  ['memory kinds', (info) => info.memoryKinds.join(', ')],
];

export async function run(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      json: { type: 'boolean' },
      proxies: { type: 'string' },
      'token-file': { type: 'string' },
      watch: { type: 'boolean' },
      interval: { type: 'string' },
      count: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const proxies =
    values.proxies === undefined ? undefined : values.proxies.split(',').filter((address) => address !== '');
  const interval = values.interval === undefined ? 1000 : parseMilliseconds(values.interval, '--interval');
  const count = values.count === undefined ? Infinity : parseCount(values.count, '--count', 1, 2 ** 31);
  const runtime = await Offload.init({ proxies, token: await readToken(values['token-file']) });
  if (values.watch) {
    try {
      await watch(runtime, interval, count);
      return 0;
    } finally {
      await runtime.shutdown();
    }
  }
  try {
    // One write, after Dawn has started, on a line of its own (writeStdout): Dawn's lines, which
    // it prints on its own (warnings on stderr, its device log through C's buffered stdout), come
    // before or after the table, not inside it.
    const infos = runtime.devices.map((device) => ({ id: device.id, ...device.info }));
    const lines: string[] = [];
    if (values.json) {
      lines.push(JSON.stringify(infos, null, 2));
    } else if (infos.length === 0) {
      lines.push('no devices');
    } else {
      const header = ['device', ...infos.map((info) => String(info.id))];
      const rows = PROPERTIES.map(([label, show]) => [label, ...infos.map(show)]);
      lines.push(...table([header, ...rows], 3));
      for (const info of infos.filter((candidate) => candidate.limits)) {
        const limits = Object.entries(info.limits!).map(([name, value]) => `${name} ${value}`);
        lines.push(`\ndevice ${info.id} limits: ${limits.join(', ')}`);
      }
    }
    const noGpu = webgpuUnavailable();
    if (!values.json && noGpu) lines.push(`\nno WebGPU device: ${noGpu}`);
    writeStdout(`${lines.join('\n')}\n`);
    return 0;
  } finally {
    await runtime.shutdown();
  }
}

/** Prints the devices' figures every `interval` ms, `count` times at most, until SIGINT or SIGTERM. */
async function watch(runtime: Runtime, interval: number, count: number): Promise<void> {
  let stopped = false;
  const stop = (): void => {
    stopped = true;
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const terminal = process.stdout.isTTY === true;
  try {
    for (let printed = 0; printed < count && !stopped; printed++) {
      if (printed > 0) await new Promise((resolve) => setTimeout(resolve, interval));
      const metrics = runtime.metrics();
      const free = await Promise.all(
        runtime.devices.map((device) =>
          device.memoryInfo().then(
            (info) => formatBytes(info.freeBytes),
            () => '?',
          ),
        ),
      );
      const header = ['device', 'name', 'state', 'free', 'held', 'launches', 'failed', 'in queue', 'in / out'];
      const rows = metrics.devices.map((device, index) => [
        String(device.device),
        device.name,
        device.up ? 'up' : 'lost',
        `${free[index]} of ${formatBytes(device.memoryLimitBytes)}`,
        formatBytes(device.memoryHeldBytes),
        String(device.launches.ok),
        String(device.launches.failed),
        String(device.queueDepth),
        `${formatBytes(device.bytesIn)} / ${formatBytes(device.bytesOut)}`,
      ]);
      const lines = [
        `offload devices --watch  ${new Date(metrics.time).toISOString()}`,
        ...table([header, ...rows], 2),
      ];
      // On a terminal the table is redrawn in place; into a pipe or file, each print follows the last.
      process.stdout.write(terminal ? `\x1b[H\x1b[2J${lines.join('\n')}\n` : `${lines.join('\n')}\n\n`);
    }
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}
