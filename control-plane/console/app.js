// paygate console: a small single-page app over paygate's own APIs. The organisation's API
// key (and the operator's admin token) live in sessionStorage and travel only as bearer
// tokens; data is written into the page as text, never as markup.
'use strict';

const KEY = 'paygate.key';
const ADMIN = 'paygate.admin';
const state = { org: null };
const main = () => document.getElementById('main');

// ---- DOM helpers -------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const svg = (tag, attrs) => {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
};

function field(label, input, hint) {
  return el('label', {}, label, input, hint ? el('span', { class: 'hint', text: hint }) : null);
}

function show(...nodes) {
  const m = main();
  m.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
  m.focus();
}

// A message shown now and kept through the next page change (an action that navigates).
let flash = '';
function say(text) {
  flash = text;
  document.getElementById('status').textContent = text;
}

function badge(word) {
  return el('span', { class: `badge ${word}`, text: word });
}

function table(headers, rows) {
  return el('div', { class: 'table-wrap' },
    el('table', {},
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col', class: h.num ? 'num' : null, text: h.label || h })))),
      el('tbody', {}, rows)));
}

function facts(pairs) {
  return el('dl', { class: 'facts' }, pairs.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v ?? '—')]));
}

function errorBox(e) {
  const box = el('div', { class: 'error', role: 'alert' },
    el('code', { text: e.code || 'ERROR' }), ' ', e.message || String(e));
  if (Array.isArray(e.details) && e.details.length) {
    box.append(el('ul', {}, e.details.map((d) => el('li', {}, el('code', { text: d.field }), ': ', d.problem))));
  }
  if (e.requestId) box.append(el('div', { class: 'hint', text: `request ${e.requestId}` }));
  return box;
}

// ---- API ---------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    Object.assign(this, body || {}, { status });
  }
}

async function api(method, path, body, opts = {}) {
  const token = sessionStorage.getItem(opts.admin ? ADMIN : KEY);
  const headers = Object.assign({}, opts.headers);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (opts.raw) return r;
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

// A form whose submit runs `action`; problems appear in the form, the button waits.
function form(cls, controls, label, action) {
  const out = el('div', { class: 'form-errors' });
  const button = el('button', { type: 'submit', text: label });
  const f = el('form', { class: cls }, controls, button, out);
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    out.replaceChildren();
    button.disabled = true;
    try {
      await action(new FormData(f), f);
    } catch (e) {
      out.replaceChildren(errorBox(e));
    } finally {
      button.disabled = false;
    }
  });
  return f;
}

const input = (name, attrs) => el('input', Object.assign({ name, id: `f-${name}` }, attrs));
const select = (name, options, value) =>
  el('select', { name, id: `f-${name}` }, options.map(([v, t]) => el('option', { value: v, selected: v === value, text: t })));

// ---- charts ------------------------------------------------------------------------------

function barChart(title, points, value, format) {
  const values = points.map(value);
  const total = values.reduce((a, b) => a + b, 0);
  const max = Math.max(...values, 0) || 1;
  const w = 100 / Math.max(points.length, 1);
  const s = svg('svg', { viewBox: '0 0 100 50', preserveAspectRatio: 'none', role: 'img',
    'aria-label': `${title}: ${format(total)} in all` });
  points.forEach((p, i) => {
    const h = (values[i] / max) * 48;
    const r = svg('rect', { x: i * w + w * 0.1, y: 50 - h, width: w * 0.8, height: Math.max(h, 0), 'data-value': values[i] });
    const t = svg('title', {});
    t.textContent = `${p.start}: ${format(values[i])}`;
    r.append(t);
    s.append(r);
  });
  const fig = el('figure', { class: 'chart', 'data-chart': title, 'data-total': total },
    el('figcaption', {}, el('strong', { text: title }), ` ${format(total)}`));
  fig.append(s);
  return fig;
}

const usdc = (n) => `${n.toFixed(6)} USDC`;

// ---- pages -------------------------------------------------------------------------------

function signIn() {
  show(el('h1', { text: 'Sign in' }),
    el('p', { text: 'Sign in with your organisation API key. It is kept in this tab only (session storage) and sent to paygate as a bearer token.' }),
    form('stack', [field('Organisation API key', input('apiKey', { type: 'password', autocomplete: 'off', required: true }))], 'Sign in',
      async (d) => {
        sessionStorage.setItem(KEY, d.get('apiKey').trim());
        try {
          state.org = await api('GET', '/api/org');
        } catch (e) {
          sessionStorage.removeItem(KEY);
          throw e;
        }
        location.hash = '#/overview';
        route();
      }),
    el('p', {}, el('a', { href: '#/operator', text: 'Operator sign in (admin token)' })));
}

