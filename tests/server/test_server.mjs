// test_server.mjs — end-to-end checks of `hearth serve` through the official openai client (and raw fetch for
// the malformed requests a client library would never send). Run by ../test_server.sh, which starts the servers:
//   GEN_URL   the embedded stories260K model (no chat template), --parallel 8, -c 1024, --api-key $API_KEY
//   EMB_URL   the BERT encoder (embeddings only), or "" when not started
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const GEN = process.env.GEN_URL, EMB = process.env.EMB_URL, KEY = process.env.API_KEY;
const gen = new OpenAI({ baseURL: `${GEN}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
let failures = 0, passed = 0;

async function test(name, fn) {
    const t0 = Date.now();
    try {
        await fn();
        passed++;
        console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
        failures++;
        console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    }
}

async function post(base, path, body, headers = {}) {
    const r = await fetch(`${base}${path}`, {
        method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body),
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers },
    });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, json, text };
}

function assertError(r, status, pattern) {
    assert.equal(r.status, status, `status ${r.status}: ${r.text}`);
    assert.ok(r.json && r.json.error && typeof r.json.error.message === 'string', `OpenAI error body: ${r.text}`);
    assert.equal(r.json.error.type, status === 401 ? 'authentication_error' : 'invalid_request_error');
    if (pattern) assert.match(r.json.error.message, pattern);
}

async function health(base = GEN) {
    const r = await fetch(`${base}/health`);
    assert.equal(r.status, 200);
    return r.json();
}

const chatMsgs = [{ role: 'user', content: 'Once upon a time' }];

async function streamChat(params) {
    const stream = await gen.chat.completions.create({ model: 'x', messages: chatMsgs, stream: true, ...params });
    let text = '', chunks = 0, finish = null, usage = null, role = null;
    for await (const c of stream) {
        chunks++;
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) {
            if (ch.delta.role) role = ch.delta.role;
            if (ch.delta.content) text += ch.delta.content;
            if (ch.finish_reason) finish = ch.finish_reason;
        }
    }
    return { text, chunks, finish, usage, role };
}

await test('models list', async () => {
    const list = await gen.models.list();
    assert.equal(list.data.length, 1);
    assert.equal(list.data[0].id, 'stories260K');
    assert.equal(list.data[0].object, 'model');
});

await test('chat completion', async () => {
    const r = await gen.chat.completions.create({ model: 'x', messages: chatMsgs, max_tokens: 24, seed: 5 });
    const c = r.choices[0];
    assert.equal(r.object, 'chat.completion');
    assert.equal(c.message.role, 'assistant');
    assert.ok(c.message.content.length > 10, c.message.content);
    assert.ok(['stop', 'length'].includes(c.finish_reason));
    assert.equal(r.usage.prompt_tokens, 5);
    assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

await test('chat completion streamed, with usage; same text as unstreamed', async () => {
    const s = await streamChat({ max_tokens: 24, seed: 5, stream_options: { include_usage: true } });
    const r = await gen.chat.completions.create({ model: 'x', messages: chatMsgs, max_tokens: 24, seed: 5 });
    assert.equal(s.role, 'assistant');
    assert.ok(s.chunks > 3, `${s.chunks} chunks`);
    assert.equal(s.text, r.choices[0].message.content);
    assert.equal(s.finish, r.choices[0].finish_reason);
    assert.deepEqual(s.usage, r.usage);
});

await test('completion', async () => {
    const r = await gen.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.ok(r.choices[0].text.startsWith(', there was'), r.choices[0].text);
    assert.equal(r.usage.completion_tokens, 16);
    const s = await gen.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stream: true });
    let text = '';
    for await (const c of s) text += c.choices[0]?.text ?? '';
    assert.equal(text, r.choices[0].text);
});

await test('the same seed gives the same text', async () => {
    const ask = (seed) => gen.completions.create({ model: 'x', prompt: 'Lily', max_tokens: 40, temperature: 1, seed })
        .then((r) => r.choices[0].text);
    const [a, b, c] = [await ask(42), await ask(42), await ask(7)];
    assert.equal(a, b);
    assert.notEqual(a, c);
});

await test('stop strings, logprobs', async () => {
    const r = await gen.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [' was', 'zzz'] });
    assert.equal(r.choices[0].text, ', there');
    assert.equal(r.choices[0].finish_reason, 'stop');
    const c = await gen.chat.completions.create({ model: 'x', messages: chatMsgs, max_tokens: 8, logprobs: true, top_logprobs: 3, temperature: 0 });
    const lp = c.choices[0].logprobs.content;
    assert.equal(lp.length, c.usage.completion_tokens);
    assert.equal(lp.map((e) => e.token).join(''), c.choices[0].message.content);
    for (const e of lp) {
        assert.ok(e.logprob <= 0 && e.top_logprobs.length === 3 && Array.isArray(e.bytes));
        assert.equal(e.top_logprobs[0].token, e.token);   // greedy: the pick is the most likely
    }
    const t = await gen.completions.create({ model: 'x', prompt: 'Once', max_tokens: 4, logprobs: 2 });
    assert.equal(t.choices[0].logprobs.tokens.length, 4);
    assert.equal(t.choices[0].logprobs.top_logprobs[0] && Object.keys(t.choices[0].logprobs.top_logprobs[0]).length, 2);
});

await test('8 concurrent streams are batched together', async () => {
    const N = 200;   // long enough that the streams overlap even on a fast machine
    const h0 = await health();
    const t0 = Date.now();
    const runs = await Promise.all([...Array(8).keys()].map((i) =>
        streamChat({ max_tokens: N, seed: i, ignore_eos: true, stream_options: { include_usage: true } })));
    const secs = (Date.now() - t0) / 1000;
    const h1 = await health();
    for (const r of runs) {
        assert.equal(r.usage.completion_tokens, N);
        assert.equal(r.finish, 'length');
        assert.ok(r.chunks >= 3, `${r.chunks} chunks`);   // role, text (tokens that arrive together share a chunk), end
    }
    const steps = h1.decode_steps - h0.decode_steps, sampled = h1.tokens_sampled - h0.tokens_sampled;
    assert.equal(sampled, 8 * N);
    assert.ok(steps < 8 * N / 2, `${steps} decode steps for ${sampled} tokens: not batched`);
    console.log(`     8 x ${N} tokens in ${secs.toFixed(2)} s (${(8 * N / secs).toFixed(0)} tok/s), ${steps} decode steps`);
});

await test('embeddings from the decoder (mean-pooled)', async () => {
    const r = await gen.embeddings.create({ model: 'x', input: ['hello', 'Once upon a time'] });
    assert.equal(r.data.length, 2);
    for (const d of r.data) {
        assert.equal(d.embedding.length, 64);
        const norm = Math.hypot(...d.embedding);
        assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
    }
    assert.ok(r.usage.prompt_tokens > 2);
});

if (EMB) {
    const emb = new OpenAI({ baseURL: `${EMB}/v1`, apiKey: 'none', maxRetries: 0 });
    await test('embeddings from the BERT encoder (base64 and float)', async () => {
        const r = await emb.embeddings.create({ model: 'bert', input: ['a cat sat on the mat', 'the dog'] });
        const f = await emb.embeddings.create({ model: 'bert', input: ['a cat sat on the mat', 'the dog'], encoding_format: 'float' });
        assert.equal(r.data.length, 2);
        assert.equal(r.data[0].embedding.length, 128);
        for (let i = 0; i < 128; i++) assert.ok(Math.abs(r.data[0].embedding[i] - f.data[0].embedding[i]) < 1e-6);
        assert.ok(Math.abs(Math.hypot(...f.data[1].embedding) - 1) < 1e-3);
        const one = await emb.embeddings.create({ model: 'bert', input: 'the dog', encoding_format: 'float' });
        for (let i = 0; i < 128; i++) assert.ok(Math.abs(one.data[0].embedding[i] - f.data[1].embedding[i]) < 1e-5);
    });
    await test('an encoder refuses chat', async () => {
        assertError(await post(EMB, '/v1/chat/completions', { messages: chatMsgs }), 400, /encoder/);
        assertError(await post(EMB, '/v1/embeddings', { input: 'word '.repeat(400) }), 400, /\d+ tokens, but the context is \d+ tokens/);
    });
}

await test('bad requests get OpenAI-style 400s', async () => {
    assertError(await post(GEN, '/v1/chat/completions', '{"messages": [{"role": "user", "content": "hi"}'), 400, /JSON/);
    assertError(await post(GEN, '/v1/chat/completions', '[1, 2]'), 400);
    assertError(await post(GEN, '/v1/chat/completions', { model: 'x' }), 400, /messages/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: [] }), 400, /messages/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: 'hi' }), 400, /messages/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: [{ content: 'hi' }] }), 400, /role/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: chatMsgs, temperature: 'hot' }), 400, /temperature/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: chatMsgs, max_tokens: 1.5 }), 400, /max_tokens/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: chatMsgs, n: 2 }), 400, /'n'/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: chatMsgs, stop: 5 }), 400, /stop/);
    assertError(await post(GEN, '/v1/chat/completions', { messages: chatMsgs, stream: 'yes' }), 400, /stream/);
    assertError(await post(GEN, '/v1/completions', { prompt: 5 }), 400, /prompt/);
    assertError(await post(GEN, '/v1/completions', { prompt: [99999] }), 400, /prompt/);
    assertError(await post(GEN, '/v1/embeddings', { input: {} }), 400, /input/);
    const long = 'Once upon a time there was a little girl. '.repeat(150);
    const r = await post(GEN, '/v1/completions', { prompt: long, max_tokens: 4 });
    assertError(r, 400, /the prompt is \d+ tokens, but the context is 1024 tokens/);
    const ok = await post(GEN, '/v1/chat/completions', { messages: chatMsgs, max_tokens: 2, some_future_field: { x: 1 }, user: 'u' });
    assert.equal(ok.status, 200, 'unknown fields are ignored');
});

await test('413, 401, 404, 405', async () => {
    const big = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(9 << 20) }] });
    const r = await post(GEN, '/v1/chat/completions', big);
    assert.equal(r.status, 413);
    assertError(await post(GEN, '/v1/chat/completions', { messages: chatMsgs }, { Authorization: 'Bearer wrong' }), 401);
    assertError(await post(GEN, '/v1/chat/completions', { messages: chatMsgs }, { Authorization: '' }), 401);
    const bad = new OpenAI({ baseURL: `${GEN}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e.status === 401);
    assert.equal((await post(GEN, '/v1/nothing', {})).status, 404);
    assert.equal((await fetch(`${GEN}/v1/chat/completions`, { headers: { Authorization: `Bearer ${KEY}` } })).status, 405);
});

await test('a client that disconnects mid-stream frees its slot at once', async () => {
    const ac = new AbortController();
    const res = await fetch(`${GEN}/v1/completions`, {
        method: 'POST', signal: ac.signal,
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ prompt: 'Once', max_tokens: 1000, ignore_eos: true, stream: true }),
    });
    const reader = res.body.getReader();
    await reader.read();
    ac.abort();
    const t0 = Date.now();
    let h;
    do { h = await health(); } while (h.slots_processing > 0 && Date.now() - t0 < 3000);
    assert.equal(h.slots_processing, 0, 'slot still busy 3 s after the client left');
    const r = await gen.completions.create({ model: 'x', prompt: 'Once', max_tokens: 4 });
    assert.equal(r.usage.completion_tokens, 4);
});

await test('still healthy afterwards', async () => {
    const h = await health();
    assert.equal(h.status, 'ok');
    assert.equal(h.slots_processing, 0);
    const r = await gen.chat.completions.create({ model: 'x', messages: chatMsgs, max_tokens: 8 });
    assert.ok(r.choices[0].message.content.length > 0);
});

console.log(`${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
