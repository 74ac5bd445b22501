// The tern dashboard: a few views over the advisor's API and the daemon's
// live stream, routed by the URL's hash so every view is a link.
'use strict';

const main = document.getElementById('view');
// Each navigation renders into a page of its own: a view still loading
// when the next one starts writes into its own, detached page, never into
// the next view's.
let current = main;
const statusLine = document.getElementById('status');
let liveSource = null;

async function api(path) {
  const r = await fetch(path, { headers: { Accept: 'application/json' } });
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { msg = (await r.json()).message || msg; } catch (_) { /* not JSON */ }
    const e = new Error(msg); e.status = r.status; throw e;
  }
  return r.json();
}

// A session's direction, and whether it is one end of a third-party copy.
function direction(s) {
  if (!s.third_party) return s.direction;
  const t = s.third_party;
  return s.direction + ' (third-party ' + t.role + ', ' + (t.dialed ? 'dialed the other daemon' : 'the other daemon dialed') + ')';
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role' || k === 'id' || k === 'href' || k === 'title') e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

const fmt = {
  ms: v => v == null ? '–' : (v < 10 ? v.toFixed(2) : v.toFixed(1)) + ' ms',
  pct: v => v == null ? '–' : (v < 0.1 ? v.toFixed(3) : v.toFixed(2)) + ' %',
  bps: v => {
    if (v == null) return '–';
    const u = [['Tbit/s', 1e12], ['Gbit/s', 1e9], ['Mbit/s', 1e6], ['kbit/s', 1e3]];
    for (const [n, s] of u) if (v >= s) return (v / s).toFixed(v / s < 10 ? 2 : 1) + ' ' + n;
    return v.toFixed(0) + ' bit/s';
  },
  bytes: v => {
    const u = [['GiB', 2 ** 30], ['MiB', 2 ** 20], ['KiB', 2 ** 10]];
    for (const [n, s] of u) if (v >= s) return (v / s).toFixed(1) + ' ' + n;
    return v + ' B';
  },
  ago: ms => {
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 90) return Math.round(s) + ' s ago';
    if (s < 5400) return Math.round(s / 60) + ' min ago';
    if (s < 129600) return Math.round(s / 3600) + ' h ago';
    return Math.round(s / 86400) + ' d ago';
  },
  time: ms => new Date(ms).toLocaleString(),
};

function pathHref(from, to) {
  return '#/path?from=' + encodeURIComponent(from) + '&to=' + encodeURIComponent(to);
}

function setStatus(text) { statusLine.textContent = text; }

// ---- Mesh grid -------------------------------------------------------------

/// A cell's health: the worst of loss, throughput against capacity, a recent
/// event, and stale data.
function health(p, now, intervalMs, events) {
  if (!p) return ['stale', 'no data'];
  if (now - p.newest > 3 * intervalMs) return ['stale', 'no data for ' + fmt.ago(p.newest).replace(' ago', '')];
  const loss = Math.max(p.loss ?? 0, p.loss_reverse ?? 0);
  if (loss >= 1) return ['bad', 'loss ' + fmt.pct(loss)];
  const why = [];
  if (loss >= 0.1) why.push('loss ' + fmt.pct(loss));
  if (p.throughput != null && p.capacity != null && p.throughput < 0.5 * p.capacity) why.push('throughput under half the capacity');
  for (const e of events) {
    why.push(e.event === 'route_change' ? 'route changed' : e.event === 'alert' ? 'alert ' + e.details.alert : e.kind + ' ' + (e.details.direction || 'shift'));
  }
  return why.length ? ['warn', why.join(', ')] : ['good', 'healthy'];
}