async function overview(params) {
  const win = params.get('window') || '24h';
  const [m, usage] = await Promise.all([api('GET', `/api/gateway/metrics?window=${win}`), api('GET', '/api/usage')]);
  const points = m.series.points;
  const mm = m.metrics;
  const pick = select('window', [['24h', 'Last 24 hours'], ['7d', 'Last 7 days']], win);
  pick.addEventListener('change', () => { location.hash = `#/overview?window=${pick.value}`; });
  const limit = usage.monthlyLimit;
  const windowField = field('Window', pick);
  windowField.classList.add('narrow');
  show(el('h1', { text: `Overview: ${state.org.name || state.org.slug}` }),
    windowField,
    el('div', { class: 'tiles' },
      tile('Revenue (net of refunds)', `${mm.revenueUSDC} USDC`, 'revenue'),
      tile('Refunded', `${mm.refundedUSDC} USDC`, 'refunded'),
      tile('Requests', mm.totalRequests, 'requests'),
      tile('Paid', mm.paid, 'paid'),
      tile('Errors', mm.errors, 'errors')),
    el('div', { class: 'charts' },
      barChart('Revenue', points, (p) => Number(p.revenueUSDC), usdc),
      barChart('Requests', points, (p) => p.requests, (n) => `${n} requests`)),
    el('h2', { text: 'Facilitator' }),
    facts([['Status', badge(m.facilitator.status)], ['Latency', `${m.facilitator.latencyMs} ms`],
      ['Facilitator', m.facilitator.facilitatorUrl], ['Checked', m.facilitator.checkedAt]]),
    // A network with several facilitators: which answers and which has been settling.
    (m.facilitator.facilitators || []).length ? table(['Network', 'Facilitator', 'Fee (USD)', 'Answering', { label: 'Settled', num: 1 }],
      m.facilitator.facilitators.map((f) => el('tr', { 'data-facilitator': f.url }, el('td', { text: f.network }), el('td', { class: 'mono', text: f.url }),
        el('td', { text: f.fee || '—' }), el('td', {}, badge(f.healthy ? 'up' : 'down')), el('td', { class: 'num', text: f.settled })))) : null,
    el('h2', { text: 'Plan usage' }),
    el('p', {}, `${usage.plan} plan: ${usage.usedThisMonth} paid requests this month`,
      limit ? ` of ${limit} (${usage.remaining} left)` : ' (unlimited)', `; resets ${usage.resetsAt}.`),
    limit ? el('progress', { max: limit, value: usage.usedThisMonth, 'aria-label': 'Plan usage this month' }) : null,
    el('h2', { text: 'Routes' }),
    table(['Path', { label: 'Requests', num: 1 }, { label: 'Paid', num: 1 }, { label: 'Revenue, net (USDC)', num: 1 }, { label: 'Refunded (USDC)', num: 1 }, { label: 'Settle p50 / p99 (ms)', num: 1 }],
      m.routes.map((r) => el('tr', {},
        el('td', {}, r.path ? el('a', { href: `#/routes/${r.routeId}`, text: r.path }) : `${r.routeId} (deleted)`),
        el('td', { class: 'num', text: r.requests }), el('td', { class: 'num', text: r.paid }),
        el('td', { class: 'num', text: r.revenueUSDC }), el('td', { class: 'num', text: r.refundedUSDC }),
        el('td', { class: 'num', text: `${r.settleP50Ms ?? '—'} / ${r.settleP99Ms ?? '—'}` })))));
}

function tile(k, v, name) {
  return el('div', { class: 'tile', 'data-tile': name }, el('div', { class: 'k', text: k }), el('div', { class: 'v', text: v }));
}

async function routes() {
  const list = await api('GET', '/api/routes');
  show(el('h1', { text: 'Routes' }),
    table(['Path', { label: 'Price (USD)', num: 1 }, 'Network', 'Active', 'Description'],
      list.map((r) => el('tr', {},
        el('td', {}, el('a', { href: `#/routes/${r.id}`, text: r.path })),
        el('td', { class: 'num', text: r.priceUSD }), el('td', { text: r.network }),
        el('td', { text: r.active ? 'yes' : 'no' }), el('td', { text: r.description })))),
    el('h2', { text: 'New route' }),
    form('stack', [
      field('Path', input('path', { required: true, placeholder: '/weather' }), `served at /gateway/${state.org.slug}/…`),
      field('Price (USD)', input('priceUSD', { required: true, inputmode: 'decimal', placeholder: '0.01' })),
      field('Upstream URL', input('targetUrl', { required: true, type: 'url', placeholder: 'https://api.example.com/weather' })),
      field('Network', input('network', { required: true, value: 'base-sepolia' })),
      field('Description', input('description', {})),
      el('label', { class: 'check' }, input('streaming', { type: 'checkbox' }), 'Streaming'),
    ], 'Create route', async (d) => {
      const body = { path: d.get('path'), priceUSD: Number(d.get('priceUSD')), targetUrl: d.get('targetUrl'),
        network: d.get('network'), description: d.get('description'), streaming: d.get('streaming') === 'on' };
      const r = await api('POST', '/api/routes', body, { headers: { 'Idempotency-Key': crypto.randomUUID() } });
      say(`Route ${r.path} created.`);
      location.hash = `#/routes/${r.id}`;
    }));
}

async function routeDetail(id) {
  const r = await api('GET', `/api/routes/${encodeURIComponent(id)}`);
  const url = `${location.origin}/gateway/${state.org.slug}${r.path}`;
  const challenge = await fetch(`/gateway/${state.org.slug}${r.path}`);
  const header = challenge.headers.get('payment-required');
  let decoded = null;
  try { decoded = header ? JSON.parse(atob(header)) : null; } catch (_) { decoded = null; }
  const body = await challenge.text();
  show(el('h1', { text: `Route ${r.path}` }),
    facts([['Id', r.id], ['URL', url], ['Upstream', r.targetUrl], ['Network', r.network],
      ['Price', `$${r.priceUSD}${r.pricing === 'usage' ? ' at most (the origin states each charge)' : ''}`],
      ['Paid in', r.token], ['Schemes', (r.schemes || []).join(', ')],
      ['Active', r.active ? 'yes' : 'no'], ['Streaming', r.streaming ? 'yes' : 'no'],
      ['Access window', r.accessWindowSeconds === null ? 'none: every call is paid'
        : el('a', { href: '#/windows', text: `${r.accessWindowSeconds} s after a payment${r.accessWindowCalls === null ? '' : `, ${r.accessWindowCalls} calls`}, by signing in` })]]),
    el('h2', { text: 'Edit' }),
    form('stack', [
      field('Price (USD)', input('priceUSD', { required: true, value: r.priceUSD, inputmode: 'decimal' })),
      field('Description', input('description', { value: r.description })),
      el('label', { class: 'check' }, input('active', { type: 'checkbox', checked: r.active }), 'Active'),
    ], 'Save', async (d) => {
      await api('PATCH', `/api/routes/${encodeURIComponent(id)}`,
        { priceUSD: Number(d.get('priceUSD')), description: d.get('description'), active: d.get('active') === 'on' });
      say('Route saved.');
      route();
    }),
    el('h2', { text: 'Its 402 challenge' }),
    el('p', {}, `GET ${url} answers `, el('strong', { id: 'challenge-status', text: challenge.status }), ' without a payment.'),
    el('pre', { id: 'challenge-body', text: pretty(body) }),
    decoded ? el('details', {}, el('summary', { text: 'PAYMENT-REQUIRED header (decoded)' }), el('pre', { text: JSON.stringify(decoded, null, 2) })) : null,
    el('h2', { text: 'Try it' }),
    snippet('curl', `curl -i ${url}`),
    snippet('x402 Python client', [
      'import asyncio',
      'from eth_account import Account',
      'from x402 import x402Client',
      'from x402.http.clients import x402HttpxClient',
      'from x402.mechanisms.evm.exact import register_exact_evm_client',
      'from x402.mechanisms.evm.signers import EthAccountSigner',
      '',
      'async def main():',
      '    client = x402Client()',
      '    register_exact_evm_client(client, EthAccountSigner(Account.from_key("0xYOUR_KEY")))',
      '    async with x402HttpxClient(client) as http:',
      `        r = await http.get("${url}")`,
      '        print(r.status_code, r.headers.get("payment-response"), r.text)',
      '',
      'asyncio.run(main())'].join('\n')),
    snippet('MCP (the route is one of your tools, paid from your payer wallet)', JSON.stringify(
      { mcpServers: { paygate: { url: `${location.origin}/mcp`, headers: { Authorization: 'Bearer YOUR_API_KEY' } } } }, null, 2)),
    el('p', {}, el('button', { type: 'button', class: 'danger', onclick: async () => {
      if (!confirm(`Delete ${r.path}?`)) return;
      await api('DELETE', `/api/routes/${encodeURIComponent(id)}`);
      say('Route deleted.');
      location.hash = '#/routes';
    }, text: 'Delete route' })));
}

