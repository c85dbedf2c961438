/**
 * The client's side of the protocol: decoders for every frame a proxy sends and for the bodies
 * of its replies. A proxy is a peer like any other: each field is checked, and what is wrong is
 * PROTOCOL naming the proxy (the client then closes that connection).
 */
import { errors, quoted } from '../errors.js';
import { IMAGE_FORMATS, type ImageFormat, type ParamInfo } from '../image/manifest.js';
import { MAX_HOST_CALL_ARGS, type DeviceInfo, type MemoryInfo } from '../plugins/interface.js';
import type { Frame } from '../transport/frame.js';
import type { LoadedKernelInfo, ProxyFrame, ReplyBodies } from './messages.js';
import { Meta } from './wire.js';

/** A frame from proxy `proxy`, checked (its fields' values, e.g. a printed line's length, are the receiver's to bound). */
export function decodeProxyFrame(frame: Frame, proxy: string): ProxyFrame {
  const meta = new Meta(frame);
  const op = meta.op;
  switch (op) {
    case 'reply':
      return { op, id: meta.uint('id'), error: meta.error('error') };
    case 'ready':
      return { op, id: meta.uint('id') };
    case 'data':
      return { op, id: meta.uint('id'), offset: meta.uint('offset') };
    case 'print': {
      const queue = meta.uint('queue');
      const team = frame.meta.team;
      const text = meta.string('text');
      const kernel = meta.string('kernel');
      if (!Number.isSafeInteger(team) || (team as number) < -1)
        throw errors.protocol(`a 'print' frame from proxy ${proxy} names team ${JSON.stringify(team)}`);
      return { op, queue, kernel, team: team as number, text };
    }
    case 'host-call': {
      const call = meta.uint('call');
      const kernel = meta.string('kernel');
      const name = meta.string('name');
      const args = meta.array('args');
      // JSON has no NaN or infinities: they travel as null.
      if (args.length > MAX_HOST_CALL_ARGS || !args.every((arg) => typeof arg === 'number' || arg === null)) {
        throw errors.protocol(
          `a 'host-call' frame from proxy ${proxy} has arguments that are not up to ${MAX_HOST_CALL_ARGS} numbers`,
        );
      }
      return { op, call, queue: meta.uint('queue'), kernel, name, args };
    }
    default:
      throw errors.protocol(`unexpected '${op}' frame from proxy ${proxy}`);
  }
}

/**
 * The hello's reply: the proxy's devices, its peers, its clock (`now` undefined when it did not
 * say), and whether it speaks the compact form of launches (protocol/compact.ts).
 */
export function decodeHelloReply(reply: Frame): {
  devices: DeviceInfo[];
  peers: readonly string[] | 'any';
  now: number | undefined;
  compact: boolean;
} {
  const meta = new Meta(reply);
  const now = reply.meta.now;
  const devices = meta.array('devices') as DeviceInfo[];
  const peers = reply.meta.peers;
  return {
    devices,
    peers:
      peers === 'any'
        ? 'any'
        : Array.isArray(peers)
          ? peers.filter((peer): peer is string => typeof peer === 'string')
          : [],
    now: typeof now === 'number' && Number.isFinite(now) ? now : undefined,
    compact: reply.meta.compact === true,
  };
}

/** A kernel of a 'load' reply: name and parameters as the proxy's device loaded them, its format and static size checked. */
function loadedKernel(told: unknown, proxy: string): LoadedKernelInfo {
  const kernel = (typeof told === 'object' && told !== null ? told : {}) as Record<string, unknown>;
  const { name, params, format, staticBytes } = kernel;
  if (typeof name !== 'string' || !Array.isArray(params))
    throw errors.protocol(`proxy ${proxy} described a loaded kernel without a name and parameters`);
  if (typeof format !== 'string' || !(IMAGE_FORMATS as readonly string[]).includes(format)) {
    throw errors.protocol(
      `proxy ${proxy} said kernel ${quoted(name)} is of image format ${quoted(String(format))}; formats are ${IMAGE_FORMATS.join(', ')}`,
    );
  }
  if (typeof staticBytes !== 'number' || !Number.isSafeInteger(staticBytes) || staticBytes < 0) {
    throw errors.protocol(
      `proxy ${proxy} said kernel ${quoted(name)} keeps ${JSON.stringify(staticBytes)} bytes of static data`,
    );
  }
  return { name, params: params as ParamInfo[], format: format as ImageFormat, staticBytes };
}

export function decodeLoadReply(reply: Frame, proxy: string): LoadedKernelInfo[] {
  return new Meta(reply).array('kernels').map((told) => loadedKernel(told, proxy));
}

export function decodeAllocReply(reply: Frame): ReplyBodies['alloc'] {
  const meta = new Meta(reply);
  return { address: meta.uint('address'), grant: meta.string('grant') };
}

export function decodeGlobalReply(reply: Frame): ReplyBodies['global'] {
  const meta = new Meta(reply);
  return { bytes: meta.uint('bytes'), address: meta.uint('address') };
}

export function decodeMemoryInfoReply(reply: Frame, proxy: string): MemoryInfo {
  const meta = new Meta(reply);
  const info = {
    totalBytes: meta.uint('totalBytes'),
    freeBytes: meta.uint('freeBytes'),
    largestFreeBlockBytes: meta.uint('largestFreeBlockBytes'),
  };
  if (info.freeBytes > info.totalBytes || info.largestFreeBlockBytes > info.freeBytes) {
    throw errors.protocol(
      `proxy ${proxy} said ${JSON.stringify(info)}: free memory above the total, or a block above the free memory`,
    );
  }
  return info;
}

/** A timed record's reply: the time on the proxy's clock. */
export function decodeRecordReply(reply: Frame, proxy: string, event: number): number {
  const time = reply.meta.time;
  if (typeof time !== 'number' || !Number.isFinite(time))
    throw errors.protocol(`proxy ${proxy} timed event ${event} at ${JSON.stringify(time)}`);
  return time;
}