async function showGrid() {
  const view = current;
  const [latest, targets, events] = await Promise.all([
    api('/api/v1/latest'),
    api('/api/v1/targets'),
    api('/api/v1/events?since_ms=' + (Date.now() - 86400e3) + '&limit=1000'),
  ]);
  const pairs = new Map();
  for (const m of latest.latest) {
    const key = m.from + '\u0000' + m.host;
    const p = pairs.get(key) || { newest: 0 };
    p[m.kind] = m.value;
    p.newest = Math.max(p.newest, m.at_ms);
    pairs.set(key, p);
  }
  const interval = new Map(targets.targets.map(t => [t.host, t.interval_s * 1000]));
  const froms = [...new Set(latest.latest.map(m => m.from))].sort();
  const tos = [...new Set([...latest.latest.map(m => m.host), ...targets.targets.map(t => t.host)])].sort();
  const now = Date.now();
  view.replaceChildren(el('h1', {}, 'Mesh grid'));
  if (!froms.length) {
    view.append(el('p', { class: 'muted' }, 'No measurements yet. Add a target (POST /api/v1/targets) or a mesh (--mesh), and the first probes run within seconds.'));
    return;
  }
  const table = el('table', { class: 'grid', 'aria-label': 'Paths from each site (rows) to each target (columns)' });
  table.append(el('thead', {}, el('tr', {}, el('th', {}, 'from \\ to'), ...tos.map(t => el('th', { scope: 'col' }, t)))));
  const body = el('tbody');
  for (const f of froms) {
    const row = el('tr', {}, el('th', { scope: 'row' }, f || '(unnamed site)'));
    for (const t of tos) {
      if (f === t) { row.append(el('td', { class: 'self', title: 'itself' })); continue; }
      const p = pairs.get(f + '\u0000' + t);
      const evs = events.events.filter(e => e.from === f && e.host === t);
      const [cls, why] = health(p, now, interval.get(t) || 6 * 3600e3, evs);
      const text = p ? [
        'RTT ' + fmt.ms(p.rtt), el('br'),
        'loss ' + fmt.pct(p.loss) + ' / ' + fmt.pct(p.loss_reverse), el('br'),
        'cap ' + fmt.bps(p.capacity),
      ] : ['no data'];
      const link = el('a', { class: 'cell ' + cls, href: pathHref(f, t), title: why,
        'aria-label': f + ' to ' + t + ': ' + why, 'data-from': f, 'data-to': t, 'data-health': cls }, ...text);
      row.append(el('td', { class: 'cell' }, link));
    }
    body.append(row);
  }
  table.append(body);
  view.append(el('div', { class: 'scroll' }, table));
  view.append(el('p', { class: 'legend' },
    el('span', { style: 'background:var(--good)' }, 'healthy'),
    el('span', { style: 'background:var(--warn)' }, 'loss ≥ 0.1 %, slow, or an event today'),
    el('span', { style: 'background:var(--bad)' }, 'loss ≥ 1 %'),
    el('span', { style: 'background:var(--stale)' }, 'no data for 3 intervals')));
  setStatus('updated ' + new Date().toLocaleTimeString());
}

// ---- Path page -------------------------------------------------------------

const CHARTS = [
  ['rtt', 'Round-trip time', 'ms'],
  ['loss', 'Loss, this way →', '%'],
  ['loss_reverse', 'Loss, back ←', '%'],
  ['capacity', 'Bottleneck capacity', 'bit/s'],
  ['throughput', 'Throughput', 'bit/s'],
  ['jitter', 'Delay variation →', 'ms'],
];

function eventMarkers(events) {
  return {
    hooks: {
      draw: [u => {
        const ctx = u.ctx;
        for (const e of events) {
          const x = u.valToPos(e.at_ms / 1000, 'x', true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.save();
          ctx.strokeStyle = e.event === 'route_change' ? '#d2413a' : '#e09b1a';
          ctx.lineWidth = 2 * devicePixelRatio;
          ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
          ctx.restore();
        }
      }],
    },
  };
}

/// Draws one series into `div` (already in the page, so it has a width):
/// the measured points and their EWMA, with the path's events as dashed
/// lines; it follows the width of its box.
async function chart(from, to, kind, title, unit, events, div) {
  const q = '/api/v1/series?from=' + encodeURIComponent(from) + '&to=' + encodeURIComponent(to) + '&kind=' + kind + '&limit=2000';
  const raw = await api(q);
  // The EWMA of exactly these points (the API's ewma=W is the same
  // recurrence; one request keeps the two series the same length).
  let level = null;
  const smooth = { points: raw.points.map(p => ({ at_ms: p.at_ms, value: level = level == null ? p.value : level + 0.3 * (p.value - level) })) };
  div.dataset.points = raw.points.length;
  if (!raw.points.length) { div.append(el('div', { class: 'none' }, 'no measurements')); return; }
  const xs = raw.points.map(p => p.at_ms / 1000);
  const ys = raw.points.map(p => p.value);
  const mine = events.filter(e => e.kind === kind || e.event === 'route_change');
  const top = Math.max(...ys, ...smooth.points.map(p => p.value));
  const opts = {
    width: Math.max(260, div.clientWidth - 20), height: 220,
    plugins: [eventMarkers(mine)],
    scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, top > 0 ? top * 1.15 : 1] } },
    series: [
      {},
      { label: 'measured', stroke: '#2563c9', paths: () => null, points: { show: true, size: 6, fill: '#2563c9' } },
      { label: 'EWMA', stroke: '#1d1d1f', width: 1.5 },
    ],
    axes: [{}, { values: (u, vals) => vals.map(v => unit === 'bit/s' ? fmt.bps(v) : +v.toPrecision(3)), size: unit === 'bit/s' ? 90 : 60 }],
  };
  const plot = new uPlot(opts, [xs, ys, smooth.points.map(p => p.value)], div);
  new ResizeObserver(() => plot.setSize({ width: Math.max(260, div.clientWidth - 20), height: 220 })).observe(div);
}

