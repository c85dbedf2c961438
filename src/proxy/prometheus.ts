/**
 * A proxy's figures (metrics.ts's MetricsState) in the Prometheus text exposition format 0.0.4:
 * every family with its HELP and TYPE lines, names prefixed `offload_`, counters ending in
 * `_total`, byte and second units in the name. A family is written even when it has no sample
 * yet where its labels are known (each device, each refusal reason), so that dashboards and
 * alerts find it from the first scrape.
 */
import { LAUNCH_BUCKETS, LAUNCH_OUTCOMES, REFUSAL_REASONS, type MetricsState } from './metrics.js';
import type { SessionQuotas } from './session.js';

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

type Labels = Record<string, string | number>;
type Sample = [labels: Labels, value: number] | [labels: Labels, value: number, suffix: string];

/** A label value as the format escapes it: backslash, double quote and line feed. */
function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function formatValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return String(value);
}

function formatLabels(labels: Labels): string {
  const entries = Object.entries(labels);
  if (entries.length === 0) return '';
  return `{${entries.map(([name, value]) => `${name}="${escapeLabel(String(value))}"`).join(',')}}`;
}

class Exposition {
  private readonly lines: string[] = [];

  family(name: string, type: 'counter' | 'gauge' | 'histogram', help: string, samples: Sample[]): void {
    this.lines.push(`# HELP offload_${name} ${help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`);
    this.lines.push(`# TYPE offload_${name} ${type}`);
    for (const [labels, value, suffix] of samples)
      this.lines.push(`offload_${name}${suffix ?? ''}${formatLabels(labels)} ${formatValue(value)}`);
  }

  text(): string {
    return `${this.lines.join('\n')}\n`;
  }
}

/** Each quota's name as a label value. */
const RESOURCES: Record<keyof SessionQuotas, string> = {
  memoryBytes: 'memory_bytes',
  buffers: 'buffers',
  queues: 'queues',
  images: 'images',
  imageBytes: 'image_bytes',
  pendingBytes: 'pending_bytes',
};

