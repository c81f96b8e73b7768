// Requests that outlive the idle timeout, and the deadline for the request head. A server with --timeout-idle 1
// and --timeout-headers 3 on a slow synthesized model (SLOW_MODEL: ~1,800-token prompts take seconds), two slots:
// five long-prompt requests at once (three queue) — a raw SSE stream with return_progress, the same prompt
// non-streamed through the openai client (same text), a streamed chat through the openai client, an Anthropic
// stream through @anthropic-ai/sdk, an Ollama stream through the ollama client — plus a long embeddings input:
// every one completes although its first byte of text comes several idle timeouts after the request. The raw
// stream shows keep-alive comments and progress events in order, ending at the prompt length, before the text.
// The chat page (headless chromium) shows the progress as a bar that fills, then gives way to the reply.
// Then a client leaving during the prompt is noticed (logged as 499, the prompt cut short, at most one more
// batch decoded), and the deadlines: a head trickled a byte at a time, a body trickled likewise, and an idle
// keep-alive connection are closed on time.
// Usage: HEARTH=build/hearth SLOW_MODEL=slow.gguf node test_long_prefill.mjs
import { spawn } from 'node:child_process';
import net from 'node:net';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import puppeteer from 'puppeteer-core';
import { existsSync } from 'node:fs';

let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const IDLE_S = 1, HEAD_S = 3;

const srv = spawn(process.env.HEARTH, ['serve', '-m', process.env.SLOW_MODEL, '--host', '127.0.0.1', '--port', '0',
  '--parallel', '2', '-c', '2048', '-t', '1', '--cache-ram', '0', '--timeout-idle', String(IDLE_S),
  '--timeout-headers', String(HEAD_S)], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
srv.stderr.on('data', (d) => { log += d; });
for (let i = 0; i < 200 && !/listening on (http:\/\/[0-9.:]+)/.test(log); i++) await sleep(50);
const url = log.match(/listening on (http:\/\/[0-9.:]+)/)?.[1];
if (!url) { console.log('FAIL: the server did not start: ' + log); process.exit(1); }
const port = Number(new URL(url).port);

// ~1,800 tokens of the synthetic tokenizer; a different first word per request, so that no slot reuses another's KV
const story = Array(30).fill('Once upon a time there was a little dog who liked to play in the park.').join(' ');
const prompt = (w) => `${w}. ${story}`;

// A raw SSE stream: every line as sent (comments included), the progress events, the text and when it began.
async function rawStream(path, body, onEvent = () => false) {
  const ctl = new AbortController();
  const t0 = performance.now();
  const r = await fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body), signal: ctl.signal });
  const out = { comments: 0, progress: [], text: '', ttft: 0, usage: null, textBeforeProgress: false, done: false, aborted: false };
  const dec = new TextDecoder();
  let buf = '';
  try {
    for await (const chunk of r.body) {
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (ev.startsWith(':')) { out.comments++; continue; }
        if (ev === 'data: [DONE]') { out.done = true; continue; }
        const j = JSON.parse(ev.slice(6));
        if (j.prompt_progress) {
          if (out.text) out.textBeforeProgress = true;
          out.progress.push(j.prompt_progress);
        }
        if (j.usage) out.usage = j.usage;
        const t = j.choices?.[0]?.text ?? j.choices?.[0]?.delta?.content;
        if (t) { if (!out.ttft) out.ttft = performance.now() - t0; out.text += t; }
        if (onEvent(j, out)) { ctl.abort(); out.aborted = true; return out; }
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') out.error = String(e);
  }
  return out;
}

const openai = new OpenAI({ baseURL: url + '/v1', apiKey: 'none', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: url, apiKey: 'none', maxRetries: 0 });
const ollama = new Ollama({ host: url });
const N = 8;

const t0 = performance.now();
const [raw, plain, chat, an, ol, emb] = await Promise.allSettled([
  rawStream('/v1/completions', { prompt: prompt('Alpha'), max_tokens: N, temperature: 0, stream: true,
    stream_options: { include_usage: true }, return_progress: true, cache_prompt: false }),
  openai.completions.create({ model: 'x', prompt: prompt('Alpha'), max_tokens: N, temperature: 0, cache_prompt: false }),
  (async () => {
    const s = await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: prompt('Beta') }],
      max_tokens: N, temperature: 0, stream: true, return_progress: true });
    let text = '', progress = 0, finish = null;
    for await (const c of s) {
      if (c.prompt_progress) progress++;
      text += c.choices[0]?.delta?.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    return { text, progress, finish };
  })(),
  (async () => {
    const s = anthropic.messages.stream({ model: 'x', max_tokens: N, temperature: 0, messages: [{ role: 'user', content: prompt('Gamma') }] });
    return s.finalMessage();
  })(),
  (async () => {
    let text = '', last = null;
    for await (const p of await ollama.generate({ model: 'x', prompt: prompt('Delta'), stream: true, options: { num_predict: N, temperature: 0 } })) {
      text += p.response;
      last = p;
    }
    return { text, last };
  })(),
  openai.embeddings.create({ model: 'x', input: prompt('Epsilon') }),
]);
const wall = performance.now() - t0;
const ok = (p) => p.status === 'fulfilled';
const why = (p) => (p.status === 'rejected' ? String(p.reason) : JSON.stringify(p.value).slice(0, 300));

