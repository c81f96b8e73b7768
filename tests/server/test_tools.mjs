// Tool calling through the official openai client, against three servers: the embedded model as it is (no chat
// template: the generic JSON format, the tools described in a system turn), and the same model with a Qwen-style
// template (Hermes <tool_call> blocks) and a Llama-3.1-style one ({"name", "parameters"} JSON). Forced calls ("required", a named function) always parse
// and their arguments validate against the tool's parameters (ajv), plain and streamed; "auto" gives text
// without a raw <tool_call>, or valid calls; "none" gives text; a history with tool calls and results renders;
// bad tool requests are 400s.
// Usage: GEN_URL=... TOOLS_URL=... LLAMA3_URL=... API_KEY=... node test_tools.mjs
import OpenAI from 'openai';
import Ajv from 'ajv';

let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 24 }, unit: { enum: ['celsius', 'fahrenheit'] } },
      required: ['city'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', description: 'Adds two integers',
    parameters: { type: 'object', properties: { a: { type: 'integer', minimum: -1000, maximum: 1000 }, b: { type: 'integer' } },
      required: ['a', 'b'] } } },
];
const ajv = new Ajv({ strict: false });
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

// Calls in a message (or assembled from stream deltas) are well-formed and valid.
const callsValid = (calls, only) => Array.isArray(calls) && calls.length > 0 && calls.every((c) => {
  let args;
  try { args = JSON.parse(c.function.arguments); } catch { return false; }
  return /^call_/.test(c.id) && c.type === 'function' && validators[c.function.name]?.(args) && (!only || c.function.name === only);
});

async function ask(client, req, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(req);
    return { msg: r.choices[0].message, finish: r.choices[0].finish_reason };
  }
  const calls = [];
  let content = '', finish = null;
  for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
    const d = ch.choices[0]?.delta ?? {};
    if (d.content) content += d.content;
    for (const tc of d.tool_calls ?? []) {
      const c = (calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (tc.id) c.id = tc.id;
      if (tc.function?.name) c.function.name += tc.function.name;
      if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
    }
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  return { msg: { content: content || null, tool_calls: calls.length ? calls : undefined }, finish };
}

for (const [label, url] of [['generic', process.env.GEN_URL], ['hermes', process.env.TOOLS_URL], ['llama3', process.env.LLAMA3_URL]]) {
  if (!url) continue;
  const client = new OpenAI({ baseURL: url + '/v1', apiKey: process.env.API_KEY });
  let ok = 0, n = 0;
  for (const seed of [1, 2, 3]) for (const stream of [false, true]) {
    const { msg, finish } = await ask(client, { model: 'm', messages, tools, tool_choice: 'required', parallel_tool_calls: false,
      seed, max_tokens: 300 }, stream);
    n++;
    if (finish === 'tool_calls' && msg.tool_calls?.length === 1 && callsValid(msg.tool_calls)) ok++;
    else console.log(`  ${label} required seed ${seed}${stream ? ' streamed' : ''}: ${finish} ${JSON.stringify(msg).slice(0, 300)}`);
  }
  check(`${label}: tool_choice required, one call, valid arguments (${ok}/${n}, plain and streamed)`, ok === n);

  let tight = 0;   /* max_tokens 64: the call still completes (the grammar's budget), required / named, plain / streamed */
  for (const [seed, stream, choice] of [[1, false, 'required'], [2, true, 'required'], [3, false, { type: 'function', function: { name: 'add' } }],
    [4, true, { type: 'function', function: { name: 'get_weather' } }]]) {
    const { msg, finish } = await ask(client, { model: 'm', messages, tools, tool_choice: choice, parallel_tool_calls: false,
      seed, temperature: 1, max_tokens: 64 }, stream);
    if (callsValid(msg.tool_calls, choice.function?.name) && finish === 'tool_calls') tight++;
    else console.log(`  ${label} max_tokens 64: ${finish} ${JSON.stringify(msg).slice(0, 200)}`);
  }
  check(`${label}: with max_tokens 64 a forced call is still complete and valid (${tight}/4)`, tight === 4);
  const named = await ask(client, { model: 'm', messages, tools, tool_choice: { type: 'function', function: { name: 'add' } },
    parallel_tool_calls: false, seed: 4, max_tokens: 300 }, false);
  check(`${label}: a named function is the one called`, named.finish === 'tool_calls' && callsValid(named.msg.tool_calls, 'add'),
    JSON.stringify(named));

  const par = await ask(client, { model: 'm', messages, tools, tool_choice: 'required', seed: 5, max_tokens: 400 }, true);
  check(`${label}: parallel calls, when the reply ends, all valid`, par.finish === 'length' || callsValid(par.msg.tool_calls),
    JSON.stringify(par).slice(0, 300));

  let autoOk = true;
  for (const seed of [1, 2]) {
    const a = await ask(client, { model: 'm', messages, tools, seed, max_tokens: 120 }, seed === 2);
    const good = a.msg.tool_calls ? a.finish === 'tool_calls' && callsValid(a.msg.tool_calls)
      : typeof a.msg.content === 'string' && !a.msg.content.includes('<tool_call>') && ['stop', 'length'].includes(a.finish);
    if (!good) { autoOk = false; console.log(`  ${label} auto seed ${seed}: ${JSON.stringify(a).slice(0, 300)}`); }
  }
  check(`${label}: auto gives text (no raw <tool_call>) or valid calls`, autoOk);

  const none = await ask(client, { model: 'm', messages, tools, tool_choice: 'none', seed: 1, max_tokens: 30 }, false);
  check(`${label}: none gives text`, !none.msg.tool_calls && typeof none.msg.content === 'string' && none.finish !== 'tool_calls');

  const history = [...messages, { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
    function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] }, { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 21 C' }];
  const h = await ask(client, { model: 'm', messages: history, tools, seed: 1, max_tokens: 30 }, false);
  check(`${label}: a history with a call and its result is answered`, ['stop', 'length', 'tool_calls'].includes(h.finish));
}

const post = async (body) => fetch(process.env.GEN_URL + '/v1/chat/completions', { method: 'POST',
  headers: { Authorization: `Bearer ${process.env.API_KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
for (const [what, body, re] of [
  ['an unknown named function', { messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, /nope/],
  ['tools not an array', { messages, tools: {} }, /tools/],
  ['a tool without a name', { messages, tools: [{ type: 'function', function: {} }] }, /tools\[0\]/],
  ['tool_choice without tools', { messages, tool_choice: 'required' }, /tool_choice/],
  ['tools with response_format', { messages, tools, response_format: { type: 'json_object' } }, /response_format/],
]) {
  const r = await post(body);
  const j = await r.json();
  check(`${what}: 400 naming it`, r.status === 400 && re.test(j.error?.message), JSON.stringify(j));
}

console.log(failed ? `${failed} tool-calling check(s) failed` : 'all tool-calling checks passed');
process.exit(failed ? 1 : 0);