function pretty(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
}

function snippet(title, code) {
  return el('section', {}, el('h3', { text: title }), el('pre', { class: 'mono', text: code }));
}

async function payments(params) {
  const routesList = await api('GET', '/api/routes');
  const q = new URLSearchParams();
  for (const k of ['route', 'status', 'payer', 'from', 'to', 'cursor']) if (params.get(k)) q.set(k, params.get(k));
  const page = await api('GET', `/api/payments?${q}`);
  const paths = Object.fromEntries(routesList.map((r) => [r.id, r.path]));
  const filters = form('inline', [
    field('Route', select('route', [['', 'Any route'], ...routesList.map((r) => [r.id, r.path])], params.get('route') || '')),
    field('Status', select('status', [['', 'Any status'], ['SETTLED', 'Settled'], ['FAILED', 'Failed'], ['RESERVED', 'Reserved'], ['UNKNOWN', 'Unknown']], params.get('status') || '')),
    field('Payer', input('payer', { value: params.get('payer') || '', placeholder: '0x…', size: 20 })),
    field('From', input('from', { type: 'datetime-local', value: local(params.get('from')) })),
    field('To', input('to', { type: 'datetime-local', value: local(params.get('to')) })),
  ], 'Filter', async (d) => {
    const n = new URLSearchParams();
    for (const k of ['route', 'status', 'payer']) if (d.get(k)) n.set(k, d.get(k));
    for (const k of ['from', 'to']) if (d.get(k)) n.set(k, new Date(d.get(k)).toISOString());
    location.hash = `#/payments?${n}`;
  });
  const next = page.nextCursor ? (() => { const n = new URLSearchParams(q); n.set('cursor', page.nextCursor); return n; })() : null;
  show(el('h1', { text: 'Payments' }), filters,
    table(['Time', 'Route', 'Payer', { label: 'Amount (USDC)', num: 1 }, 'Protocol', 'Status', 'Transaction'],
      page.payments.map((p) => el('tr', { 'data-payment': p.id },
        el('td', {}, el('a', { href: `#/payments/${p.id}`, text: p.createdAt })),
        el('td', { text: p.routePath || paths[p.routeId] || p.routeId }),
        el('td', { class: 'mono', text: short(p.payer) }),
        el('td', { class: 'num', text: p.amountUSDC }),
        el('td', { text: p.protocol }),
        el('td', {}, badge(p.status)),
        el('td', {}, p.explorerUrl ? el('a', { href: p.explorerUrl, rel: 'noopener noreferrer', target: '_blank', text: short(p.transaction) }) : short(p.transaction))))),
    page.payments.length ? null : el('p', { text: 'No payments match.' }),
    el('div', { class: 'row' },
      next ? el('a', { href: `#/payments?${next}`, text: 'Next page' }) : null,
      el('button', { type: 'button', class: 'secondary', text: 'Export CSV', onclick: () => exportCsv(q) })));
}

function local(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
}

const short = (s) => (s && s.length > 14 ? `${s.slice(0, 8)}…${s.slice(-4)}` : s || '—');

async function exportCsv(q) {
  const n = new URLSearchParams(q);
  n.delete('cursor');
  n.set('format', 'csv');
  const r = await api('GET', `/api/payments?${n}`, undefined, { raw: true });
  const blob = await r.blob();
  const a = el('a', { href: URL.createObjectURL(blob), download: 'payments.csv' });
  document.body.append(a);
  a.click();
  a.remove();
  say('Payments exported as payments.csv.');
}

// USDC base units (a decimal string) as dollars, exactly.
function usd(base) {
  const s = String(base || '0').padStart(7, '0');
  const whole = s.slice(0, -6).replace(/^0+(?=\d)/, '');
  const frac = s.slice(-6).replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : whole;
}

async function channels() {
  let list;
  try {
    list = (await api('GET', '/api/channels')).channels;
  } catch (e) {
    if (e.status !== 503) throw e;
    return show(el('h1', { text: 'Payment channels' }), el('p', { text: 'This deployment does not offer payment channels.' }));
  }
  const money = (v) => el('td', { class: 'num', text: usd(v) });
  show(el('h1', { text: 'Payment channels' }),
    el('p', { class: 'hint', text: 'Agents paying by signed voucher over one deposit (x402 batch-settlement). Charges are claimed on chain in batches; Claim now claims every unclaimed charge at once; Refund claims what was charged and returns the rest to the payer.' }),
    table(['Payer', 'Status', { label: 'Deposited (USD)', num: 1 }, { label: 'Charged', num: 1 }, { label: 'Claimed', num: 1 },
      { label: 'Unclaimed', num: 1 }, { label: 'Refunded', num: 1 }, { label: 'Balance', num: 1 }, { label: 'Requests', num: 1 }, ''],
    list.map((c) => el('tr', { 'data-channel': c.id },
      el('td', { class: 'mono', text: short(c.payer), title: c.id }),
      el('td', {}, badge(c.status)),
      money(c.deposited), money(c.charged), money(c.claimed), money(c.unclaimed), money(c.refunded), money(c.balance),
      el('td', { class: 'num', text: c.requests }),
      el('td', {}, el('button', { type: 'button', class: 'secondary', text: 'Refund', 'aria-label': `Refund channel ${short(c.id)}`, onclick: async (ev) => {
        try {
          const r = await api('POST', `/api/channels/${encodeURIComponent(c.id)}/refund`, undefined, { headers: { 'Idempotency-Key': crypto.randomUUID() } });
          say(`Refunded $${usd(r.refundedAmount)} to ${short(c.payer)}.`);
          route();
        } catch (e) { ev.target.after(errorBox(e)); }
      } }))))),
    list.length ? null : el('p', { text: 'No payment channels yet.' }),
    form('inline', [], 'Claim now', async () => {
      const r = await api('POST', '/api/channels/claim');
      say(`${r.claimedChannels} channel(s) claimed.`);
      await route();
    }));
}