async function showPath(params) {
  const view = current;
  const from = params.get('from') || '', to = params.get('to') || '';
  view.replaceChildren(el('h1', {}, from + ' → ' + to), el('p', {}, el('a', { href: '#/grid' }, '← mesh grid'),
    ' · ', el('a', { href: pathHref(to, from) }, 'the other way')));
  const events = (await api('/api/v1/events?from=' + encodeURIComponent(from) + '&to=' + encodeURIComponent(to) + '&limit=500')).events;
  const charts = el('div', { class: 'charts' });
  view.append(charts);
  // Boxes first, in order, so that each chart knows its width.
  const boxes = CHARTS.map(([k, t, u]) => {
    const div = el('div', { class: 'chart', 'data-kind': k }, el('h3', {}, t + ' (' + u + ')'));
    charts.append(div);
    return div;
  });
  await Promise.all(CHARTS.map(([k, t, u], i) => chart(from, to, k, t, u, events, boxes[i])
    .catch(e => boxes[i].append(el('p', {}, e.message)))));
  // Events, newest first.
  view.append(el('h2', {}, 'Events'));
  if (!events.length) view.append(el('p', { class: 'muted' }, 'none'));
  else view.append(el('ul', { class: 'events' }, ...events.map(e => el('li', { class: 'event-' + e.event, 'data-event': e.event },
    fmt.time(e.at_ms) + ' — ' + describe(e)))));
  // The route and when it changed.
  view.append(el('h2', {}, 'Route'));
  const routes = (await api('/api/v1/routes?from=' + encodeURIComponent(from) + '&to=' + encodeURIComponent(to))).routes;
  if (!routes.length) view.append(el('p', { class: 'muted' }, 'not traced yet'));
  for (const r of routes) {
    const changed = events.find(e => e.event === 'route_change');
    view.append(el('p', { class: 'muted' }, 'traced ' + fmt.ago(r.at_ms) + (r.reached ? '' : ', destination not reached') +
      (changed ? '; last changed ' + fmt.time(changed.at_ms) : '; unchanged since the archive began')));
    const t = el('table', { 'aria-label': 'Hops' }, el('thead', {}, el('tr', {}, el('th', {}, 'TTL'), el('th', {}, 'address'), el('th', {}, 'RTT'))));
    t.append(el('tbody', {}, ...r.hops.map(h => el('tr', {}, el('td', {}, h.ttl), el('td', {}, h.addr || '*'),
      el('td', {}, h.rtt_ms && h.rtt_ms.length ? h.rtt_ms.map(v => v.toFixed(2)).join(' ') + ' ms' : '*')))));
    view.append(t);
  }
  // The advice this advisor gives for the target (from its own site's measurements).
  view.append(el('h2', {}, 'Advice'));
  try {
    const a = await api('/api/v1/advice/' + encodeURIComponent(to));
    const rows = [
      ['buffer', fmt.bytes(a.buffer_bytes ?? a.bdp_bytes ?? 0)],
      ['streams', String(a.streams)],
      ['expected', fmt.bps(a.expected_throughput_bps)],
      ['RTT', fmt.ms(a.rtt_ms) + ' (' + (a.rtt?.samples ?? '?') + ' samples)'],
      ['capacity', fmt.bps(a.capacity_bps) + ' (' + (a.capacity?.method ?? '?') + ')'],
      ['source', a.source + ', newest ' + Math.round(a.age_s) + ' s old'],
      ['notes', (a.notes || []).join('; ') || '–'],
    ];
    view.append(el('div', { class: 'kv', id: 'advice' }, ...rows.flatMap(([k, v]) => [el('strong', {}, k), el('span', {}, v)])));
  } catch (e) {
    view.append(el('p', { class: 'muted' }, 'no advice: ' + e.message));
  }
}

