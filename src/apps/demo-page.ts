/**
 * The page `offload serve` serves (a browser runs this module, never Node): the demo's kernels
 * (apps/demo-kernels.ts, as `offload demo` runs them) on every device the page finds (the host
 * device on Web Workers where the page's build has one, WebGPU through navigator.gpu, and the
 * proxy `offload serve` started, over WebSocket), shown as `offload demo`'s table (kernel,
 * device, grid, time, checked) and a bar chart of the times, inline SVG. The page traces its run
 * (`trace: true`): a link saves runtime.trace() as a Perfetto file.
 *
 * What it needs comes from `offload serve`: config.json (the proxy's WebSocket port, its token,
 * the vector size) and kernels.offload (the bundle of examples/kernels.ts). When the run ends,
 * `document.body.dataset.state` is `done` (every row checked OK) or `failed`.
 */
import { Offload } from '../api/runtime.js';
import { runDemoKernels, type Outcome } from './demo-kernels.js';

/** What `offload serve` says in config.json. */
export interface DemoPageConfig {
  /** The port of the proxy it started, over ws:// on the page's own host; none when it started none. */
  proxyPort?: number;
  token?: string;
  size: number;
}

interface Row extends Outcome {
  device: string;
  deviceId: number;
  plugin: string;
}

const SVG = 'http://www.w3.org/2000/svg';

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  text?: string,
  attributes: Record<string, string> = {},
): HTMLElementTagNameMap[K] {
  const made = document.createElement(tag);
  if (text !== undefined) made.textContent = text;
  for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, value);
  return made;
}

function svg(tag: string, attributes: Record<string, string | number>, text?: string): SVGElement {
  const made = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) made.setAttribute(name, String(value));
  if (text !== undefined) made.textContent = text;
  return made;
}

function ms(value: number): string {
  return value >= 100
    ? `${value.toFixed(0)} ms`
    : value >= 1
      ? `${value.toFixed(2)} ms`
      : `${(value * 1000).toFixed(0)} µs`;
}

/** An axis label: 10^power milliseconds, as a person writes it (1 µs, 10 ms, 1 s). */
function tick(power: number): string {
  if (power < 0) return `${10 ** (power + 3)} µs`;
  if (power < 3) return `${10 ** power} ms`;
  return `${10 ** (power - 3)} s`;
}

/** A row of the table: as `offload demo` prints it. */
function tableRow(row: Row): HTMLTableRowElement {
  const tr = element('tr', undefined, { 'data-plugin': row.plugin });
  const checked =
    row.mismatch === undefined
      ? 'checked: OK'
      : `checked: MISMATCH at ${row.mismatch.index} (${row.mismatch.got}, ${row.mismatch.expected})`;
  for (const cell of [
    row.kernel,
    row.device,
    `${row.teams} x ${row.threads}`,
    row.problem,
    ms(row.launchMs),
    ms(row.roundTripMs),
    checked,
  ])
    tr.append(element('td', cell));
  tr.lastElementChild!.className = row.mismatch === undefined ? 'ok' : 'mismatch';
  return tr;
}

const COLORS: Record<string, string> = { host: '#2b8a3e', webgpu: '#1c7ed6', remote: '#e8590c' };

