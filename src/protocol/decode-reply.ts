/**
 * The client's side of the protocol: decoders for every frame a proxy sends and for the bodies
 * of its replies. A proxy is a peer like any other: each field is checked, and what is wrong is
 * PROTOCOL naming the proxy (the client then closes that connection).
 */
import { errors, quoted } from '../errors.js';
import { IMAGE_FORMATS, type ImageFormat, type ParamInfo } from '../image/manifest.js';
import {
  cut,
  DEVICE_KINDS,
  MAX_HOST_CALL_ARGS,
  PLUGIN_NAMES,
  type DeviceInfo,
  type DeviceKind,
  type MemoryInfo,
  type PluginName,
} from '../plugins/interface.js';
import { toldProcess, type ProcessId } from '../transport/process-id.js';
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
 * say), whether it speaks the compact form of launches (protocol/compact.ts), and its process
 * when it told it (a proxy on this host: transport/co-location.ts; not yet checked).
 */
export function decodeHelloReply(reply: Frame): {
  devices: DeviceInfo[];
  peers: readonly string[] | 'any';
  now: number | undefined;
  compact: boolean;
  process: ProcessId | undefined;
} {
  const meta = new Meta(reply);
  const now = reply.meta.now;
  const devices = meta.array('devices').map((told, index) => checkedDeviceInfo(told, index));
  const peers = reply.meta.peers;
  return {
    devices,
    peers:
      peers === 'any'
        ? 'any'
        : Array.isArray(peers)
          ? peers.slice(0, 1024).filter((peer): peer is string => typeof peer === 'string' && peer.length <= 1024)
          : [],
    now: typeof now === 'number' && Number.isFinite(now) ? now : undefined,
    compact: reply.meta.compact === true,
    process: toldProcess(reply.meta.pid, reply.meta.started),
  };
}

/** The longest text a proxy's device description keeps in a field (a longer one ends in '...'). */
const MAX_INFO_CHARS = 256;

/**
 * A device as a hello describes it, rebuilt from checked fields: the limits the runtime checks
 * launches against are non-negative integers (PROTOCOL otherwise), texts are strings cut to
 * MAX_INFO_CHARS, image formats are known ones; `limits` keeps up to 64 finite numbers and
 * `capabilities` is read field by field later (remote/device.ts). Nothing of the proxy's making
 * but plain values reaches the program.
 */
function checkedDeviceInfo(told: unknown, index: number): DeviceInfo {
  if (typeof told !== 'object' || told === null || Array.isArray(told))
    throw errors.protocol(`the hello reply's device ${index} is not an object`);
  const info = told as Record<string, unknown>;
  const wrong = (field: string, expected: string): never => {
    const got = JSON.stringify(info[field]) ?? 'nothing';
    throw errors.protocol(
      `the hello reply's device ${index}: field '${field}' must be ${expected}, got ${got.length > 80 ? `${got.slice(0, 80)}...` : got}`,
    );
  };
  const text = (field: string, fallback?: string): string => {
    const value = info[field];
    if (value === undefined && fallback !== undefined) return fallback;
    if (typeof value !== 'string') return wrong(field, 'a string');
    return cut(value, MAX_INFO_CHARS);
  };
  const count = (field: string): number => {
    const value = info[field];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0)
      return wrong(field, 'a non-negative integer');
    return value;
  };
  const dims = (field: string): [number, number, number] => {
    const value = info[field];
    if (
      !Array.isArray(value) ||
      value.length !== 3 ||
      !value.every((v) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)
    )
      return wrong(field, 'three non-negative integers');
    return [value[0] as number, value[1] as number, value[2] as number];
  };
  const oneOf = <T extends string>(field: string, values: readonly T[]): T => {
    const value = info[field];
    if (!(values as readonly unknown[]).includes(value)) return wrong(field, `one of ${values.join(', ')}`);
    return value as T;
  };
  const formats = info.imageFormats;
  if (
    !Array.isArray(formats) ||
    formats.length > IMAGE_FORMATS.length ||
    !formats.every((format) => (IMAGE_FORMATS as readonly unknown[]).includes(format))
  )
    wrong('imageFormats', `an array of image formats (${IMAGE_FORMATS.join(', ')})`);
  const device: DeviceInfo = {
    name: text('name'),
    kind: oneOf<DeviceKind>('kind', DEVICE_KINDS),
    vendor: text('vendor', 'unknown'),
    plugin: oneOf<PluginName>('plugin', PLUGIN_NAMES),
    memoryBytes: count('memoryBytes'),
    maxThreadsPerTeam: count('maxThreadsPerTeam'),
    maxTeams: count('maxTeams'),
    maxTeamDims: dims('maxTeamDims'),
    maxThreadDims: dims('maxThreadDims'),
    maxTeamMemoryBytes: count('maxTeamMemoryBytes'),
    computeUnits: count('computeUnits'),
    imageFormats: [...(formats as ImageFormat[])],
    memoryKinds: ['device'],
    location: text('location', ''),
    launchTimeouts: info.launchTimeouts === true,
    kernelPrint: info.kernelPrint === true,
    hostCalls: info.hostCalls === true,
    capabilities: (typeof info.capabilities === 'object' && info.capabilities !== null
      ? info.capabilities
      : {}) as DeviceInfo['capabilities'],
  };
  if (typeof info.limits === 'object' && info.limits !== null && !Array.isArray(info.limits)) {
    const limits: Record<string, number> = {};
    for (const [name, value] of Object.entries(info.limits).slice(0, 64))
      if (name !== '__proto__' && name.length <= 64 && typeof value === 'number' && Number.isFinite(value))
        limits[name] = value;
    device.limits = limits;
  }
  if (typeof info.limitNames === 'object' && info.limitNames !== null && !Array.isArray(info.limitNames)) {
    const told = info.limitNames as Record<string, unknown>;
    const names: NonNullable<DeviceInfo['limitNames']> = {};
    for (const field of [
      'maxTeams',
      'maxThreadsPerTeam',
      'maxTeamDims',
      'maxThreadDims',
      'maxTeamMemoryBytes',
    ] as const) {
      const name = told[field];
      if (typeof name === 'string' && name.length <= 64) names[field] = name;
    }
    device.limitNames = names;
  }
  return device;
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
