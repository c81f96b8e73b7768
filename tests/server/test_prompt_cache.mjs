// The shared, persistent prompt cache: a second slot starts from a prefix another (still busy) slot computed; a
// restarted server with the same --prompt-cache directory starts warm; a corrupted entry is skipped with one
// warning line and removed; cache_prompt:false bypasses it; every reply is the same text as the uncached one
// (greedy), and /metrics counts the hits. A hybrid model (the Qwen3.5 fixture: Gated DeltaNet layers whose state
// is checkpointed at the end of a prompt's last block, in RAM and on disk) restores from another slot's prompt and
// after a restart with the same text as uncached; a corrupt checkpoint is skipped and its prefix computed again. Starts its own servers (HEARTH = the binary).
// Usage: HEARTH=... node test_prompt_cache.mjs
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, openSync, writeSync, closeSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const dir = mkdtempSync(join(tmpdir(), 'hearth-pc-'));
const cacheDir = join(dir, 'cache');

async function start(args = ['--prompt-cache', cacheDir]) {
  const p = spawn(process.env.HEARTH, ['serve', '--host', '127.0.0.1', '--port', '0', '--parallel', '2', '-c', '2048', '-t', '1',
    ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  p.stderr.on('data', (d) => { log += d; });
  for (let i = 0; i < 200 && !/listening on (http:\/\/[0-9.:]+)/.test(log); i++) await new Promise((r) => setTimeout(r, 50));
  const url = log.match(/listening on (http:\/\/[0-9.:]+)/)?.[1];
  if (!url) throw new Error('server did not start: ' + log);
  return { p, url, log: () => log };
}
const stop = async (s) => { s.p.kill('SIGTERM'); await new Promise((r) => s.p.on('exit', r)); };
const complete = async (s, prompt, extra = {}) => {
  const r = await fetch(s.url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 12, temperature: 0, ...extra }) });
  return r.json();
};

// until the server has given the busy request a slot (a fixed wait lost the race under the sanitized build: the
// next request took that slot, with its prefix, first)
const untilProcessing = async (s) => {
  for (let i = 0; i < 400; i++) {
    const m = await (await fetch(s.url + '/metrics')).text();
    if (Number(m.match(/^hearth_slots_processing (\d+)/m)?.[1]) >= 1) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error('the busy request never took a slot');
};

const P = Array(40).fill('Once upon a time there was a little dog who liked to play in the park with his friends.').join(' ');
let s = await start();
const cold = await complete(s, P + ' Then');
check('cold: the whole prompt evaluated', cold.timings.cache_n === 0 && cold.timings.prompt_n > 1000, JSON.stringify(cold.timings));
// slot 0 keeps generating; the same prefix on slot 1 comes from the shared cache
const busy = fetch(s.url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ prompt: P + ' Later', max_tokens: 900, temperature: 0, ignore_eos: true }) }).then((r) => r.json());
await untilProcessing(s);
const other = await complete(s, P + ' Suddenly');
const ref = await complete(s, P + ' Suddenly', { cache_prompt: false });
check('a second slot starts from the prefix a busy slot computed', other.timings.cache_n >= 1024, JSON.stringify(other.timings));
check('cache_prompt:false evaluates the whole prompt', ref.timings.cache_n === 0, JSON.stringify(ref.timings));
check('restored and uncached replies are the same text', other.choices[0].text === ref.choices[0].text,
  `'${other.choices[0].text}' vs '${ref.choices[0].text}'`);
await busy;
const metrics = await (await fetch(s.url + '/metrics')).text();
const hits = Number(metrics.match(/^hearth_prompt_cache_hits_total (\d+)/m)?.[1]);
check('/metrics counts the hits and restored tokens', hits >= 1 &&
  Number(metrics.match(/^hearth_prompt_cache_restored_tokens_total (\d+)/m)?.[1]) >= 1024, metrics.split('\n').filter((l) => /cache/.test(l)).join(' '));
await stop(s);
const files = readdirSync(cacheDir).filter((f) => f.endsWith('.kv'));
check('entries written to the --prompt-cache directory (no temp files left)', files.length >= 16 &&
  readdirSync(cacheDir).every((f) => f.endsWith('.kv')), readdirSync(cacheDir).join(' '));

