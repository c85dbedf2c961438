/** Options of `Offload.init`, with their environment fallbacks. */
import type { HostDeviceOptions } from '../plugins/host/options.js';
import type { WebGpuOptions } from '../plugins/webgpu/options.js';
import type { TlsClientOptions } from '../transport/tcp.js';
import { writeStderr } from '../platform.js';

export interface RuntimeOptions {
  /**
   * Host device settings, or `false` for no host device. Defaults come from
   * OFFLOAD_HOST_THREADS (workers; default: available parallelism) and OFFLOAD_HOST_MEMORY
   * (device memory, e.g. `512M`; default 1 GiB).
   */
  host?: Partial<HostDeviceOptions> | false;
  /**
   * The WebGPU device (after the host device, before remote ones), or `false` for none. By
   * default a hardware adapter only; OFFLOAD_WEBGPU=fallback also takes a software one
   * (lavapipe), OFFLOAD_WEBGPU=off none.
   */
  webgpu?: WebGpuOptions | false;
  /**
   * Proxies whose devices follow the local ones, `host:port` each. Default: OFFLOAD_PROXIES
   * (comma-separated). `[]` means none, whatever the environment says.
   */
  proxies?: string[];
  /**
   * Every proxy is optional: one that cannot be reached, or does not answer within
   * `connectTimeoutMs`, is left out (said once on stderr and in `runtime.diagnostics`) instead of
   * failing init. A refused token still fails init. In OFFLOAD_PROXIES, an address ending in `?`
   * is optional (`gpu-box:7000?`). Default false: a program that names a proxy depends on it.
   */
  optionalProxies?: boolean;
  /**
   * Under mpirun: use the job's proxy ranks (`offload proxy --mpi`) as remote devices, after the
   * named proxies. Default true; false ignores them.
   */
  mpi?: boolean;
  /** The proxies' shared secret. Default: OFFLOAD_TOKEN. Required when there are proxies. */
  token?: string;
  /**
   * Trace queues, copies, launches and mapping (a Chrome trace, which Perfetto opens): a file path
   * writes it there at shutdown (Node); `true` keeps it for `runtime.trace()` only (a page's way,
   * which has no files). Default: OFFLOAD_TRACE.
   */
  trace?: string | boolean;
  /** Print one line per load, copy and launch to stderr. Default: OFFLOAD_INFO. */
  info?: boolean | ((line: string) => void);
  /**
   * Time limit of launches that give none (`grid.timeoutMs`), in milliseconds. Default:
   * OFFLOAD_LAUNCH_TIMEOUT, or none.
   */
  launchTimeoutMs?: number;
  /**
   * Where kernels' print() lines go, each before its launch's event completes. Default: the
   * program's stderr, one line each, tagged `[offload device D 'kernel' team T]`.
   */
  print?: (line: KernelPrint) => void;
  /** A proxy that sends nothing for this long is DEVICE_LOST, in milliseconds. Default: OFFLOAD_PEER_TIMEOUT, or 10000. */
  peerTimeoutMs?: number;
  /**
   * How long a proxy has to answer a request once it can start it, in milliseconds: from when
   * it is sent, or a queue operation from its queue's last answer, whichever is later (a launch
   * has its `grid.timeoutMs` more). A proxy past it is DEVICE_LOST, however alive it looks.
   * Default: OFFLOAD_REQUEST_TIMEOUT, or 600000 (10 minutes).
   */
  requestTimeoutMs?: number;
  /**
   * TLS to every TCP proxy, trusting the CA certificates given (PEM text). Default: with
   * OFFLOAD_TLS_CA set (a PEM file), TLS trusting that file; else TLS only to `tls://` addresses,
   * trusting the system's CAs.
   */
  tls?: TlsClientOptions;

  // Cancellation and time limits of init.
  /**
   * How long each proxy has to accept the connection and answer its hello, in milliseconds
   * (default 10000): a proxy that accepts and never answers fails init with DEVICE_LOST after it.
   */
  connectTimeoutMs?: number;
  /**
   * Gives up init: it rejects with ABORTED (TIMEOUT for `AbortSignal.timeout(ms)`, or the
   * signal's reason when that is an OffloadError), connections still opening are closed, and
   * whatever init had started is shut down.
   */
  signal?: AbortSignal;
}

/** One line a kernel printed (print() of the device library). */
export interface KernelPrint {
  /** The device's id in this runtime. */
  device: number;
  /** The queue the launch was enqueued on. */
  queue: number;
  kernel: string;
  /** The team that printed it; -1 for a line about the whole launch (e.g. how many lines were dropped). */
  team: number;
  text: string;
}

/** The default destination of kernels' print() lines: the program's stderr. */
export function printToStderr({ device, kernel, team, text }: KernelPrint): void {
  writeStderr(`[offload device ${device} '${kernel}'${team >= 0 ? ` team ${team}` : ''}] ${text}\n`);
}