function describe(e) {
  if (e.event === 'alert') return 'alert ' + (e.details.message || e.details.alert);
  if (e.event === 'route_change') return 'route changed: ' + (e.details.before || []).join(' → ') + '  ⇒  ' + (e.details.after || []).join(' → ');
  const d = e.details;
  return e.kind + ' ' + (d.direction || 'shift') + ' from ' + Number(d.before).toPrecision(3) + ' to ' + Number(d.after).toPrecision(3) + ' ' + (d.unit || '');
}

// ---- Route graph -------------------------------------------------------------

async function showRoutes() {
  const view = current;
  const [routes, groups] = await Promise.all([api('/api/v1/routes'), api('/api/v1/groups')]);
  const shared = new Set(groups.groups.flatMap(g => g.shared_hops));
  view.replaceChildren(el('h1', {}, 'Routes'),
    el('p', { class: 'muted' }, 'Every traced route; routers on more than one path (bottleneck groups) are red. Click a path to open it.'));
  const box = el('div', { id: 'cy', role: 'img', 'aria-label': 'Graph of routes and their hops' });
  view.append(box);
  const elements = [], nodes = new Set();
  const node = (id, label, cls) => { if (!nodes.has(id)) { nodes.add(id); elements.push({ data: { id, label }, classes: cls }); } };
  for (const r of routes.routes) {
    node('site:' + r.from, r.from, 'site');
    let prev = 'site:' + r.from;
    r.hops.forEach((h, i) => {
      if (!h.addr) return;
      const last = r.reached && i === r.hops.length - 1;
      const id = last ? 'site:' + r.to : 'hop:' + h.addr;
      node(id, last ? r.to : h.addr, last ? 'site' : (shared.has(h.addr) ? 'hop shared' : 'hop'));
      elements.push({ data: { id: r.from + '>' + r.to + '#' + i, source: prev, target: id, from: r.from, to: r.to } });
      prev = id;
    });
  }
  cytoscape({
    container: box, elements,
    layout: { name: 'cose', animate: false, padding: 20 },
    style: [
      { selector: 'node', style: { label: 'data(label)', 'font-size': 11, 'background-color': '#8a8a93', width: 14, height: 14 } },
      { selector: 'node.site', style: { 'background-color': '#2563c9', width: 22, height: 22, 'font-weight': 'bold' } },
      { selector: 'node.shared', style: { 'background-color': '#d2413a', width: 20, height: 20 } },
      { selector: 'edge', style: { width: 2, 'line-color': '#b8b8c0', 'curve-style': 'bezier', 'target-arrow-shape': 'triangle', 'target-arrow-color': '#b8b8c0' } },
    ],
  }).on('tap', 'edge', ev => { location.hash = pathHref(ev.target.data('from'), ev.target.data('to')).slice(1); });
  view.append(el('h2', {}, 'Bottleneck groups'));
  if (!groups.groups.length) view.append(el('p', { class: 'muted' }, 'no two paths share a router'));
  for (const g of groups.groups) {
    view.append(el('p', { 'data-group': g.name }, el('strong', {}, g.name), ' — shared ' + g.shared_hops.join(', ') + ': ',
      ...g.paths.flatMap(([f, t], i) => [i ? ', ' : '', el('a', { href: pathHref(f, t) }, f + ' → ' + t)])));
  }
  view.append(el('h2', {}, 'Paths'));
  view.append(el('ul', {}, ...routes.routes.map(r => el('li', {}, el('a', { href: pathHref(r.from, r.to) }, r.from + ' → ' + r.to),
    ' ' + r.hops.map(h => h.addr || '*').join(' → ')))));
}

// ---- Transfers -------------------------------------------------------------