async function windows(params) {
  const routesList = await api('GET', '/api/routes');
  const payer = params.get('payer') || '';
  const list = (await api('GET', `/api/access-windows${payer ? `?payer=${encodeURIComponent(payer)}` : ''}`)).windows;
  const paths = Object.fromEntries(routesList.map((r) => [r.id, r.path]));
  const filters = form('inline', [
    field('Payer', input('payer', { value: payer, placeholder: '0x…', size: 20 })),
  ], 'Show', async (d) => {
    location.hash = d.get('payer') ? `#/windows?payer=${encodeURIComponent(d.get('payer'))}` : '#/windows';
  });
  show(el('h1', { text: 'Access windows' }),
    el('p', { class: 'hint', text: 'Payers who paid for a route with an access window and may call it again by signing in (x402 sign-in-with-x) until the window ends or its calls are used.' }),
    filters,
    table(['Payer', 'Route', 'Opened by', 'Ends', { label: 'Calls used', num: 1 }, { label: 'Calls left', num: 1 }],
      list.map((w) => el('tr', { 'data-window': `${w.routeId}:${w.payer}` },
        el('td', { class: 'mono', text: w.payer }),
        el('td', { text: paths[w.routeId] || w.routeId }),
        el('td', {}, el('a', { href: `#/payments/${w.paymentId}`, text: short(w.paymentId) })),
        el('td', { text: w.expiresAt }),
        el('td', { class: 'num', text: w.callsUsed }),
        el('td', { class: 'num', text: w.callsLeft === null ? 'any' : w.callsLeft })))),
    list.length ? null : el('p', { text: payer ? 'This payer has no active access window.' : 'No active access windows.' }));
}

async function webhooks() {
  const list = await api('GET', '/api/webhooks');
  const events = ['payment.settled', 'payment.refunded', 'channel.claimed', 'payout.updated', 'route.changed'];
  const shown = el('div', { id: 'secret-shown' });
  // The page shown now (it may have been drawn again since).
  const reveal = (r, what) => document.getElementById('secret-shown').replaceChildren(el('p', { role: 'status' },
    `${what} Its signing secret, shown this once: `, el('code', { class: 'mono', 'data-secret': r.secret, text: r.secret })));
  show(el('h1', { text: 'Webhooks' }),
    el('p', { class: 'hint', text: 'Endpoints that receive this organisation\'s events, signed as Standard Webhooks signs (webhook-id, webhook-timestamp, webhook-signature), retried for about three days, in order per object.' }),
    shown,
    table(['Endpoint', 'Events', { label: 'Signing secrets', num: 1 }, 'Created', ''],
      list.map((e) => el('tr', { 'data-endpoint': e.id },
        el('td', {}, el('a', { href: `#/webhooks/${e.id}`, text: e.url })),
        el('td', { text: e.events.join(', ') }),
        el('td', { class: 'num', text: e.signingSecrets }),
        el('td', { text: e.createdAt }),
        el('td', {},
          el('button', { type: 'button', class: 'secondary', text: 'Rotate secret', 'aria-label': `Rotate the secret of ${e.url}`, onclick: async (ev) => {
            try { reveal(await api('POST', `/api/webhooks/${encodeURIComponent(e.id)}/rotate-secret`), 'Rotated: the previous secret signs beside it for a day.'); } catch (err) { ev.target.after(errorBox(err)); }
          } }),
          el('button', { type: 'button', class: 'secondary', text: 'Delete', 'aria-label': `Delete ${e.url}`, onclick: async (ev) => {
            try { await api('DELETE', `/api/webhooks/${encodeURIComponent(e.id)}`); say('Endpoint deleted.'); route(); } catch (err) { ev.target.after(errorBox(err)); }
          } }))))),
    list.length ? null : el('p', { text: 'No webhook endpoints yet.' }),
    el('h2', { text: 'Add an endpoint' }),
    form('stack', [
      field('URL', input('url', { type: 'url', required: true, placeholder: 'https://seller.example/hooks/paygate' })),
      el('fieldset', {}, el('legend', { text: 'Events' }),
        events.map((t) => el('label', { class: 'check' }, el('input', { type: 'checkbox', name: 'events', value: t, checked: true }), t))),
    ], 'Add endpoint', async (d) => {
      const r = await api('POST', '/api/webhooks', { url: d.get('url'), events: d.getAll('events') });
      await webhooks();
      reveal(r, `Endpoint ${r.url} added.`);
    }));
}

async function webhookDeliveries(id) {
  const log = (await api('GET', `/api/webhooks/${encodeURIComponent(id)}/deliveries`)).deliveries;
  const attempts = (d) => el('details', {}, el('summary', { text: `${d.attempts} attempt(s)` }),
    el('ul', {}, d.history.map((a) => el('li', { text: `${a.at}: ${a.status === null ? 'no answer' : a.status}${a.error ? ` (${a.error})` : ''}, ${a.durationMs} ms` }))));
  show(el('h1', { text: 'Webhook deliveries' }),
    el('p', {}, el('a', { href: '#/webhooks', text: 'All endpoints' })),
    table(['Event', 'Type', 'Object', 'Status', 'Attempts', 'Next attempt', ''],
      log.map((d) => el('tr', { 'data-delivery': d.id },
        el('td', { class: 'mono', text: short(d.eventId) }),
        el('td', { text: d.eventType }),
        el('td', { class: 'mono', text: short(d.objectId) }),
        el('td', {}, badge(d.status)),
        el('td', {}, attempts(d)),
        el('td', { text: d.nextAttemptAt || '—' }),
        el('td', {}, el('button', { type: 'button', class: 'secondary', text: 'Replay', 'aria-label': `Replay ${d.eventType} ${short(d.eventId)}`, onclick: async (ev) => {
          try { await api('POST', `/api/webhooks/${encodeURIComponent(id)}/deliveries/${encodeURIComponent(d.id)}/replay`); say('Queued again.'); route(); } catch (err) { ev.target.after(errorBox(err)); }
        } }))))),
    log.length ? null : el('p', { text: 'Nothing delivered to this endpoint yet.' }));
}

