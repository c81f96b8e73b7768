// The server against hostile clients, over raw sockets (node:net): request smuggling shapes (two
// Content-Length headers, Content-Length with Transfer-Encoding) get one 400 and the connection closed;
// JSON is strict (trailing data, invalid UTF-8, NUL -> 400); with an API key, authentication comes before
// routing; 1000 idle connections plus 100 slowloris ones do not keep a normal request from an answer
// within a second; an idle connection is closed by the server.
// Usage: GEN_URL=http://127.0.0.1:PORT API_KEY=... node test_hardening.mjs
import net from 'node:net';

const url = new URL(process.env.GEN_URL);
const host = url.hostname, port = Number(url.port), key = process.env.API_KEY;
let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Sends raw bytes, reads until the server closes (or timeout ms); returns the whole response as a string.
function raw(bytes, timeout = 5000) {
  return new Promise((resolve) => {
    const s = net.connect(port, host);
    const chunks = [];
    const done = () => { clearTimeout(t); s.destroy(); resolve(Buffer.concat(chunks).toString('latin1')); };
    const t = setTimeout(done, timeout);
    s.on('data', (d) => chunks.push(d));
    s.on('end', done);
    s.on('error', done);
    s.write(bytes);
  });
}
const statusLines = (r) => (r.match(/HTTP\/1\.[01] \d{3}/g) || []);
const post = (path, body, extra = '') => {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${b.length}\r\nConnection: close\r\n${extra}\r\n`), b]);
};
const req = '{"prompt":"Once","max_tokens":2}';

// ---- framing ----
{
  const smuggled = 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n';
  const body = req + smuggled;
  const r = await raw(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    `Content-Length: ${req.length}\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  check('two Content-Length headers: 400', /^HTTP\/1\.1 400/.test(r), r.slice(0, 80));
  check('two Content-Length headers: exactly one status line', statusLines(r).length === 1, String(statusLines(r)));
}
{
  const chunked = `${req.length.toString(16)}\r\n${req}\r\n0\r\n\r\n`;
  const r = await raw(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    `Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}GET /health HTTP/1.1\r\nHost: x\r\n\r\n`);
  check('Content-Length with Transfer-Encoding: 400', /^HTTP\/1\.1 400/.test(r), r.slice(0, 80));
  check('Content-Length with Transfer-Encoding: exactly one status line', statusLines(r).length === 1, String(statusLines(r)));
}

// ---- strict JSON ----
for (const [name, body, want] of [
  ['trailing garbage', `${req} xyz`, 'after its JSON'],
  ['two JSON values', `${req}{}`, 'after its JSON'],
  ['invalid UTF-8', Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from([0xc3, 0x28]), Buffer.from('","max_tokens":2}')]), 'UTF-8'],
  ['embedded NUL', Buffer.concat([Buffer.from('{"prompt":"a'), Buffer.from([0]), Buffer.from('b","max_tokens":2}')]), 'NUL'],
]) {
  const r = await raw(post('/v1/completions', body));
  check(`JSON ${name}: 400 naming the fault`, /^HTTP\/1\.1 400/.test(r) && r.includes(want), r.slice(0, 60) + ' ... ' + r.slice(-120));
}
{
  const r = await raw(post('/v1/completions', `${req}\n\t `));
  check('trailing whitespace is fine', /^HTTP\/1\.1 200/.test(r), r.slice(0, 80));
}

// ---- authentication before routing ----
{
  const r = await raw('GET /no/such/path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  check('unknown path without the key: 401', /^HTTP\/1\.1 401/.test(r), r.slice(0, 60));
  const r2 = await raw(`GET /no/such/path HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`);
  check('unknown path with the key: 404', /^HTTP\/1\.1 404/.test(r2), r2.slice(0, 60));
  const r3 = await raw('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  check('/health needs no key', /^HTTP\/1\.1 200/.test(r3), r3.slice(0, 60));
}

// ---- idle and slow connections ----
{
  const socks = [];
  const open = () => new Promise((resolve) => {
    const s = net.connect(port, host, () => resolve(s));
    s.on('error', () => resolve(s));
    socks.push(s);
  });
  for (let i = 0; i < 1000; i += 50) await Promise.all(Array.from({ length: 50 }, open));   // idle: never send a byte
  const slow = [];
  for (let i = 0; i < 100; i++) {   // slowloris: headers a few bytes at a time, never finished
    const s = await open();
    s.write('GET /health HTTP/1.1\r\nHost: x\r\n');
    slow.push(s);
  }
  const drip = setInterval(() => { for (const s of slow) if (!s.destroyed) s.write('X-a: b\r\n'); }, 1000);
  let worst = 0, answered = 0;
  for (let i = 0; i < 8; i++) {
    const t0 = performance.now();
    const r = await raw('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 3000);
    const dt = performance.now() - t0;
    worst = Math.max(worst, dt);
    if (/^HTTP\/1\.1 200/.test(r)) answered++;
    await sleep(500);
  }
  check(`1000 idle + 100 slowloris connections: normal requests answered (${answered}/8, worst ${worst.toFixed(0)} ms)`,
        answered === 8 && worst < 2500);   // a server held up by them waits for their ~10 s timeouts; 2.5 s leaves room
                                           // for the ASan build with another test beside it (1.25 s seen)
  clearInterval(drip);
  for (const s of socks) s.destroy();
}
{
  const s = net.connect(port, host);
  let closed = false;
  s.on('close', () => { closed = true; });
  s.on('error', () => {});
  await sleep(13000);
  check('an idle connection is closed by the server within ~10 s', closed);
  s.destroy();
}

console.log(failed ? `${failed} hardening check(s) failed` : 'all hardening checks passed');
process.exit(failed ? 1 : 0);
