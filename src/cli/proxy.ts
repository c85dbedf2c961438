/** `offload proxy`: serves this machine's devices to remote clients until stopped. */
import { parseArgs } from 'node:util';
import { ProxyServer } from '../proxy/server.js';
import { formatBytes, usageError } from './format.js';
import { readToken } from './token.js';

export const summary = "Serve this machine's devices to remote programs (a proxy)";

const HELP = `Usage: offload proxy --listen <host:port> [--token-file <file>]

${summary}. Clients name it in
Offload.init({ proxies: ['host:port'], token }) or OFFLOAD_PROXIES / OFFLOAD_TOKEN.
It runs until SIGINT or SIGTERM, then frees everything and exits.

Options:
  --listen <host:port>  Address to listen on (port 0: any free port; the chosen
                        address is printed as 'listening on <host:port>')
  --token-file <file>   File holding the shared secret (default: OFFLOAD_TOKEN)
  -h, --help            Show this help`;

export async function run(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { listen: { type: 'string' }, 'token-file': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  if (values.listen === undefined) return usageError('proxy', 'the address is required: --listen <host:port>');
  const token = await readToken(values['token-file']);
  if (token === undefined) return usageError('proxy', 'a token is required: --token-file <file> or OFFLOAD_TOKEN');

  const server = await ProxyServer.start({ listen: values.listen, token });
  for (const device of server.runtime.devices) {
    const { info } = device;
    console.log(`serving device ${device.id}: ${info.name} (${info.plugin}, ${info.kind}, ${formatBytes(info.memoryBytes)}, ${info.imageFormats.join('/')})`);
  }
  console.log(`listening on ${server.address}`);

  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await server.shutdown();
  return 0;
}
