// `hearth serve` through Ollama's own JavaScript client (npm `ollama`): list, ps, show, version; generate and chat,
// streamed (NDJSON, Ollama's default) and not, which agree with each other and with the OpenAI endpoint on the same
// greedy request; options mapped (num_predict, temperature, stop); embed against the OpenAI embeddings of the same
// texts; format "json" gives a JSON object; Ollama features hearth lacks ("tools") are a 400 the client raises.
// Usage: GEN_URL=... [EMB_URL=...] API_KEY=... node test_ollama.mjs
import { Ollama } from 'ollama';

const key = process.env.API_KEY, headers = { Authorization: `Bearer ${key}` };
const gen = new Ollama({ host: process.env.GEN_URL, headers });
let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const openai = async (base, path, body) =>
  (await fetch(base + path, { method: 'POST', headers: { ...headers, 'Content-Type': 'application/json' }, body: JSON.stringify(body) })).json();

const list = await gen.list();
const model = list.models[0]?.name;
check('list: one model, name:tag, gguf details', list.models.length === 1 && /:/.test(model) && list.models[0].details.format === 'gguf' &&
  list.models[0].size > 0 && /^[0-9a-f]{64}$/.test(list.models[0].digest), JSON.stringify(list));
const ps = await gen.ps();
check('ps: the model is loaded', ps.models.length === 1 && ps.models[0].name === model);
const show = await gen.show({ model });
check('show: architecture and parameter count', show.model_info['general.architecture'] === list.models[0].details.family &&
  show.model_info['general.parameter_count'] > 0 && show.capabilities.includes('completion'), JSON.stringify(show.model_info));
const ver = await gen.version();
check('version', /^\d+\.\d+\.\d+$/.test(ver.version), JSON.stringify(ver));

const prompt = 'Once upon a time', options = { num_predict: 12, temperature: 0 };
const one = await gen.generate({ model, prompt, stream: false, options });
check('generate: text, done, counts', one.done && one.response.length > 0 && one.eval_count === 12 && one.done_reason === 'length' &&
  one.prompt_eval_count > 0 && one.total_duration > 0 && one.model === model, JSON.stringify(one));
let text = '', last = null, parts = 0;
for await (const part of await gen.generate({ model, prompt, options, stream: true })) { text += part.response; last = part; parts++; }
check('generate streamed: text lines, the same text, a closing line', parts >= 2 && text === one.response && last.done &&
  last.eval_count === 12, `${parts} parts, '${text}' vs '${one.response}'`);
const oa = await openai(process.env.GEN_URL, '/v1/completions', { prompt, max_tokens: 12, temperature: 0 });
check('generate agrees with /v1/completions', oa.choices[0].text === one.response, `'${oa.choices[0].text}'`);
const raw = await fetch(process.env.GEN_URL + '/api/generate', { method: 'POST', headers, body: JSON.stringify({ model, prompt, options }) });
const lines = (await raw.text()).trim().split('\n').map((l) => JSON.parse(l));
check('without "stream", the server streams NDJSON (Ollama\'s default)', raw.headers.get('content-type') === 'application/x-ndjson' &&
  lines.length >= 2 && lines.at(-1).done && lines.map((l) => l.response).join('') === one.response, `${lines.length} lines`);
const stopped = await gen.generate({ model, prompt, stream: false, options: { ...options, stop: [' was'] } });
check('options.stop ends the text', !stopped.response.includes(' was') && stopped.done_reason === 'stop', JSON.stringify(stopped.response));

const messages = [{ role: 'user', content: 'Tell me a story.' }];
const chat = await gen.chat({ model, messages, stream: false, options });
check('chat: an assistant message', chat.done && chat.message.role === 'assistant' && chat.message.content.length > 0, JSON.stringify(chat));
let ctext = '';
for await (const part of await gen.chat({ model, messages, options, stream: true })) ctext += part.message.content;
check('chat streamed: the same text', ctext === chat.message.content, `'${ctext}'`);

const fj = await gen.chat({ model, messages, format: 'json', stream: false, options: { seed: 3, num_predict: 384 } });
let fo = null;
try { fo = JSON.parse(fj.message.content); } catch {}
check('format json: a JSON object', (fo && typeof fo === 'object' && !Array.isArray(fo)) || fj.done_reason === 'length',
  fj.message.content.slice(0, 200));
let err = null;
try { await gen.chat({ model, messages, tools: [{ type: 'function', function: { name: 'f', parameters: {} } }], stream: false }); }
catch (e) { err = e; }
check('tools (not supported yet): a 400 the client raises', err && err.status_code === 400 && /tools/.test(err.error), String(err));
err = null;
try { await new Ollama({ host: process.env.GEN_URL }).list(); } catch (e) { err = e; }
check('the API key is required', err && err.status_code === 401, String(err));

if (process.env.EMB_URL) {
  const emb = new Ollama({ host: process.env.EMB_URL });
  const input = ['The cat sat on the mat.', 'Paris is the capital of France.'];
  const e = await emb.embed({ model: 'any', input });
  const ref = await openai(process.env.EMB_URL, '/v1/embeddings', { input });
  const same = e.embeddings.length === 2 && e.embeddings.every((v, i) => v.length === ref.data[i].embedding.length &&
    v.every((x, k) => Math.abs(x - ref.data[i].embedding[k]) < 1e-6));
  check('embed: the OpenAI endpoint\'s vectors', same, `${e.embeddings.length} vectors`);
}

console.log(failed ? `${failed} Ollama check(s) failed` : 'all Ollama checks passed');
process.exit(failed ? 1 : 0);