async function auditLog(params) {
  const q = new URLSearchParams();
  if (params.get('cursor')) q.set('cursor', params.get('cursor'));
  const page = await api('GET', `/api/audit?${q}`);
  const change = (e) => {
    if (!e.before && !e.after) return '—';
    return el('details', {}, el('summary', { text: e.before && e.after ? 'before / after' : (e.after ? 'after' : 'before') }),
      el('pre', { text: JSON.stringify({ before: e.before, after: e.after }, null, 2) }));
  };
  show(el('h1', { text: 'Audit log' }),
    el('p', { class: 'hint', text: 'Every change to this organisation: routes, keys, corridors, payouts and what the operator changed, with who made it and from where.' }),
    table(['Time', 'Who', 'Action', 'Object', 'From', 'Change'],
      page.entries.map((e) => el('tr', { 'data-audit': e.action },
        el('td', { text: e.at }), el('td', { class: 'mono', text: e.actor }), el('td', { text: e.action }),
        el('td', { class: 'mono', text: short(e.target) }), el('td', { text: e.from || '—' }), el('td', {}, change(e))))),
    page.entries.length ? null : el('p', { text: 'No changes recorded yet.' }),
    page.nextCursor ? el('a', { href: `#/audit?cursor=${encodeURIComponent(page.nextCursor)}`, text: 'Older' }) : null);
}

// The ledger compared with the chain (`GET /api/ledger/audit`, `paygate audit`): for a time
// range (open ends: everything), each decided payment read back on chain; every difference listed.
async function ledgerCheck(params) {
  const from = params.get('from') || '';
  const to = params.get('to') || '';
  const iso = (v) => (v ? new Date(v).toISOString() : '');
  const filters = form('inline', [
    field('From', input('from', { type: 'datetime-local', value: from })),
    field('To', input('to', { type: 'datetime-local', value: to })),
  ], 'Compare with the chain', async (d) => {
    const q = new URLSearchParams();
    if (d.get('from')) q.set('from', d.get('from'));
    if (d.get('to')) q.set('to', d.get('to'));
    q.set('run', '1');
    location.hash = `#/ledger-check?${q}`;
  });
  const intro = el('p', { class: 'hint', text: 'Every payment this organisation\'s ledger decided (settled, captured, refunded, voided, failed), read back on chain: what the ledger says and what the chain says for each one that differs. Open payments are reconciliation\'s.' });
  if (!params.get('run')) return show(el('h1', { text: 'Ledger check' }), intro, filters);
  const q = new URLSearchParams();
  if (from) q.set('from', iso(from));
  if (to) q.set('to', iso(to));
  const a = await api('GET', `/api/ledger/audit?${q}`);
  const agree = a.differences.length === 0;
  show(el('h1', { text: 'Ledger check' }), intro, filters,
    el('p', { 'data-ledger-check': agree ? 'agree' : 'differ', class: agree ? null : 'error' },
      agree ? `The ledger and the chain agree on all ${a.checked} payments checked.`
        : `${a.differences.length} of ${a.checked} payments differ from the chain.`),
    facts([['Checked', a.checked], ['Open (left to reconciliation)', a.open], ['Not readable', a.unreadable.length ? a.unreadable.join(', ') : 'none']]),
    a.differences.length ? table(['Payment', 'Transfer', 'Ledger', 'Chain'],
      a.differences.map((x) => el('tr', { 'data-difference': x.paymentId },
        el('td', {}, el('a', { href: `#/payments/${x.paymentId}`, text: short(x.paymentId) })),
        el('td', { text: x.transfer }), el('td', { text: x.ledger }), el('td', { text: x.chain })))) : null);
}

async function paymentDetail(id) {
  const p = await api('GET', `/api/payments/${encodeURIComponent(id)}`);
  show(el('h1', { text: 'Payment' }),
    facts([['Id', p.id], ['Status', badge(p.status)], ['Route', p.routePath || p.routeId], ['Amount', `${p.amountUSDC} USDC`],
      ['Payer', p.payer], ['Paid to', p.payTo], ['Network', p.network], ['Protocol', p.protocol],
      ['Transaction', p.explorerUrl ? el('a', { href: p.explorerUrl, rel: 'noopener noreferrer', target: '_blank', id: 'tx-link', text: p.transaction }) : p.transaction],
      ['Verification', `${p.verifyMs} ms`], ['Settlement', p.settleMs === null ? '—' : `${p.settleMs} ms`],
      ['Upstream answered', p.upstreamStatus], ['Failure', p.failure], ['Taken', p.createdAt], ['Updated', p.updatedAt]]),
    p.receipt ? el('details', {}, el('summary', { text: 'Receipt' }), el('pre', { text: JSON.stringify(p.receipt, null, 2) })) : null,
    p.escrow ? escrowPart(p) : null,
    el('p', {}, el('a', { href: '#/payments', text: 'All payments' })));
}