function showTransfers() {
  const view = current;
  view.replaceChildren(el('h1', {}, 'Transfers'), el('p', { class: 'muted' }, 'Sessions running on this daemon, updated every second: each stream with its path, rate and what TCP says of it, and the tuning the session runs with.'));
  const table = el('table', { id: 'live', 'aria-label': 'Running sessions' },
    el('thead', {}, el('tr', {}, ...['session', 'peer', 'direction', 'streams', 'moved', 'rate', 'progress', 'running for'].map(h => el('th', {}, h)))));
  const body = el('tbody');
  table.append(body);
  const summary = el('p', { id: 'live-summary', class: 'muted' }, 'waiting for the daemon…');
  const detail = el('div', { id: 'live-detail' });
  const recent = el('div', { id: 'recent' });
  view.append(el('div', { class: 'scroll' }, table), summary, detail, el('h2', {}, 'Recent transfers'), recent);
  const last = new Map();
  // Rate of a counter between two updates, bits/s.
  const rateOf = (key, bytes, at) => {
    const prev = last.get(key);
    last.set(key, { bytes, at });
    return prev && at > prev.at ? (bytes - prev.bytes) * 8 / (at - prev.at) : null;
  };
  liveSource = new EventSource('/api/v1/live/stream');
  liveSource.addEventListener('sessions', ev => {
    const v = JSON.parse(ev.data);
    if (!v.daemon) { summary.textContent = 'No daemon runs beside this advisor.'; return; }
    const now = performance.now() / 1000;
    body.replaceChildren(...v.sessions.map(s => {
      const rate = rateOf('s' + s.id, s.bytes, now);
      const share = s.total ? Math.min(1, s.bytes / s.total) : 0;
      return el('tr', { 'data-session': s.id, 'data-bytes': s.bytes },
        el('td', {}, s.id), el('td', {}, s.peer), el('td', {}, direction(s)), el('td', {}, s.streams),
        el('td', {}, fmt.bytes(s.bytes)), el('td', {}, fmt.bps(rate)),
        el('td', {}, el('div', { class: 'bar', role: 'progressbar', 'aria-valuenow': Math.round(share * 100) }, el('div', { style: 'width:' + (share * 100).toFixed(1) + '%' }))),
        el('td', {}, s.elapsed_s.toFixed(0) + ' s'));
    }));
    detail.replaceChildren(...v.sessions.map(s => {
      const t = s.tuning;
      const paths = el('table', { class: 'live-paths', 'aria-label': 'Paths of session ' + s.id },
        el('thead', {}, el('tr', {}, ...['path', 'streams', 'moved', 'rate', 'TCP delivery rate'].map(h => el('th', {}, h)))),
        el('tbody', {}, ...s.paths.map(p => el('tr', { 'data-path': p.path },
          el('td', {}, p.path), el('td', {}, p.streams), el('td', {}, fmt.bytes(p.bytes)),
          el('td', {}, fmt.bps(rateOf('s' + s.id + 'p' + p.path, p.bytes, now))), el('td', {}, p.delivery_bps == null ? '– (this end receives)' : fmt.bps(p.delivery_bps))))));
      const streams = el('table', { class: 'live-streams', 'aria-label': 'Streams of session ' + s.id },
        el('thead', {}, el('tr', {}, ...['stream', 'path', 'moved', 'rate', 'RTT', 'cwnd', 'send buffer', 'receive buffer', 'retransmitted'].map(h => el('th', {}, h)))),
        el('tbody', {}, ...s.stream_detail.map(x => el('tr', { 'data-stream': x.index, 'data-bytes': x.bytes },
          el('td', {}, x.index), el('td', {}, x.path), el('td', {}, fmt.bytes(x.bytes)),
          el('td', {}, fmt.bps(rateOf('s' + s.id + 'k' + x.index, x.bytes, now))),
          el('td', {}, x.rtt_ms == null ? '–' : x.rtt_ms.toFixed(1) + ' ms'),
          el('td', {}, x.cwnd_bytes == null ? '–' : fmt.bytes(x.cwnd_bytes)),
          el('td', {}, x.send_buffer_bytes == null ? '–' : fmt.bytes(x.send_buffer_bytes)),
          el('td', {}, x.receive_buffer_bytes == null ? '–' : fmt.bytes(x.receive_buffer_bytes)),
          el('td', {}, x.retransmitted_bytes == null ? '–' : fmt.bytes(x.retransmitted_bytes))))));
      return el('section', { class: 'live-session', 'data-session': s.id },
        el('h2', {}, 'Session ' + s.id + ' with ' + s.peer),
        el('p', { class: 'tuning' }, 'Tuning: congestion control ' + t.congestion + ', buffers sized by ' + t.window +
          (t.auto_streams ? ', the sender may change the stream count (up to ' + t.max_streams + ')' : ', a fixed stream count') +
          ', blocks of ' + fmt.bytes(t.block_size) + '.'),
        el('div', { class: 'scroll' }, paths), el('div', { class: 'scroll' }, streams));
    }));
    recent.replaceChildren(v.recent.length ? el('div', { class: 'scroll' }, el('table', { id: 'recent-table', 'aria-label': 'Recent transfers' },
      el('thead', {}, el('tr', {}, ...['session', 'peer', 'direction', 'ended', 'outcome', 'moved', 'files', 'streams', 'rate', 'blocks resent', 'what limited it'].map(h => el('th', {}, h)))),
      el('tbody', {}, ...v.recent.map(r => el('tr', { 'data-session': r.id, 'data-outcome': r.outcome },
        el('td', {}, r.id), el('td', {}, r.peer), el('td', {}, direction(r)),
        el('td', {}, fmt.time(r.started_ms + r.elapsed_s * 1000)), el('td', { class: 'outcome-' + r.outcome }, r.outcome),
        el('td', {}, fmt.bytes(r.bytes)), el('td', {}, r.files), el('td', {}, r.streams),
        el('td', {}, r.rate_bps ? fmt.bps(r.rate_bps) : '–'), el('td', {}, r.blocks_retransmitted),
        el('td', {}, r.diagnosis || '–'))))))
      : el('p', { class: 'muted' }, 'No session has ended since the daemon started.'));
    summary.textContent = v.sessions.length + ' running; ' + v.completed + ' completed and ' + v.failed + ' failed since the daemon started.';
    setStatus('live ' + new Date().toLocaleTimeString());
  });
}