s = await start();
const warm = await complete(s, P + ' Suddenly');
check('after a restart: warm from the directory', warm.timings.cache_n >= 1024, JSON.stringify(warm.timings));
check('after a restart: the same text', warm.choices[0].text === ref.choices[0].text);
await stop(s);

for (const f of files.slice(0, 3)) {   /* corrupt three entries in the middle of their KV bytes */
  const fd = openSync(join(cacheDir, f), 'r+');
  writeSync(fd, Buffer.from([0xde, 0xad, 0xbe, 0xef]), 0, 4, 4000);
  closeSync(fd);
}
s = await start();
const after = await complete(s, P + ' Suddenly');
const warnings = s.log().split('\n').filter((l) => /prompt cache: skipping/.test(l));
check('corrupt entries: one warning line each (at most), never used', warnings.length >= 1 && warnings.length <= 3 &&
  warnings.every((l) => /checksum mismatch/.test(l)), warnings.join(' | '));
check('corrupt entries: the reply is still the same text', after.choices[0].text === ref.choices[0].text);
await stop(s);

// a hybrid model: slot 0 busy on one prompt, slot 1 starts from its prefix's checkpoint
const hdir = join(dir, 'hybrid');
s = await start(['-m', 'data/models/qwen35.gguf', '--prompt-cache', hdir]);
const H = Array(12).fill('Once upon a time there was a little dog who liked to play in the park.').join(' ');
const hcold = await complete(s, H + ' Then');
const hbusy = fetch(s.url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ prompt: H + ' Then', max_tokens: 600, temperature: 0, ignore_eos: true }) }).then((r) => r.json());
await untilProcessing(s);
const hwarm = await complete(s, H + ' Suddenly');
const href = await complete(s, H + ' Suddenly', { cache_prompt: false });
check('hybrid: a prompt of several blocks', hcold.timings.prompt_n >= 192, JSON.stringify(hcold.timings));
check('hybrid: the second slot starts from the first one\'s checkpoint', hwarm.timings.cache_n >= 128 &&
  hwarm.timings.cache_n % 64 === 0, JSON.stringify(hwarm.timings));
check('hybrid: restored and uncached replies are the same text', hwarm.choices[0].text === href.choices[0].text,
  `'${hwarm.choices[0].text}' vs '${href.choices[0].text}'`);
await hbusy;
await stop(s);
const states = readdirSync(hdir).filter((f) => f.endsWith('.st'));
check('hybrid: state checkpoints written beside the KV entries', states.length >= 1 &&
  states.every((f) => readdirSync(hdir).includes(f.replace(/\.st$/, '.kv'))), readdirSync(hdir).join(' '));
s = await start(['-m', 'data/models/qwen35.gguf', '--prompt-cache', hdir]);
const hrestart = await complete(s, H + ' Suddenly');
check('hybrid, after a restart: warm from the directory\'s checkpoint', hrestart.timings.cache_n >= 128 &&
  hrestart.timings.cache_n % 64 === 0, JSON.stringify(hrestart.timings));
check('hybrid, after a restart: the same text', hrestart.choices[0].text === href.choices[0].text);
await stop(s);
for (const f of states) {   /* a corrupt checkpoint is skipped: its prefix is computed again */
  const fd = openSync(join(hdir, f), 'r+');
  writeSync(fd, Buffer.from([0xde, 0xad, 0xbe, 0xef]), 0, 4, 2000);
  closeSync(fd);
}
s = await start(['-m', 'data/models/qwen35.gguf', '--prompt-cache', hdir]);
const hbad = await complete(s, H + ' Suddenly');
check('hybrid, corrupt checkpoints: one warning each, the prefix recomputed, the same text',
  s.log().split('\n').filter((l) => /prompt cache: skipping .*\.st: checksum mismatch/.test(l)).length === states.length &&
  hbad.timings.cache_n === 0 && hbad.choices[0].text === href.choices[0].text, JSON.stringify(hbad.timings) + s.log());
await stop(s);
rmSync(dir, { recursive: true, force: true });
console.log(failed ? `${failed} prompt-cache check(s) failed` : 'all prompt-cache checks passed');
process.exit(failed ? 1 : 0);
