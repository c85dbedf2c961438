/** `offload devices`: what Offload.init() finds, one column per device. */
import { parseArgs } from 'node:util';
import { Offload } from '../api/runtime.js';
import type { DeviceInfo } from '../plugins/interface.js';
import { webgpuUnavailable } from '../plugins/webgpu/adapter.js';
import { table, wrapHelp } from './format.js';
import { formatBytes } from '../units.js';
import { readToken } from './token.js';

export const summary = 'List the devices the runtime finds, with their properties';

const HELP = wrapHelp(`Usage: offload devices [--json] [--proxies <host:port,...>] [--token-file <file>]

${summary}: local devices first (the host
device, then a WebGPU device when Dawn finds an adapter; OFFLOAD_WEBGPU=fallback also
takes a software one, OFFLOAD_WEBGPU=off none), then those of each proxy
(OFFLOAD_PROXIES unless --proxies is given), with where they live.

Options:
  --json                 Print a JSON array of { id, ...info } instead of a table
  --proxies <list>       Comma-separated proxy addresses
  --token-file <file>    File holding the proxies' token (default: OFFLOAD_TOKEN)
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
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const proxies =
    values.proxies === undefined ? undefined : values.proxies.split(',').filter((address) => address !== '');
  const runtime = await Offload.init({ proxies, token: await readToken(values['token-file']) });
  try {
    const infos = runtime.devices.map((device) => ({ id: device.id, ...device.info }));
    if (values.json) {
      console.log(JSON.stringify(infos, null, 2));
    } else if (infos.length === 0) {
      console.log('no devices');
    } else {
      const header = ['device', ...infos.map((info) => String(info.id))];
      const rows = PROPERTIES.map(([label, show]) => [label, ...infos.map(show)]);
      for (const line of table([header, ...rows], 3)) console.log(line);
      for (const info of infos.filter((candidate) => candidate.limits)) {
        const limits = Object.entries(info.limits!).map(([name, value]) => `${name} ${value}`);
        console.log(`\ndevice ${info.id} limits: ${limits.join(', ')}`);
      }
    }
    const noGpu = webgpuUnavailable();
    if (!values.json && noGpu) console.log(`\nno WebGPU device: ${noGpu}`);
    return 0;
  } finally {
    await runtime.shutdown();
  }
}