check(`the prompts took several idle timeouts (first text after ${(raw.value?.ttft / 1e3).toFixed(1)} s, all done in ${(wall / 1e3).toFixed(1)} s)`,
  ok(raw) && raw.value.ttft > 2e3 * IDLE_S, why(raw));
check('raw stream: the whole reply and [DONE]', ok(raw) && raw.value.done && !raw.value.error && raw.value.usage?.completion_tokens === N, why(raw));
check(`raw stream: keep-alive comments while the prompt ran (${raw.value?.comments})`, ok(raw) && raw.value.comments >= 1, why(raw));
{
  const p = raw.value?.progress ?? [];
  const inOrder = p.every((e, i) => i === 0 || e.processed > p[i - 1].processed);
  const total = raw.value?.usage?.prompt_tokens;
  check(`raw stream: progress events in order, ending at the prompt length (${p.map((e) => e.processed).join(' ')} of ${total})`,
    p.length >= 3 && inOrder && p.at(-1).processed === total && p.every((e) => e.total === total && e.cache === p[0].cache) &&
    p[0].processed === p[0].cache &&
    !raw.value.textBeforeProgress, JSON.stringify(p));
}
check('non-streamed: the same text as the stream', ok(plain) && ok(raw) && plain.value.choices[0].text === raw.value.text &&
  plain.value.choices[0].finish_reason === 'length', why(plain));
check('openai client stream: completes, progress chunks accepted', ok(chat) && chat.value.finish === 'length' &&
  chat.value.text.length > 0 && chat.value.progress >= 1, why(chat));
check('anthropic client stream: completes', ok(an) && an.value.stop_reason === 'max_tokens' && an.value.usage.output_tokens === N &&
  an.value.content[0]?.text.length > 0, why(an));
check('ollama client stream: completes', ok(ol) && ol.value.last?.done === true && ol.value.last.eval_count === N &&
  ol.value.text.length > 0, why(ol));
check('embeddings of a long input', ok(emb) && emb.value.data[0].embedding.length > 0 &&
  emb.value.usage.prompt_tokens > 1000, why(emb));

