/**
 * The proxy's live dashboard: one HTML page and one script, served by metrics-http.ts from the
 * package itself (no CDN, no framework): devices with their load and memory, sessions (tenants)
 * with what they hold, launches per second and their latency over the last five minutes as
 * charts, and recent refusals with their reasons. The script follows `/events` (server-sent
 * events, one snapshot a second) and falls back to polling `/state` where a stream cannot stay
 * open; the page itself carries the figures of the moment it was served, so it shows them at once. It builds the page with DOM calls and `textContent` only: nothing it shows is ever
 * parsed as HTML.
 */

/** The page, with the figures of the moment it is served in place of `__STATE__` (see dashboardPage). */
const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>offload proxy</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  :root { --fg: #1d2330; --muted: #6b7385; --line: #dde1ea; --ok: #1f8f4e; --bad: #c0392b; --accent: #2f6fdf; }
  body { font: 14px/1.4 system-ui, sans-serif; color: var(--fg); margin: 0; background: #f6f7fb; }
  header { display: flex; gap: 16px; align-items: baseline; padding: 12px 20px; background: #fff; border-bottom: 1px solid var(--line); }
  header h1 { font-size: 18px; margin: 0; }
  #status.ready { color: var(--ok); } #status.unready { color: var(--bad); }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); gap: 16px; padding: 16px 20px; }
  section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 12px 14px; min-width: 0; overflow-x: auto; }
  section.wide { grid-column: 1 / -1; }
  h2 { font-size: 14px; margin: 0 0 8px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid var(--line); white-space: nowrap; }
  td.num, th.num { text-align: right; }
  td.detail { white-space: normal; }
  .bar { position: relative; height: 10px; width: 64px; background: #eef0f5; border-radius: 5px; display: inline-block; vertical-align: middle; }
  .bar > span { position: absolute; left: 0; top: 0; bottom: 0; background: var(--accent); border-radius: 5px; }
  .down { color: var(--bad); font-weight: 600; }
  .muted { color: var(--muted); }
  svg { width: 100%; height: 120px; display: block; }
  .kv { display: flex; gap: 18px; flex-wrap: wrap; }
  .kv div b { display: block; font-size: 18px; }
</style>
</head>
<body>
<header><h1>offload proxy</h1><span id="status">connecting…</span><span id="updated" class="muted"></span></header>
<main>
  <section class="wide"><h2>Proxy</h2><div class="kv" id="summary"></div></section>
  <section class="wide"><h2>Devices</h2><table id="devices"><thead><tr><th>device</th><th>state</th><th class="num">launches</th><th class="num">in queue</th><th>memory held</th><th class="num">in / out</th></tr></thead><tbody></tbody></table></section>
  <section class="wide"><h2>Sessions</h2><table id="sessions"><thead><tr><th>tenant</th><th class="num">buffers</th><th class="num">memory</th><th class="num">queues</th><th class="num">images</th><th class="num">launches</th><th class="num">refusals</th><th class="num">age</th></tr></thead><tbody></tbody></table></section>
  <section><h2>Launches per second (5 min)</h2><svg id="rate" viewBox="0 0 600 120" preserveAspectRatio="none"></svg><div class="muted" id="rate-label"></div></section>
  <section><h2>Launch latency, mean and max (5 min)</h2><svg id="latency" viewBox="0 0 600 120" preserveAspectRatio="none"></svg><div class="muted" id="latency-label"></div></section>
  <section class="wide"><h2>Recent refusals</h2><table id="refusals"><thead><tr><th>when</th><th>reason</th><th>code</th><th>tenant</th><th>detail</th></tr></thead><tbody></tbody></table></section>
</main>
<script type="application/json" id="initial-state">__STATE__</script>
<script src="/dashboard.js"></script>
</body>
</html>
`;

/**
 * The page with `state` in it, as JSON in a data block (a script element of type
 * application/json, which runs nothing), its `<` escaped so that no string in it ends the element.
 */
export function dashboardPage(state: unknown): string {
  return DASHBOARD_HTML.replace('__STATE__', () => JSON.stringify(state).replace(/</g, '\\u003c'));
}

export const DASHBOARD_SCRIPT = `'use strict';
(function () {
  var SVG = 'http://www.w3.org/2000/svg';
  function $(id) { return document.getElementById(id); }
  function bytes(n) {
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    var i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + units[i];
  }
  function cell(row, text, cls) {
    var td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }
  function sum(record) { var s = 0; for (var k in record) s += record[k]; return s; }
  function fill(tbody, items, draw) {
    tbody.textContent = '';
    items.forEach(function (item) { var tr = document.createElement('tr'); draw(tr, item); tbody.appendChild(tr); });
  }
  function chart(svg, series, colors) {
    svg.textContent = '';
    var max = 0;
    series.forEach(function (points) { points.forEach(function (p) { if (p[1] > max) max = p[1]; }); });
    if (max === 0) max = 1;
    series.forEach(function (points, index) {
      var line = document.createElementNS(SVG, 'polyline');
      line.setAttribute('fill', 'none');
      line.setAttribute('stroke', colors[index]);
      line.setAttribute('stroke-width', '2');
      line.setAttribute('vector-effect', 'non-scaling-stroke');
      line.setAttribute('points', points.map(function (p) { return (p[0] * 2).toFixed(1) + ',' + (115 - (p[1] / max) * 105).toFixed(1); }).join(' '));
      svg.appendChild(line);
    });
    return max;
  }
  function render(state) {
    var status = $('status');
    status.textContent = state.ready.ready ? 'ready' : 'not ready: ' + state.ready.reasons.join('; ');
    status.className = state.ready.ready ? 'ready' : 'unready';
    $('updated').textContent = 'updated ' + new Date(state.time).toLocaleTimeString();
    var summary = $('summary');
    summary.textContent = '';
    [
      ['sessions', state.sessions], ['tenants', state.tenants],
      ['connections', sum(state.connections) + ' / ' + state.maxConnections],
      ['RSS', bytes(state.process.rssBytes)], ['heap', bytes(state.process.heapUsedBytes)],
      ['loop delay p99', (state.process.eventLoopDelayP99Seconds * 1000).toFixed(1) + ' ms'],
      ['uptime', Math.round(state.uptimeSeconds) + ' s']
    ].forEach(function (kv) {
      var div = document.createElement('div');
      var b = document.createElement('b');
      b.textContent = String(kv[1]);
      div.appendChild(b);
      div.appendChild(document.createTextNode(kv[0]));
      summary.appendChild(div);
    });
    fill($('devices').tBodies[0], state.devices, function (tr, d) {
      tr.dataset.device = String(d.id);
      cell(tr, d.id + ': ' + d.name);
      cell(tr, d.up ? 'up' : 'lost', d.up ? '' : 'down').title = d.lost || '';
      cell(tr, String(sum(d.launches)), 'num launches');
      cell(tr, String(d.queueDepth), 'num');
      var td = cell(tr, '');
      var bar = document.createElement('span');
      bar.className = 'bar';
      var inner = document.createElement('span');
      inner.style.width = Math.min(100, (100 * d.memoryHeldBytes) / Math.max(1, d.memoryLimitBytes)).toFixed(1) + '%';
      bar.appendChild(inner);
      td.appendChild(bar);
      td.appendChild(document.createTextNode(' ' + bytes(d.memoryHeldBytes) + ' of ' + bytes(d.memoryLimitBytes)));
      cell(tr, bytes(d.bytesIn) + ' / ' + bytes(d.bytesOut), 'num');
    });
    fill($('sessions').tBodies[0], state.tenantsHeld, function (tr, t) {
      tr.dataset.tenant = String(t.tenant);
      cell(tr, '#' + t.tenant + (t.client ? ' ' + t.client : ''));
      cell(tr, t.held.buffers + ' / ' + state.quotas.buffers, 'num');
      cell(tr, bytes(t.held.memoryBytes), 'num');
      cell(tr, String(t.held.queues), 'num');
      cell(tr, String(t.held.images), 'num');
      cell(tr, String(t.launches), 'num launches');
      cell(tr, String(sum(t.refusals)), 'num');
      cell(tr, Math.round((state.time - t.openedAt) / 1000) + ' s', 'num');
    });
    if (state.tenantsHeld.length === 0) fill($('sessions').tBodies[0], [0], function (tr) { cell(tr, 'no sessions', 'muted'); });
    var now = Math.floor(state.time / 1000);
    var bySecond = {};
    state.history.forEach(function (s) { bySecond[s.second] = s; });
    var rate = [], mean = [], longest = [];
    for (var x = 0; x < 300; x++) {
      var s = bySecond[now - 299 + x];
      rate.push([x, s ? s.launches : 0]);
      mean.push([x, s ? s.meanMs : 0]);
      longest.push([x, s ? s.maxMs : 0]);
    }
    var last = bySecond[now] || bySecond[now - 1];
    var peak = chart($('rate'), [rate], ['#2f6fdf']);
    $('rate-label').textContent = 'now ' + (last ? last.launches : 0) + '/s, peak ' + peak + '/s';
    var top = chart($('latency'), [longest, mean], ['#e0a030', '#1f8f4e']);
    $('latency-label').textContent = 'mean (green) and max (orange); top of chart ' + top.toFixed(2) + ' ms';
    fill($('refusals').tBodies[0], state.recentRefusals.slice().reverse().slice(0, 15), function (tr, r) {
      cell(tr, new Date(r.time).toLocaleTimeString());
      cell(tr, r.reason);
      cell(tr, r.code);
      cell(tr, r.tenant === undefined ? '' : '#' + r.tenant);
      cell(tr, r.message ? r.message.slice(0, 160) : '', 'muted detail');
    });
  }
  function poll() {
    fetch('/state').then(function (r) { return r.json(); }).then(render, function () {
      $('status').textContent = 'the proxy does not answer';
      $('status').className = 'unready';
    }).then(function () { setTimeout(poll, 1000); });
  }
  // The figures of the moment the page was served: shown before the stream's first event.
  var initial = $('initial-state');
  if (initial && initial.textContent) render(JSON.parse(initial.textContent));
  if (typeof EventSource === 'function') {
    var events = new EventSource('/events');
    var opened = false;
    events.onmessage = function (message) { opened = true; render(JSON.parse(message.data)); };
    events.onerror = function () {
      if (!opened) { events.close(); poll(); }
      else { $('status').textContent = 'reconnecting…'; $('status').className = 'unready'; }
    };
  } else {
    poll();
  }
})();
`;
