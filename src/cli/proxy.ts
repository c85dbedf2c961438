/** `offload proxy`: serves this machine's devices to remote clients until stopped. */
import { parseArgs } from 'node:util';
import { launchTimeoutFromEnv, parseMilliseconds } from '../api/runtime.js';
import { errors } from '../errors.js';
import { collectGarbage } from '../plugins/host/garbage.js';
import { ProxyServer } from '../proxy/server.js';
import { inMpiJob, MPI_DEFAULT_TOKEN, MpiHub, mpiUnavailable } from '../transport/mpi.js';
import { formatBytes, usageError } from './format.js';
import { readToken } from './token.js';

export const summary = "Serve this machine's devices to remote programs (a proxy)";

const HELP = `Usage: offload proxy --listen <host:port> [--token-file <file>]
       offload proxy --mpi          (as ranks of an mpirun job)

${summary}. Clients name it in
Offload.init({ proxies: ['host:port'], token }) or OFFLOAD_PROXIES / OFFLOAD_TOKEN.
It runs until SIGINT or SIGTERM, then frees everything and exits. Each client works
in a context of its own (its own device memory, images, buffers and queues), freed
when it leaves, however it leaves. SIGUSR2 prints what the proxy holds as a line
'stats {json}' (sessions, queues, buffers, images, per-device counts, RSS).

Options:
  --listen <host:port>  Address to listen on (port 0: any free port; the chosen
                        address is printed as 'listening on <host:port>')
  --token-file <file>   File holding the shared secret (default: OFFLOAD_TOKEN)
  --launch-timeout <ms> The longest any client's kernel launch may run; past it the
                        launch fails with TIMEOUT and the device goes on (default:
                        none, or OFFLOAD_LAUNCH_TIMEOUT)
  --mpi                 Serve the application ranks of this MPI job instead, e.g.
                        mpirun -np 2 offload proxy --mpi : -np 1 node app.js
                        (exits when every application rank has finished)
  -h, --help            Show this help`;

export async function run(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      listen: { type: 'string' },
      'token-file': { type: 'string' },
      'launch-timeout': { type: 'string' },
      mpi: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const limit = values['launch-timeout'];
  const launchTimeoutMs = limit === undefined ? launchTimeoutFromEnv() : parseMilliseconds(limit, '--launch-timeout');
  if (values.mpi) {
    if (values.listen !== undefined) return usageError('proxy', '--mpi and --listen exclude each other');
    const unavailable = mpiUnavailable();
    if (unavailable) throw errors.unsupported(`offload proxy --mpi: ${unavailable}`);
    if (!inMpiJob()) throw errors.unsupported('offload proxy --mpi: not an MPI rank (start it with mpirun)');
    const { server, finished } = await ProxyServer.startMpi({ token: (await readToken(values['token-file'])) ?? MPI_DEFAULT_TOKEN, launchTimeoutMs });
    announce(server);
    await Promise.race([finished, signalled()]);
    await server.shutdown();
    MpiHub.get('proxy').finalize();
    return 0;
  }
  if (values.listen === undefined) return usageError('proxy', 'the address is required: --listen <host:port>');
  const token = await readToken(values['token-file']);
  if (token === undefined) return usageError('proxy', 'a token is required: --token-file <file> or OFFLOAD_TOKEN');

  const server = await ProxyServer.start({ listen: values.listen, token, launchTimeoutMs });
  announce(server);
  await signalled();
  await server.shutdown();
  return 0;
}

/** `kill -USR2 <pid>` prints what the proxy holds (after a garbage collection) as one line. */
function reportOnSignal(server: ProxyServer): void {
  process.on('SIGUSR2', () => {
    void collectGarbage().then(() => console.log(`stats ${JSON.stringify(server.stats())}`));
  });
}

function announce(server: ProxyServer): void {
  reportOnSignal(server);
  for (const device of server.runtime.devices) {
    const { info } = device;
    console.log(`serving device ${device.id}: ${info.name} (${info.plugin}, ${info.kind}, ${formatBytes(info.memoryBytes)}, ${info.imageFormats.join('/')})`);
  }
  console.log(`listening on ${server.address}`);
}

function signalled(): Promise<void> {
  return new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
}