export function formatPrometheus(state: MetricsState): string {
  const out = new Exposition();
  const device = (id: number) => ({ device: id });
  out.family(
    'connections',
    'gauge',
    'Connections open now, by state: logging_in (no login yet), client, peer_link (a peer proxy writing for a client), refused (being closed).',
    Object.entries(state.connections).map(([connectionState, count]) => [{ state: connectionState }, count]),
  );
  out.family('connections_max', 'gauge', 'Connections served at most (--max-connections fitted to the file limit).', [
    [{}, state.maxConnections],
  ]);
  out.family('connections_accepted_total', 'counter', 'Connections accepted since the proxy started.', [
    [{}, state.connectionsAccepted],
  ]);
  out.family('sessions', 'gauge', 'Client sessions open now (each a tenant with its own context and quotas).', [
    [{}, state.sessions],
  ]);
  out.family('sessions_opened_total', 'counter', 'Client sessions opened since the proxy started.', [
    [{}, state.sessionsOpened],
  ]);
  out.family('tenants', 'gauge', 'Distinct client hosts with a session now.', [[{}, state.tenants]]);

  out.family(
    'device_up',
    'gauge',
    '1 while the device serves, 0 once it is lost.',
    state.devices.map((d) => [device(d.id), d.up ? 1 : 0]),
  );
  out.family(
    'device_launches_total',
    'counter',
    'Kernel launches completed on the device, by outcome (ok, trap, timeout, lost, error).',
    state.devices.flatMap((d) =>
      LAUNCH_OUTCOMES.map((outcome): Sample => [{ ...device(d.id), outcome }, d.launches[outcome]]),
    ),
  );
  out.family(
    'device_kernel_seconds_total',
    'counter',
    "Seconds the device's launches took, from the proxy's enqueue to completion.",
    state.devices.map((d) => [device(d.id), d.kernelSeconds]),
  );
  out.family(
    'device_launch_duration_seconds',
    'histogram',
    "Launch time from the proxy's enqueue to completion.",
    state.devices.flatMap((d) => {
      let cumulative = 0;
      const samples: Sample[] = d.launchBuckets.map((count, index) => {
        cumulative += count;
        const le = index < LAUNCH_BUCKETS.length ? String(LAUNCH_BUCKETS[index]) : '+Inf';
        return [{ ...device(d.id), le }, cumulative, '_bucket'];
      });
      samples.push([device(d.id), d.kernelSeconds, '_sum'], [device(d.id), cumulative, '_count']);
      return samples;
    }),
  );
  out.family(
    'device_bytes_total',
    'counter',
    'Bytes clients asked to copy to the device (direction in) and from it (out).',
    state.devices.flatMap((d): Sample[] => [
      [{ ...device(d.id), direction: 'in' }, d.bytesIn],
      [{ ...device(d.id), direction: 'out' }, d.bytesOut],
    ]),
  );
  out.family(
    'device_memory_held_bytes',
    'gauge',
    "Bytes of the device's memory clients' buffers hold now.",
    state.devices.map((d) => [device(d.id), d.memoryHeldBytes]),
  );
  out.family(
    'device_memory_limit_bytes',
    'gauge',
    "The device's memory size.",
    state.devices.map((d) => [device(d.id), d.memoryLimitBytes]),
  );
  out.family(
    'device_queue_depth',
    'gauge',
    'Launches enqueued on the device and not completed yet.',
    state.devices.map((d) => [device(d.id), d.queueDepth]),
  );

  const tenant = (t: MetricsState['tenantsHeld'][number]): Labels => ({
    tenant: t.tenant,
    ...(t.client === undefined ? {} : { client: t.client }),
    ...(t.name === undefined ? {} : { name: t.name }),
  });
  out.family(
    'tenant_held',
    'gauge',
    'What each tenant holds now, by resource (memory_bytes, buffers, queues, images, image_bytes, pending_bytes), against offload_quota.',
    state.tenantsHeld.flatMap((t) =>
      Object.entries(RESOURCES).map(([key, resource]): Sample => [
        { ...tenant(t), resource },
        t.held[key as keyof SessionQuotas],
      ]),
    ),
  );
  out.family(
    'quota',
    'gauge',
    'What each tenant may hold, by resource (the --quota-* options).',
    Object.entries(RESOURCES).map(([key, resource]) => [{ resource }, state.quotas[key as keyof SessionQuotas]]),
  );
  out.family(
    'tenant_launches_total',
    'counter',
    "Launches of each tenant's session that completed (any outcome).",
    state.tenantsHeld.map((t) => [tenant(t), t.launches]),
  );
  out.family(
    'tenant_refusals_total',
    'counter',
    "Refusals of each tenant's requests, by reason.",
    state.tenantsHeld.flatMap((t) =>
      REFUSAL_REASONS.map((reason): Sample => [{ ...tenant(t), reason }, t.refusals[reason]]),
    ),
  );
  out.family(
    'refusals_total',
    'counter',
    'Requests and connections refused, by reason: quota (a quota or the proxy memory), login, time_limit, bad_frame, connections (no room).',
    REFUSAL_REASONS.map((reason) => [{ reason }, state.refusals[reason]]),
  );
  out.family(
    'request_errors_total',
    'counter',
    'Requests that failed for any other reason, by error code.',
    Object.entries(state.requestErrors).map(([code, count]) => [{ code }, count]),
  );

  out.family('proxy_queues', 'gauge', 'Queues the proxy holds for its clients.', [[{}, state.proxy.queues]]);
  out.family('proxy_buffers', 'gauge', "Clients' live buffers.", [[{}, state.proxy.buffers]]);
  out.family('proxy_images', 'gauge', "Clients' registered images.", [[{}, state.proxy.images]]);
  out.family(
    'proxy_memory_held_bytes',
    'gauge',
    "The proxy's own memory its clients hold (estimated; --proxy-memory).",
    [[{}, state.proxy.memoryHeldBytes]],
  );
  out.family('process_resident_memory_bytes', 'gauge', "The proxy process's resident set size.", [
    [{}, state.process.rssBytes],
  ]);
  out.family('process_heap_used_bytes', 'gauge', 'The JS heap in use.', [[{}, state.process.heapUsedBytes]]);
  out.family(
    'process_young_generation_bytes',
    'gauge',
    "V8's young generation (nursery), both semi-spaces: 1 MiB each in a proxy offload-ts starts, unless node's flags size it.",
    [[{}, state.process.youngGenerationBytes]],
  );
  out.family(
    'process_external_memory_bytes',
    'gauge',
    'Memory outside the JS heap that V8 tracks (ArrayBuffers, wasm).',
    [[{}, state.process.externalBytes]],
  );
  out.family(
    'event_loop_delay_p99_seconds',
    'gauge',
    "The 99th percentile of the event loop's delay over the last 10 s window (10 ms resolution).",
    [[{}, state.process.eventLoopDelayP99Seconds]],
  );
  out.family(
    'event_loop_delay_max_seconds',
    'gauge',
    'The longest the event loop was held in the last 10 s window (10 ms resolution).',
    [[{}, state.process.eventLoopDelayMaxSeconds]],
  );
  out.family('uptime_seconds', 'gauge', 'Seconds since the proxy started.', [[{}, state.uptimeSeconds]]);
  out.family('ready', 'gauge', '1 while /readyz answers 200: every device up, a connection slot free.', [
    [{}, state.ready.ready ? 1 : 0],
  ]);
  return out.text();
}
