// soak.mjs — a mixed load on one `hearth serve` for a while: WORKERS clients loop over plain and streamed chat and
// completions, structured output, tool calls, Anthropic and Ollama requests, streams cut off mid-reply and bad
// requests, while the server's memory (VmRSS) is sampled. Passes when every good request succeeds, every bad one
// is a 4xx, no 5xx appears, the server still answers, and memory stops growing (the last third's peak within
// SLACK_MIB of the first third's).
// Usage: HEARTH=... [SOAK_SECONDS=1800] [WORKERS=6] [SLACK_MIB=48] node soak.mjs
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

const secs = Number(process.env.SOAK_SECONDS || 1800), workers = Number(process.env.WORKERS || 6), slack = Number(process.env.SLACK_MIB || 48);
const srv = spawn(process.env.HEARTH, ['serve', '--host', '127.0.0.1', '--port', '0', '--parallel', '4', '-c', '1024', '-t', '1',
  '--cache-ram', '32'], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
srv.stderr.on('data', (d) => { log += d; if (log.length > 1e6) log = log.slice(-5e5); });
for (let i = 0; i < 200 && !/listening on/.test(log); i++) await new Promise((r) => setTimeout(r, 50));
const url = log.match(/listening on (http:\/\/[0-9.:]+)/)?.[1];
if (!url) { console.log('FAIL: the server did not start'); process.exit(1); }
const rss = () => Number(readFileSync(`/proc/${srv.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024;

const H = { 'Content-Type': 'application/json' };
const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['x'] } } }];
const messages = [{ role: 'user', content: 'Tell me a story.' }];
const GOOD = [
  ['/v1/chat/completions', { messages, max_tokens: 24 }],
  ['/v1/chat/completions', { messages, max_tokens: 24, stream: true }],
  ['/v1/completions', { prompt: 'Once upon a time', max_tokens: 24, logprobs: 2 }],
  ['/v1/chat/completions', { messages, max_tokens: 64, response_format: { type: 'json_schema', json_schema: { name: 's', schema: { type: 'object',
    properties: { a: { type: 'integer', minimum: 1, maximum: 5 }, b: { type: 'string', maxLength: 12 } }, required: ['a', 'b'] } } } }],
  ['/v1/chat/completions', { messages, max_tokens: 80, tools, tool_choice: 'required', parallel_tool_calls: false }],
  ['/v1/messages', { model: 'm', max_tokens: 24, messages }],
  ['/v1/messages', { model: 'm', max_tokens: 24, messages, stream: true }],
  ['/api/chat', { model: 'm', messages, stream: false, options: { num_predict: 16 } }],
  ['/api/generate', { model: 'm', prompt: 'Hello', options: { num_predict: 16 } }],
  ['/tokenize', { content: 'Once upon a time' }],
];
const BAD = [
  ['/v1/chat/completions', { messages: 'nope' }],
  ['/v1/completions', { prompt: 'x', max_tokens: -3 }],
  ['/v1/chat/completions', { messages, response_format: { type: 'json_schema', json_schema: { schema: { not: {} } } } }],
  ['/v1/messages', { model: 'm', messages }],
  ['/v1/chat/completions', { messages, tools: {} }],
];
let good = 0, bad = 0, cut = 0, failures = [];
const deadline = Date.now() + secs * 1000;
async function worker(id) {
  let i = id;
  while (Date.now() < deadline) {
    i++;
    const kind = i % 7;
    try {
      if (kind === 6) {   /* a stream cut off mid-reply */
        const ac = new AbortController();
        const r = await fetch(url + '/v1/completions', { method: 'POST', headers: H, signal: ac.signal,
          body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 400, stream: true }) });
        const rd = r.body.getReader();
        await rd.read();
        ac.abort();
        cut++;
      } else if (kind === 5) {
        const [path, body] = BAD[i % BAD.length];
        const r = await fetch(url + path, { method: 'POST', headers: H, body: JSON.stringify(body) });
        await r.text();
        if (r.status >= 400 && r.status < 500) bad++; else failures.push(`${path} bad request answered ${r.status}`);
      } else {
        const [path, body] = GOOD[i % GOOD.length];
        const r = await fetch(url + path, { method: 'POST', headers: H, body: JSON.stringify({ ...body, seed: i }) });
        const text = await r.text();
        if (r.status === 200) good++; else failures.push(`${path} ${r.status} ${text.slice(0, 120)}`);
      }
    } catch (e) {
      if (e.name !== 'AbortError') failures.push(`worker ${id}: ${e.message}`);
    }
  }
}
const samples = [];
const sampler = setInterval(() => { try { samples.push(rss()); } catch {} }, 2000);
await Promise.all(Array.from({ length: workers }, (_, k) => worker(k)));
clearInterval(sampler);
const health = await (await fetch(url + '/health')).json().catch(() => null);
const third = Math.max(1, Math.floor(samples.length / 3));
const early = Math.max(...samples.slice(0, third)), late = Math.max(...samples.slice(-third));
console.log(`soak ${secs} s, ${workers} clients: ${good} good requests, ${bad} bad ones refused, ${cut} streams cut; ` +
  `RSS ${samples[0]?.toFixed(0)} MiB at start, peak ${early.toFixed(0)} MiB in the first third, ${late.toFixed(0)} MiB in the last`);
let failed = 0;
const check = (name, ok, detail = '') => { if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`); };
check('every good request succeeded, every bad one was a 4xx', !failures.length, failures.slice(0, 5).join(' | '));
check('the server still answers', health?.status === 'ok');
if (process.env.ASAN_OPTIONS) console.log('skip: memory growth under AddressSanitizer (its quarantine holds freed memory; LeakSanitizer checks leaks)');
else check(`memory stopped growing (last third within ${slack} MiB of the first)`, late <= early + slack, `${early} -> ${late}`);
check('work was done', good > workers && bad > 0);
srv.kill('SIGTERM');
const code = await new Promise((r) => srv.on('exit', (c) => r(c)));
check('clean exit', code === 0, String(code));
process.exit(failed ? 1 : 0);