// ---- the chat page's progress bar ----
const exe = process.env.CHROMIUM || '/usr/bin/chromium';
if (!existsSync(exe)) console.log(`SKIP: the chat page's progress bar (no browser at ${exe})`);
else {
  const browser = await puppeteer.launch({ executablePath: exe, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'] });
  try {
    const page = await browser.newPage();
    await page.goto(url + '/', { waitUntil: 'load' });
    await page.$eval('#max_tokens', (e) => { e.value = '4'; e.dispatchEvent(new Event('change')); });
    // greedy: at the page's 0.8 an unseeded draw sometimes ended the reply at once (no token, no "first token")
    await page.$eval('#temperature', (e) => { e.value = '0'; e.dispatchEvent(new Event('change')); });
    await page.$eval('#prompt', (e, v) => { e.value = v; }, prompt('Eta'));
    await page.evaluate(() => {   // every state of the bar, as the page draws it
      window.seen = [];
      new MutationObserver(() => {
        const p = document.querySelector('.assistant .progress progress');
        if (p && p.value !== window.seen.at(-1)?.value) window.seen.push({ value: p.value, max: p.max });
      }).observe(document.getElementById('log'), { subtree: true, childList: true, attributes: true, characterData: true });
    });
    await page.click('#send');
    await page.waitForFunction(() => document.querySelector('.assistant .stats')?.textContent.length > 0, { timeout: 60000 });
    const seen = await page.evaluate(() => window.seen);
    const gone = await page.$('.assistant .progress') === null;
    const stats = await page.$eval('.assistant .stats', (e) => e.textContent);
    check(`chat page: a progress bar that fills (${seen.map((e) => e.value).join(' ')} of ${seen[0]?.max}), gone once the reply came`,
      seen.length >= 2 && seen.every((e, i) => i === 0 || e.value > seen[i - 1].value) && seen[0].max > 1000 && gone &&
      /first token \d+ ms/.test(stats), JSON.stringify(seen) + ' ' + stats);
  } finally {
    await browser.close();
  }
}

// ---- a client leaving during the prompt ----
const metric = async (name) => Number((await (await fetch(url + '/metrics')).text()).match(new RegExp(`^${name} (\\S+)`, 'm'))?.[1]);
{
  const steps0 = await metric('hearth_decode_steps_total');
  const left = await rawStream('/v1/completions', { prompt: prompt('Zeta'), max_tokens: N, temperature: 0, stream: true, return_progress: true },
    (j) => j.prompt_progress?.processed >= 512);
  const total = left.progress.at(-1)?.total ?? 0;
  await sleep(2500);   // longer than the rest of the prompt would take
  const steps = (await metric('hearth_decode_steps_total')) - steps0;
  const line = log.split('\n').find((l) => /^POST \/v1\/completions 499 .*\(cancelled\) in the prompt at \d+/.test(l));
  const at = Number(line?.match(/at (\d+)/)?.[1]);
  check(`a client leaving during the prompt is noticed: ${line}`, left.aborted && line && at < total, log.slice(-400));
  check(`... and the prompt stops within a batch (${steps} of ${Math.ceil(total / 512)} batches decoded)`,
    total > 3 * 512 && steps <= 3, `steps ${steps}`);
}

// ---- deadlines ----
// Opens a connection, writes `head` then one byte of `drip` every 400 ms (never idle for 1 s); resolves with the
// seconds until the server closed it.
function trickle(head, drip) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const s = net.connect(port, '127.0.0.1', () => s.write(head));
    let i = 0;
    const t = setInterval(() => { if (!s.destroyed) s.write(drip[i++ % drip.length]); }, 400);
    const done = () => { clearInterval(t); s.destroy(); resolve((performance.now() - t0) / 1e3); };
    s.on('close', done);
    s.on('error', done);
    setTimeout(done, 15000);
  });
}
const [head, body] = await Promise.all([
  trickle('GET /health HTTP/1.1\r\n', 'X-Slow: abcdefghijklmnopqrstuvwxyz\r\n'),
  trickle('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n', '{"prompt":'),
]);
check(`a head trickled a byte at a time is closed at the header deadline (${head.toFixed(1)} s, deadline ${HEAD_S} s)`,
  head >= HEAD_S - 0.2 && head < HEAD_S + 1.5);
check(`a body trickled a byte at a time is closed at its deadline (${body.toFixed(1)} s)`, body >= HEAD_S - 0.2 && body < 2 * HEAD_S + 1.5);
await sleep(300);   // the server's log line comes once its thread has seen the connection end
check('the late body is logged as 408', /^POST \/v1\/completions 408 /m.test(log), log.slice(-300));
check('counted in /metrics', (await metric('hearth_connections_closed_late_total')) >= 2);
{
  const idle = await new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
    let t1 = 0;
    s.on('data', () => { if (!t1) t1 = performance.now(); });
    s.on('close', () => resolve((performance.now() - t1) / 1e3));
    s.on('error', () => {});
  });
  check(`a keep-alive connection idle after its answer is closed after the idle timeout (${idle.toFixed(1)} s)`,
    idle >= IDLE_S - 0.2 && idle < IDLE_S + 1.5);
}
// ---- logprobs in a stream: a slow model sends its tokens in separate chunks, and each token's text_offset is where
// it starts in the whole reply (as in the same request not streamed), not in its chunk ----
{
  // (random weights: the first of these prompts whose greedy reply writes text in several tokens)
  let q, whole;
  for (const p of ['Once upon a time', 'Alpha.', 'Hello world', 'Beta. Once upon a time', 'The park']) {
    q = { prompt: p, max_tokens: 8, temperature: 0, logprobs: 1 };
    whole = (await (await fetch(url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(q) })).json()).choices[0].logprobs;
    if (new Set(whole.text_offset).size >= 3) break;
  }
  const offs = [], toks = [];
  let chunks = 0;
  await rawStream('/v1/completions', { ...q, stream: true }, (j) => {
    const l = j.choices?.[0]?.logprobs;
    if (l) { chunks++; offs.push(...l.text_offset); toks.push(...l.tokens); }
    return false;
  });
  check(`streamed logprobs: text_offset counts from the reply's start over ${chunks} chunks (${offs.join(' ')}; not streamed ${whole.text_offset.join(' ')})`,
    chunks >= 2 && new Set(whole.text_offset).size >= 3 && JSON.stringify(toks) === JSON.stringify(whole.tokens) && JSON.stringify(offs) === JSON.stringify(whole.text_offset));
}
check('the server still answers', (await (await fetch(url + '/health')).json()).status === 'ok');

srv.kill('SIGTERM');
await new Promise((r) => srv.on('exit', r));
console.log(failed ? `${failed} long-prefill check(s) failed` : 'all long-prefill checks passed');
process.exit(failed ? 1 : 0);
