// The server's smaller endpoints, with Node's fetch: /tokenize and /detokenize (llama-server's shapes: a round trip
// gives the text back, add_special adds BOS, with_pieces names each token's text, bad bodies are 400), /metrics
// (Prometheus text whose counters move with a completion), logit_bias (object and list forms, false bans) and
// cache_prompt: false (nothing reused, same text), CORS (every answer allows any origin; an OPTIONS
// preflight is answered before the API key), HEAD on GET routes (headers, no body), and POST-only routes refuse GET.
// Usage: GEN_URL=http://127.0.0.1:PORT API_KEY=... node test_endpoints.mjs
const base = process.env.GEN_URL, key = process.env.API_KEY;
let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const auth = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };
const post = (path, body) => fetch(base + path, { method: 'POST', headers: auth, body: typeof body === 'string' ? body : JSON.stringify(body) });

// ---- tokenize / detokenize ----
const text = 'Once upon a time, there was a little girl named Lily.';
let r = await post('/tokenize', { content: text });
let j = await r.json();
check('tokenize: 200 with token ids', r.status === 200 && Array.isArray(j.tokens) && j.tokens.length > 5 &&
  j.tokens.every(Number.isInteger), JSON.stringify(j));
const plain = j.tokens;
r = await post('/tokenize', { content: text, add_special: true });
const withBos = (await r.json()).tokens;
check('tokenize: add_special puts BOS first', withBos.length === plain.length + 1 && withBos.slice(1).join() === plain.join(),
  `${withBos.length} vs ${plain.length}`);
r = await post('/detokenize', { tokens: plain });
j = await r.json();
check('detokenize: the round trip gives the text back', r.status === 200 && j.content.trim() === text, JSON.stringify(j));
r = await post('/tokenize', { content: text, with_pieces: true });
j = await r.json();
check('tokenize with_pieces: ids and pieces that spell the text',
  j.tokens.map((t) => t.id).join() === plain.join() && j.tokens.map((t) => t.piece).join('').trim() === text, JSON.stringify(j.tokens.slice(0, 3)));
r = await post('/detokenize', { tokens: [] });
check('detokenize: no tokens, empty text', r.status === 200 && (await r.json()).content === '');
for (const [name, path, body] of [['tokenize without content', '/tokenize', {}], ['tokenize content not a string', '/tokenize', { content: 5 }],
  ['tokenize add_special not a bool', '/tokenize', { content: 'a', add_special: 'yes' }],
  ['detokenize id out of range', '/detokenize', { tokens: [1, 1e9] }], ['detokenize not an array', '/detokenize', { tokens: 'abc' }],
  ['tokenize trailing garbage', '/tokenize', '{"content":"a"} x']]) {
  r = await post(path, body);
  const e = await r.json().catch(() => null);
  check(`${name}: 400 with a message`, r.status === 400 && e && typeof e.error?.message === 'string', `${r.status}`);
}
r = await fetch(base + '/tokenize', { headers: auth });
check('tokenize: GET is 405', r.status === 405);
r = await fetch(base + '/tokenize', { method: 'POST', body: JSON.stringify({ content: 'a' }) });
check('tokenize: the API key is required', r.status === 401);

// ---- metrics ----
const metric = (body, name) => {
  const m = body.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
};
r = await fetch(base + '/metrics', { headers: auth });
const m0 = await r.text();
check('metrics: 200 text/plain', r.status === 200 && r.headers.get('content-type').startsWith('text/plain'));
check('metrics: HELP and TYPE for each series', /^# TYPE hearth_tokens_generated_total counter$/m.test(m0) &&
  /^# TYPE hearth_slots_idle gauge$/m.test(m0) && /^hearth_model_info\{model="[^"]*"\} 1$/m.test(m0), m0.slice(0, 200));
const gen0 = metric(m0, 'hearth_tokens_generated_total'), req0 = metric(m0, 'hearth_requests_total');
r = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 7, temperature: 0 });
const usage = (await r.json()).usage;
const m1 = await (await fetch(base + '/metrics', { headers: auth })).text();
check('metrics: generated tokens counted', metric(m1, 'hearth_tokens_generated_total') - gen0 === usage.completion_tokens,
  `${metric(m1, 'hearth_tokens_generated_total')} - ${gen0} vs ${usage.completion_tokens}`);
// requests are counted when the server has finished with them, which may be just after the client has its answer
let m2 = m1;
for (let i = 0; i < 50 && !(metric(m2, 'hearth_requests_total') >= req0 + 2); i++) {
  await new Promise((res) => setTimeout(res, 20));
  m2 = await (await fetch(base + '/metrics', { headers: auth })).text();
}
check('metrics: requests counted', metric(m2, 'hearth_requests_total') >= req0 + 2, `${metric(m2, 'hearth_requests_total')} vs ${req0}`);
check('metrics: prompt tokens counted', metric(m1, 'hearth_prompt_tokens_total') >= usage.prompt_tokens);
check('metrics: decode steps and time are positive', metric(m1, 'hearth_decode_steps_total') > 0 && metric(m1, 'hearth_decode_seconds_total') > 0);
const ttft0 = metric(m0, 'hearth_time_to_first_token_seconds_count');
check('metrics: the finished request observed in the latency histograms', metric(m1, 'hearth_time_to_first_token_seconds_count') === ttft0 + 1 &&
  metric(m1, 'hearth_time_per_output_token_seconds_count') >= 1, `${metric(m1, 'hearth_time_to_first_token_seconds_count')} vs ${ttft0}`);