/** Horizontal bars of each row's launch time, log-scaled (the devices differ by orders of magnitude). */
function chart(rows: readonly Row[]): SVGElement {
  const barHeight = 18;
  const labelWidth = 260;
  const width = 860;
  const top = 8;
  const height = top + rows.length * (barHeight + 6) + 30;
  const root = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', id: 'chart' });
  root.append(svg('title', {}, 'launch time of each kernel on each device (log scale)'));
  const times = rows.map((row) => Math.max(row.launchMs, 0.001));
  const low = Math.floor(Math.log10(Math.min(...times)));
  const high = Math.ceil(Math.log10(Math.max(...times))) + (times.length === 1 ? 1 : 0);
  const span = Math.max(1, high - low);
  const x = (value: number): number => ((Math.log10(value) - low) / span) * (width - labelWidth - 80);
  rows.forEach((row, index) => {
    const y = top + index * (barHeight + 6);
    root.append(
      svg(
        'text',
        { x: labelWidth - 8, y: y + barHeight - 5, 'text-anchor': 'end', 'font-size': 12 },
        `${row.kernel} · device ${row.deviceId} (${row.plugin})`,
      ),
    );
    root.append(
      svg('rect', {
        x: labelWidth,
        y,
        width: Math.max(2, x(times[index]!)),
        height: barHeight,
        fill: COLORS[row.plugin] ?? '#868e96',
        class: 'bar',
      }),
    );
    root.append(
      svg(
        'text',
        { x: labelWidth + Math.max(2, x(times[index]!)) + 6, y: y + barHeight - 5, 'font-size': 12 },
        ms(row.launchMs),
      ),
    );
  });
  const axis = top + rows.length * (barHeight + 6) + 14;
  for (let power = low; power <= high; power++) {
    const at = labelWidth + x(10 ** power);
    root.append(svg('line', { x1: at, x2: at, y1: top, y2: axis - 10, stroke: '#dee2e6' }));
    root.append(
      svg('text', { x: at, y: axis, 'text-anchor': 'middle', 'font-size': 11, fill: '#495057' }, tick(power)),
    );
  }
  return root;
}

async function main(): Promise<void> {
  const status = document.getElementById('status')!;
  const body = document.getElementById('rows')!;
  const config = (await (await fetch('config.json')).json()) as DemoPageConfig;
  const proxies = config.proxyPort === undefined ? [] : [`ws://${location.hostname}:${config.proxyPort}`];
  status.textContent = 'finding devices…';
  const runtime = await Offload.init({ webgpu: { fallback: true }, proxies, token: config.token, trace: true });
  const rows: Row[] = [];
  try {
    const notes = [...runtime.diagnostics];
    if (!crossOriginIsolated) notes.push('this page is not cross-origin isolated (COOP/COEP headers): no host device');
    document.getElementById('devices')!.textContent =
      runtime.devices.map((device) => `${device.id} ${device.info.name} (${device.info.plugin})`).join(' · ') +
      (notes.length > 0 ? ` — ${notes.join('; ')}` : '');
    const library = await runtime.register('kernels.offload');
    const skipped: string[] = [];
    for (const device of runtime.devices) {
      status.textContent = `running on device ${device.id} ${device.info.name}…`;
      const ran = await runDemoKernels(device, library, config.size, (outcome) => {
        const row = {
          ...outcome,
          device: `${device.id} ${device.info.name}`,
          deviceId: device.id,
          plugin: device.info.plugin,
        };
        rows.push(row);
        body.append(tableRow(row));
      });
      skipped.push(...ran.skipped);
    }
    document.getElementById('chart-box')!.replaceChildren(chart(rows));
    const trace = await runtime.trace();
    const link = element('a', 'download the trace (Perfetto)', {
      href: URL.createObjectURL(new Blob([JSON.stringify(trace)], { type: 'application/json' })),
      download: 'offload-demo-trace.json',
      id: 'trace',
    });
    document.getElementById('trace-box')!.replaceChildren(link);
    const failed = rows.filter((row) => row.mismatch !== undefined).length;
    status.textContent =
      (failed === 0
        ? `all ${rows.length} kernels checked OK on ${runtime.devices.length} devices`
        : `${failed} of ${rows.length} kernels MISMATCHED`) +
      (skipped.length > 0 ? `; not in the device's image: ${skipped.join(', ')}` : '');
    document.body.dataset.state = failed === 0 && rows.length > 0 ? 'done' : 'failed';
  } finally {
    await runtime.shutdown();
  }
}

main().catch((error: unknown) => {
  document.getElementById('status')!.textContent = `failed: ${error instanceof Error ? error.message : String(error)}`;
  document.body.dataset.state = 'failed';
});