// ---- World map ----------------------------------------------------------------

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
  n.append(...children);
  return n;
}

// Equirectangular: x = lon + 180, y = 90 - lat, in a 360 × 180 box.
function ringPath(ring) {
  let d = '', lastLon = null;
  for (const [lon, lat] of ring) {
    // A ring that crosses the antimeridian starts again on the other side.
    const jump = lastLon === null || Math.abs(lon - lastLon) > 180;
    d += (jump ? 'M' : 'L') + (lon + 180).toFixed(2) + ',' + (90 - lat).toFixed(2);
    lastLon = lon;
  }
  return d + 'Z';
}

let landPath = null;
async function land() {
  if (landPath === null) {
    const topology = await api('/assets/vendor/land-110m.json');
    const geometry = topojson.feature(topology, topology.objects.land);
    const polygons = [];
    for (const f of geometry.features || [geometry]) {
      const g = f.geometry || f;
      if (g.type === 'Polygon') polygons.push(g.coordinates);
      else if (g.type === 'MultiPolygon') polygons.push(...g.coordinates);
    }
    landPath = polygons.map(rings => rings.map(ringPath).join('')).join('');
  }
  return landPath;
}

// A link's colour by RTT (green near, through blue, to purple far: red
// stays for loss), and its dash by loss.
function rttColour(ms) {
  if (ms == null) return '#888';
  const t = Math.min(1, Math.log10(Math.max(1, ms)) / Math.log10(300));
  return 'hsl(' + Math.round(130 + 150 * t) + ', 70%, 38%)';
}