for (const h of ['hearth_time_to_first_token_seconds', 'hearth_time_per_output_token_seconds']) {
  const b = [...m1.matchAll(new RegExp(`^${h}_bucket\\{le="([^"]+)"\\} (\\d+)$`, 'gm'))].map((x) => Number(x[2]));
  check(`metrics: ${h} buckets cumulative, +Inf = count`, b.length === 15 && b.every((v, i) => !i || v >= b[i - 1]) &&
    b[14] === metric(m1, h + '_count'), b.join(','));
}
const byRoute = (body, route, status) => Number(body.match(new RegExp(`^hearth_http_requests_total\\{route="${route}",status="${status}"\\} (\\d+)$`, 'm'))?.[1] ?? 0);
await fetch(base + '/no/such/path', { headers: auth });
let m3 = m2;
for (let i = 0; i < 50 && !(byRoute(m3, 'unknown', 404) >= 1); i++) {
  await new Promise((res) => setTimeout(res, 20));
  m3 = await (await fetch(base + '/metrics', { headers: auth })).text();
}
check('metrics: requests by route and status', byRoute(m3, '/v1/completions', 200) >= 1 && byRoute(m3, 'unknown', 404) >= 1 &&
  byRoute(m3, '/metrics', 200) >= 1, m3.split('\n').filter((l) => l.startsWith('hearth_http')).join(' '));
r = await fetch(base + '/metrics');
check('metrics: the API key is required', r.status === 401);

// ---- logit_bias, cache_prompt ----
const complete = async (extra) => {
  const res = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 4, temperature: 0, ...extra });
  return { status: res.status, body: await res.json() };
};
const the = (await (await post('/tokenize', { content: ' the' })).json()).tokens.at(-1);
const four = (await (await post('/detokenize', { tokens: [the, the, the, the] })).json()).content;
let c = await complete({ logit_bias: { [the]: 100 } });
check('logit_bias +100 (object form): every token is the biased one', c.status === 200 && c.body.choices[0].text === four,
  JSON.stringify(c.body.choices?.[0]?.text));
c = await complete({ logit_bias: [[the, 100]] });
check('logit_bias as a list of [id, bias]', c.status === 200 && c.body.choices[0].text === four);
c = await complete({ logit_bias: [[the, 100], [the, false]] });
check('logit_bias false bans the token (a later entry replaces an earlier one)', c.status === 200 && c.body.choices[0].text !== four &&
  !c.body.choices[0].text.includes(' the the'), JSON.stringify(c.body.choices?.[0]?.text));
for (const [name, lb] of [['a token that is not an id', { abc: 1 }], ['a bias past 100', { 5: 1000 }], ['an id past the vocabulary', { 1000000: 1 }],
  ['a malformed list', [[1]]], ['a string', 'x']]) {
  c = await complete({ logit_bias: lb });
  check(`logit_bias with ${name}: 400`, c.status === 400, `${c.status}`);
}
const prompt = { prompt: 'Lily and Ben went to the park to play on the swings', max_tokens: 6, temperature: 0 };
const a1 = await (await post('/v1/completions', prompt)).json();
const a2 = await (await post('/v1/completions', prompt)).json();
const a3 = await (await post('/v1/completions', { ...prompt, cache_prompt: false })).json();
check('cache_prompt (default): a repeated prompt is served from the cache', a2.timings.cache_n > 0, JSON.stringify(a2.timings));
check('cache_prompt false: nothing reused', a3.timings.cache_n === 0 && a3.timings.prompt_n === a3.usage.prompt_tokens, JSON.stringify(a3.timings));
check('cached and uncached replies are the same text', a1.choices[0].text === a2.choices[0].text && a2.choices[0].text === a3.choices[0].text);
c = await complete({ cache_prompt: 'no' });
check('cache_prompt not a bool: 400', c.status === 400);

// ---- CORS, OPTIONS, HEAD ----
r = await fetch(base + '/v1/chat/completions', { method: 'OPTIONS',
  headers: { Origin: 'http://elsewhere.example', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' } });
check('preflight: 204 without the key, allowing POST and the Authorization header', r.status === 204 &&
  r.headers.get('access-control-allow-origin') === '*' && /POST/.test(r.headers.get('access-control-allow-methods')) &&
  /Authorization/i.test(r.headers.get('access-control-allow-headers')), `${r.status}`);
r = await fetch(base + '/nope', { method: 'OPTIONS' });
check('preflight on an unknown path: not 204', r.status !== 204, `${r.status}`);
r = await post('/tokenize', { content: 'a' });
check('answers carry Access-Control-Allow-Origin', r.headers.get('access-control-allow-origin') === '*');
r = await fetch(base + '/health', { method: 'HEAD' });
check('HEAD /health: 200, no body', r.status === 200 && (await r.text()) === '' && r.headers.get('content-type') === 'application/json');
r = await fetch(base + '/v1/models', { method: 'HEAD', headers: auth });
check('HEAD /v1/models: 200', r.status === 200);

console.log(failed ? `${failed} endpoint check(s) failed` : 'all endpoint checks passed');
process.exit(failed ? 1 : 0);