// An auth-capture payment's escrow: what was captured and refunded, and a refund form while
// something is refundable before its deadline (one Idempotency-Key per form: confirming twice
// refunds once).
function escrowPart(p) {
  const e = p.escrow;
  const deadline = new Date(e.refundDeadline * 1000);
  const refundable = Number(e.capturedUSDC) - Number(e.refundedUSDC);
  const open = refundable > 0 && deadline > new Date() && p.status === 'SETTLED';
  const key = crypto.randomUUID();
  return el('section', { 'aria-label': 'Escrow' },
    el('h2', { text: 'Escrow (auth-capture)' }),
    facts([['Captured', `${e.capturedUSDC} USDC`], ['Refunded', `${e.refundedUSDC} USDC`],
      ['Refundable until', deadline.toISOString()], ['Refund in progress', e.pendingRefund ? `${e.pendingRefund.amountUSDC} USDC` : null],
      ['Reclaimed by the payer', e.reclaimedTransaction ? short(e.reclaimedTransaction) : null]]),
    e.refunds.length ? table(['Refund', { label: 'Amount (USDC)', num: 1 }, 'Transaction', 'Made'],
      e.refunds.map((r) => el('tr', { 'data-refund': r.id },
        el('td', { class: 'mono', text: short(r.id) }), el('td', { class: 'num', text: r.amountUSDC }),
        el('td', { class: 'mono', text: r.transaction ? short(r.transaction) : '—' }), el('td', { text: r.createdAt })))) : null,
    open ? form('inline', [
      field('Refund (USD)', input('amount', { inputmode: 'decimal', placeholder: refundable.toFixed(6) }), 'Empty: all that is refundable.'),
    ], 'Refund to payer', async (d) => {
      const amount = (d.get('amount') || '').trim();
      const r = await api('POST', `/api/payments/${encodeURIComponent(p.id)}/refund`, amount ? { amountUSDC: amount } : {},
        { headers: { 'Idempotency-Key': key } });
      say(`Refunded ${r.refund.amountUSDC} USDC to ${short(p.payer)}.`);
      await route();
    }) : null);
}

const CURRENCIES = [['BRL', 'BR'], ['MXN', 'MX'], ['NGN', 'NG'], ['KES', 'KE'], ['ZAR', 'ZA']];