async function showMap() {
  const view = current;
  const [meshes, latest, outline] = await Promise.all([api('/api/v1/meshes'), api('/api/v1/latest'), land()]);
  const hosts = new Map();
  for (const m of meshes.meshes) for (const h of m.hosts) {
    if (!hosts.has(h.name) || hosts.get(h.name).lat == null) hosts.set(h.name, h);
  }
  const placed = [...hosts.values()].filter(h => h.lat != null && h.lon != null);
  const unplaced = [...hosts.values()].filter(h => h.lat == null || h.lon == null).map(h => h.name);
  const pairs = new Map();
  for (const m of latest.latest) {
    const key = m.from + '\u0000' + m.host;
    const p = pairs.get(key) || { from: m.from, to: m.host, newest: 0 };
    p[m.kind] = m.value;
    p.newest = Math.max(p.newest, m.at_ms);
    pairs.set(key, p);
  }
  view.replaceChildren(el('h1', {}, 'World map'),
    el('p', { class: 'muted' }, 'Hosts placed by the coordinates in their mesh (lat, lon); each line is a measured path, coloured by RTT, dashed when it loses packets. Select a line to open its path.'));
  const map = svg('svg', { id: 'world', viewBox: '0 0 360 180', role: 'img', 'aria-label': 'World map of measured paths' },
    svg('rect', { x: 0, y: 0, width: 360, height: 180, class: 'sea' }),
    svg('path', { d: outline, class: 'land' }));
  const at = h => [h.lon + 180, 90 - h.lat];
  let links = 0;
  for (const p of pairs.values()) {
    const a = hosts.get(p.from), b = hosts.get(p.to);
    if (!a || !b || a.lat == null || b.lat == null) continue;
    const [x1, y1] = at(a), [x2, y2] = at(b);
    const loss = Math.max(p.loss ?? 0, p.loss_reverse ?? 0);
    const why = p.from + ' → ' + p.to + ': RTT ' + fmt.ms(p.rtt) + ', loss ' + fmt.pct(p.loss) + ' / ' + fmt.pct(p.loss_reverse);
    // Both directions of a pair are drawn: bend each to its own side.
    const mx = (x1 + x2) / 2 + (y2 - y1) * 0.08, my = (y1 + y2) / 2 - (x2 - x1) * 0.08;
    const line = svg('path', { d: `M${x1},${y1} Q${mx},${my} ${x2},${y2}`, class: 'link' + (loss >= 1 ? ' lossy' : loss >= 0.1 ? ' lossish' : ''),
      stroke: rttColour(p.rtt), 'data-from': p.from, 'data-to': p.to, 'data-rtt': p.rtt ?? '' }, svg('title', {}, why));
    map.append(svg('a', { href: pathHref(p.from, p.to), 'aria-label': why }, line));
    links++;
  }
  for (const h of placed) {
    const [x, y] = at(h);
    map.append(svg('g', { class: 'site', 'data-host': h.name },
      svg('circle', { cx: x, cy: y, r: 1.6 }), svg('text', { x: x + 2.2, y: y - 1.2 }, h.name)));
  }
  view.append(el('div', { class: 'map' }, map));
  view.append(el('p', { class: 'legend' },
    el('span', { style: 'background:' + rttColour(5) }, 'RTT 5 ms'),
    el('span', { style: 'background:' + rttColour(50) }, '50 ms'),
    el('span', { style: 'background:' + rttColour(300) }, '300 ms'),
    el('span', { class: 'plain' }, 'dashed: loss ≥ 0.1 %; thick dashes: ≥ 1 %')));
  view.append(el('p', { id: 'map-summary', class: 'muted' }, placed.length + ' hosts placed, ' + links + ' paths drawn' +
    (unplaced.length ? '; not placed (no lat/lon in their mesh): ' + unplaced.join(', ') : '') + '. Outline: Natural Earth 1:110m land, public domain.'));
}

// ---- Events ---------------------------------------------------------------

async function showEvents() {
  const view = current;
  const events = (await api('/api/v1/events?limit=500')).events;
  view.replaceChildren(el('h1', {}, 'Events'));
  if (!events.length) { view.append(el('p', { class: 'muted' }, 'No route changes or level shifts so far.')); return; }
  view.append(el('ul', {}, ...events.map(e => el('li', { class: 'event-' + e.event, 'data-event': e.event },
    fmt.time(e.at_ms) + ' ', el('a', { href: pathHref(e.from, e.host) }, e.from + ' → ' + e.host), ': ' + describe(e)))));
}

// ---- Routing ----------------------------------------------------------------

async function route() {
  if (liveSource) { liveSource.close(); liveSource = null; }
  const [path, query] = (location.hash.slice(1) || '/grid').split('?');
  const name = path.replace(/^\//, '') || 'grid';
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  setStatus('loading…');
  const page = el('div', { class: 'page' });
  main.replaceChildren(page);
  current = page;
  try {
    if (name === 'path') await showPath(new URLSearchParams(query));
    else if (name === 'routes') await showRoutes();
    else if (name === 'map') await showMap();
    else if (name === 'transfers') showTransfers();
    else if (name === 'events') await showEvents();
    else await showGrid();
    if (name !== 'transfers') setStatus('updated ' + new Date().toLocaleTimeString());
  } catch (e) {
    page.replaceChildren(el('h1', {}, 'Cannot show this view'), el('p', {}, e.message));
    setStatus('error');
  }
  main.focus({ preventScroll: true });
}

window.addEventListener('hashchange', route);
route();