// The payout wallet (GET /api/payout-wallet), or null when this server funds no payouts on chain.
async function payoutWallet() {
  try {
    return await api('GET', '/api/payout-wallet');
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

async function corridors() {
  const list = await api('GET', '/corridors');
  const wallet = await payoutWallet();
  show(el('h1', { text: 'Corridors' }),
    el('section', { id: 'payout-wallet', 'aria-label': 'Payout wallet' }, el('h2', { text: 'Payout wallet' }),
      wallet ? facts([['Address', wallet.address], ['Balance', `${wallet.usdcBalance} USDC`], ['Network', wallet.network]])
        : el('p', { text: 'Payouts move no USDC on this server (no payout wallet).' }),
      wallet ? el('p', { class: 'hint', text: 'Send USDC to this address; each payout takes what its provider receives from it, once.' }) : null),
    table(['Currency', 'Status', 'Created'],
      list.map((c) => el('tr', {}, el('td', {}, el('a', { href: `#/corridors/${c.id}`, text: c.destCurrency })),
        el('td', {}, badge(c.status)), el('td', { text: c.createdAt })))),
    list.length ? null : el('p', { text: 'No corridors yet.' }),
    el('h2', { text: 'New corridor' }),
    form('inline', [field('Currency', select('destCurrency', CURRENCIES.map(([c]) => [c, c]), 'BRL'))], 'Create corridor', async (d) => {
      const c = await api('POST', '/corridors', { destCurrency: d.get('destCurrency') });
      say(`Corridor to ${c.destCurrency} is ${c.status}.`);
      location.hash = `#/corridors/${c.id}`;
    }));
}

async function corridorDetail(id) {
  const c = await api('GET', `/corridors/${encodeURIComponent(id)}`);
  const page = await api('GET', `/corridors/${encodeURIComponent(id)}/payments`);
  const quoteArea = el('div', { id: 'quote' });
  const country = (CURRENCIES.find(([cur]) => cur === c.destCurrency) || [])[1];
  const wallet = await payoutWallet();
  show(el('h1', { text: `Corridor to ${c.destCurrency}` }),
    facts([['Id', c.id], ['Status', badge(c.status)], ['Created', c.createdAt]]),
    c.status === 'ACTIVE' ? el('section', {}, el('h2', { text: 'Pay out' }),
      form('inline', [field('Amount (USDC)', input('amount', { required: true, inputmode: 'decimal', placeholder: '100' }))], 'Get quote', async (d) => {
        const q = await api('GET', `/corridors/${encodeURIComponent(id)}/quote?amount=${encodeURIComponent(d.get('amount'))}`);
        quoteArea.replaceChildren(quoteView(c, q, country, wallet));
      }), quoteArea) : el('p', { text: 'Payouts open once the operator approves this corridor\'s KYC.' }),
    el('h2', { text: 'Payouts' }),
    table(['Created', { label: 'Amount (USDC)', num: 1 }, { label: 'Destination', num: 1 }, 'Beneficiary', 'Status'],
      page.payments.map((p) => el('tr', {},
        el('td', {}, el('a', { href: `#/corridors/${id}/payouts/${p.paymentId}`, text: p.createdAt })),
        el('td', { class: 'num', text: p.amountUSDC }), el('td', { class: 'num', text: `${p.destAmount} ${p.destCurrency}` }),
        el('td', { text: p.beneficiary.name }), el('td', {}, badge(p.status))))));
}

// The all-in breakdown before anything is paid (SPEC 1.7), then the payout form.
// Each country's identifiers beside the account number: [field, label, required].
const BENEFICIARY_EXTRA = {
  BRL: [['pixKey', 'PIX key (CPF, CNPJ, e-mail, +55 phone or random key), instead of an account number']],
  NGN: [['bankCode', 'Bank code (NUBAN, 3 or 6 digits)', true]],
  ZAR: [['branchCode', 'Branch code (6 digits)', true]],
  KES: [['mobileNumber', 'M-Pesa number, instead of an account number']],
};

function quoteView(c, q, country, wallet) {
  const key = `console-${q.quoteId}`;
  const extra = BENEFICIARY_EXTRA[c.destCurrency] || [];
  const alternative = c.destCurrency === 'BRL' || c.destCurrency === 'KES';
  return el('div', { class: 'cols' },
    el('section', { 'aria-label': 'Quote' }, el('h3', { text: 'Quote' }),
      facts([['You send', `${q.amount} USDC`], ['Platform fee', `${q.fees.platformFee} USDC (${q.fees.platformFeePercent} %)`],
        ['Rail fee', `${q.fees.railFee} USDC`], ['All fees', `${q.fees.total} USDC`], ['Rate', `1 USDC = ${q.fxRate} ${q.destCurrency}`],
        ['Beneficiary gets', el('strong', { id: 'dest-amount', text: `${q.destAmount} ${q.destCurrency}` })], ['Quote expires', q.expiresAt]])),
    el('section', {}, el('h3', { text: 'Beneficiary' }),
      form('stack', [
        field('From address (the USDC funding this payout)', input('fromAddress', wallet
          ? { required: true, value: wallet.address, readonly: true } : { required: true, placeholder: '0x…' })),
        field('Name', input('name', { required: true })),
        field('Bank', input('bankName', { required: true })),
        // A PIX key (BRL) or an M-Pesa number (KES) can stand in for the account number.
        field('Account number', input('accountNumber', { required: !alternative }),
          c.destCurrency === 'MXN' ? 'An 18-digit CLABE.' : c.destCurrency === 'NGN' ? 'A 10-digit NUBAN.' : undefined),
        ...extra.map(([name, label, required]) => field(label, input(name, { required: !!required }))),
        el('p', { class: 'hint', text: `Idempotency key ${key}: confirming twice makes one payout.` }),
      ], `Confirm payout of ${q.amount} USDC`, async (d) => {
        const beneficiary = { name: d.get('name'), bankName: d.get('bankName'), country, currency: c.destCurrency };
        for (const name of ['accountNumber', ...extra.map(([n]) => n)]) {
          const v = (d.get(name) || '').trim();
          if (v) beneficiary[name] = v;
        }
        const body = { quoteId: q.quoteId, fromAddress: d.get('fromAddress'), amountUSDC: q.amount, beneficiary };
        const r = await api('POST', `/corridors/${encodeURIComponent(c.id)}/pay`, body, { headers: { 'Idempotency-Key': key } });
        say(`Payout ${r.paymentId} accepted.`);
        location.hash = `#/corridors/${c.id}/payouts/${r.paymentId}`;
      })));
}

let poll = null;

async function payoutDetail(cid, pid) {
  const p = await api('GET', `/corridors/${encodeURIComponent(cid)}/payments/${encodeURIComponent(pid)}`);
  const steps = [el('li', {}, el('strong', { text: 'Accepted (PENDING)' }), ` ${p.createdAt}`)];
  for (const e of p.events) steps.push(el('li', {}, el('strong', { text: e.eventType }), ` ${e.providerStatus}, ${e.updateDate}`));
  show(el('h1', { text: 'Payout' }),
    facts([['Id', p.paymentId], ['Status', el('span', { id: 'payout-status' }, badge(p.status))], ['Amount', `${p.amountUSDC} USDC`],
      ['Destination', `${p.destAmount} ${p.destCurrency}`], ['Fees', `${p.fees.total} USDC`], ['Beneficiary', `${p.beneficiary.name}, ${p.beneficiary.bankName}`],
      ['From', p.fromAddress], ['Provider id', p.cpnPaymentId],
      ...(p.funding ? [['Funded on chain', `${p.funding.amount} USDC to ${p.funding.to}${p.funding.transaction ? ` (${p.funding.transaction})` : ''}`]] : []),
      ...(p.funding && p.funding.returned ? [['USDC returned', p.funding.returnedTransaction || 'yes (transaction not known)']] : []),
      ...(p.failureCode ? [['Failure', `${p.failureCode}: ${p.failureMessage}`]] : [])]),
    p.rfi ? rfiSection(cid, p) : null,
    // A payout still moving can be asked of the provider (its notifications may have been lost).
    (p.status === 'PENDING' || p.status === 'COMPLIANCE_HOLD') && p.cpnPaymentId
      ? form('inline', [], 'Ask the provider', async () => {
        await api('POST', `/corridors/${encodeURIComponent(cid)}/payments/${encodeURIComponent(p.paymentId)}/refresh`);
        route();
      }) : null,
    el('h2', { text: 'Status timeline' }), el('ol', { class: 'timeline' }, steps),
    el('p', {}, el('a', { href: `#/corridors/${cid}`, text: 'Back to the corridor' })));
  // Refreshed while it moves, except while the seller is answering a request for information.
  const answering = p.rfi && p.rfi.status === 'INFORMATION_REQUIRED';
  if ((p.status === 'PENDING' || p.status === 'COMPLIANCE_HOLD') && !answering) {
    const here = location.hash;
    poll = setTimeout(() => { if (location.hash === here) route(); }, 1000);
  }
}

// The provider's request for information: what it asks (its schema's fields), answered here;
// the answer is checked by paygate against the schema and sent encrypted to the provider.
function rfiSection(cid, p) {
  const r = p.rfi;
  const props = (r.schema && r.schema.properties) || {};
  const required = new Set((r.schema && r.schema.required) || []);
  const head = [el('h2', { text: 'Request for information' }),
    facts([['Status', el('span', { id: 'rfi-status' }, badge(r.status))], ['Level', r.level], ['Answered', r.answeredAt]])];
  if (r.status !== 'INFORMATION_REQUIRED') return el('section', { 'aria-label': 'Request for information' }, head);
  return el('section', { 'aria-label': 'Request for information' }, head,
    el('p', { text: 'The payout provider holds this payout until these questions are answered.' }),
    form('stack', Object.entries(props).map(([name, spec]) =>
      field(spec.description ? `${spec.description} (${name})` : name,
        input(name, { required: required.has(name), maxlength: spec.maxLength }))), 'Send answer', async (d) => {
      const answers = {};
      for (const name of Object.keys(props)) {
        const v = (d.get(name) || '').trim();
        if (v) answers[name] = v;
      }
      await api('POST', `/corridors/${encodeURIComponent(cid)}/payments/${encodeURIComponent(p.paymentId)}/rfi`, { answers });
      say('Answer sent to the payout provider.');
      route();
    }));
}

async function keys() {
  const list = await api('GET', '/api/keys');
  show(el('h1', { text: 'API keys' }),
    el('p', { class: 'hint', text: 'Rotate by creating a key, switching your clients to it, then revoking the old one. Both work in between.' }),
    el('p', { class: 'hint', text: 'A key\'s role is what it may do: read (reads only: the overview, the ledger), routes (and route changes), payouts (and corridors, payouts, channel claims and refunds), full (everything, keys included).' }),
    table(['Key id', 'Role', 'Created', 'Expires', 'Revoked', ''],
      list.map((k) => el('tr', { 'data-key': k.keyId }, el('td', { class: 'mono', text: k.keyId }), el('td', {}, badge(k.role)), el('td', { text: k.createdAt }),
        el('td', { text: k.expiresAt || 'never' }), el('td', { text: k.revokedAt || '—' }),
        el('td', {}, k.revokedAt ? null : el('button', { type: 'button', class: 'danger', text: 'Revoke', 'aria-label': `Revoke ${k.keyId}`, onclick: async (ev) => {
          try {
            await api('DELETE', `/api/keys/${encodeURIComponent(k.keyId)}`);
            say(`Key ${k.keyId} revoked.`);
            route();
          } catch (e) { ev.target.after(errorBox(e)); }
        } }))))),
    form('inline', [
      field('Role', select('role', [['full', 'Full'], ['read', 'Read only'], ['routes', 'Routes'], ['payouts', 'Payouts']], 'full')),
      field('Expires', input('expiresAt', { type: 'datetime-local' })),
    ], 'Create key', async (d) => {
      const body = { role: d.get('role') };
      if (d.get('expiresAt')) body.expiresAt = new Date(d.get('expiresAt')).toISOString();
      const k = await api('POST', '/api/keys', body);
      await route();
      say('Key created: copy it now, it is not shown again.');
      main().append(el('div', { class: 'tile' }, 'New key (shown once): ', el('code', { id: 'created-key', text: k.apiKey })));
    }));
}

async function operator() {
  if (!sessionStorage.getItem(ADMIN)) {
    show(el('h1', { text: 'Operator' }),
      form('stack', [field('Admin token', input('token', { type: 'password', autocomplete: 'off', required: true }))], 'Sign in as operator', async (d) => {
        sessionStorage.setItem(ADMIN, d.get('token'));
        try { await api('GET', '/admin/orgs', undefined, { admin: true }); } catch (e) { sessionStorage.removeItem(ADMIN); throw e; }
        route();
      }));
    return;
  }
  const orgs = await api('GET', '/admin/orgs', undefined, { admin: true });
  const list = Array.isArray(orgs) ? orgs : orgs.orgs || [];
  show(el('h1', { text: 'Operator' }),
    el('p', {}, el('button', { type: 'button', class: 'secondary', text: 'Sign out of operator view', onclick: () => { sessionStorage.removeItem(ADMIN); route(); } })),
    el('h2', { text: 'Organisations' }),
    table(['Slug', 'Plan', 'Payer wallet', 'State', ''],
      list.map((o) => el('tr', { 'data-org': o.slug }, el('td', { text: o.slug }), el('td', { text: o.plan }), el('td', { class: 'mono', text: o.payerWallet || '—' }),
        el('td', {}, o.suspended ? badge('suspended') : 'active'),
        el('td', {}, el('button', { type: 'button', class: o.suspended ? 'secondary' : 'danger', text: o.suspended ? 'Lift suspension' : 'Suspend',
          onclick: async () => {
            await api('PATCH', `/admin/orgs/${encodeURIComponent(o.slug)}`, { suspended: !o.suspended }, { admin: true });
            say(`${o.slug} ${o.suspended ? 'active again' : 'suspended'}.`);
            route();
          } }))))),
    el('h2', { text: 'Approve a corridor\'s KYC' }),
    form('inline', [field('Corridor id', input('corridor', { required: true, size: 40 }))], 'Approve KYC', async (d) => {
      const c = await api('POST', `/admin/corridors/${encodeURIComponent(d.get('corridor').trim())}/approve-kyc`, undefined, { admin: true });
      say(`Corridor ${c.id} is ${c.status}.`);
    }),
    el('h2', { text: 'Payer wallet (MCP tool calls)' }),
    form('stack', [field('Organisation slug', input('slug', { required: true })),
      field('Private key', input('privateKey', { type: 'password', autocomplete: 'off', required: true }), 'sealed at rest; never shown again')],
    'Set payer wallet', async (d, f) => {
      const o = await api('PUT', `/admin/orgs/${encodeURIComponent(d.get('slug'))}/payer-wallet`, { privateKey: d.get('privateKey') }, { admin: true });
      f.reset();
      say(`Payer wallet of ${o.slug}: ${o.payerWallet}.`);
      route();
    }));
}

// ---- routing -----------------------------------------------------------------------------

async function route() {
  clearTimeout(poll);
  document.getElementById('status').textContent = flash;
  flash = '';
  const [path, query] = (location.hash.slice(1) || '/overview').split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean);
  const signedIn = !!sessionStorage.getItem(KEY);
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('sign-out').hidden = !signedIn;
  for (const a of document.querySelectorAll('nav a')) {
    a.toggleAttribute('aria-current', a.getAttribute('href') === `#/${parts[0]}`);
    if (a.hasAttribute('aria-current')) a.setAttribute('aria-current', 'page');
  }
  try {
    if (parts[0] === 'operator') return await operator();
    if (!signedIn) return signIn();
    if (!state.org) state.org = await api('GET', '/api/org');
    document.getElementById('who').textContent = `Signed in as ${state.org.slug}`;
    const [page, id, sub, subId] = parts;
    if (page === 'routes' && id) return await routeDetail(id);
    if (page === 'routes') return await routes();
    if (page === 'payments' && id) return await paymentDetail(id);
    if (page === 'payments') return await payments(params);
    if (page === 'channels') return await channels();
    if (page === 'windows') return await windows(params);
    if (page === 'audit') return await auditLog(params);
    if (page === 'ledger-check') return await ledgerCheck(params);
    if (page === 'webhooks' && id) return await webhookDeliveries(id);
    if (page === 'webhooks') return await webhooks();
    if (page === 'corridors' && id && sub === 'payouts') return await payoutDetail(id, subId);
    if (page === 'corridors' && id) return await corridorDetail(id);
    if (page === 'corridors') return await corridors();
    if (page === 'keys') return await keys();
    return await overview(params);
  } catch (e) {
    if (e.status === 401 && !parts[0]?.startsWith('operator')) {
      sessionStorage.removeItem(KEY);
      state.org = null;
      say('Your key was refused; sign in again.');
      return signIn();
    }
    show(el('h1', { text: 'Something went wrong' }), errorBox(e));
  }
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('sign-out').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    state.org = null;
    document.getElementById('who').textContent = '';
    say('Signed out.');
    location.hash = '#/overview';
    route();
  });
  window.addEventListener('hashchange', route);
  route();
});
