// Anthropic's Messages API through the official @anthropic-ai/sdk client: text replies (id, content blocks,
// stop_reason, usage), system prompts, stop_sequences, streaming (the event sequence assembled by the SDK
// gives the same message as the plain call), forced tool_use with input valid against input_schema (plain and
// streamed), a tool_result round trip, count_tokens, x-api-key auth, and errors in Anthropic's shape.
// Usage: GEN_URL=... API_KEY=... node test_anthropic.mjs
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';

let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const client = new Anthropic({ baseURL: process.env.GEN_URL, apiKey: process.env.API_KEY, maxRetries: 0 });
const model = 'hearth';
const messages = [{ role: 'user', content: 'Tell me a story.' }];

const m = await client.messages.create({ model, max_tokens: 40, temperature: 0, messages });
check('text: a message with a text block', /^msg_/.test(m.id) && m.type === 'message' && m.role === 'assistant' &&
  m.content.length === 1 && m.content[0].type === 'text' && m.content[0].text.length > 0, JSON.stringify(m));
check('text: stop_reason and usage', ['end_turn', 'max_tokens'].includes(m.stop_reason) && m.stop_sequence === null &&
  m.usage.input_tokens > 0 && m.usage.output_tokens > 0 && m.usage.output_tokens <= 40, JSON.stringify(m));

const stream = client.messages.stream({ model, max_tokens: 40, temperature: 0, messages });
let deltas = '';
stream.on('text', (t) => { deltas += t; });
const sm = await stream.finalMessage();
check('stream: the same message as the plain call', sm.content[0]?.text === m.content[0].text && deltas === m.content[0].text &&
  sm.stop_reason === m.stop_reason && sm.usage.output_tokens === m.usage.output_tokens, JSON.stringify(sm));

const stopped = await client.messages.create({ model, max_tokens: 100, temperature: 0, messages, system: 'You tell stories.',
  stop_sequences: ['.'] });
check('stop_sequences: stop_reason stop_sequence, the text cut before it', stopped.stop_reason === 'stop_sequence' &&
  stopped.stop_sequence === '.' && !stopped.content[0].text.includes('.'), JSON.stringify(stopped));

const tools = [{ name: 'get_weather', description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 24 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'], additionalProperties: false } }];
const validate = new Ajv({ strict: false }).compile(tools[0].input_schema);
let good = 0;
for (const seed of [1, 2, 3]) {
  const req = { model, max_tokens: 300, messages, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, temperature: 0.8 };
  const r = seed === 2 ? await client.messages.stream(req).finalMessage() : await client.messages.create(req);
  const use = r.content.find((b) => b.type === 'tool_use');
  if (r.stop_reason === 'tool_use' && use && /^toolu_/.test(use.id) && use.name === 'get_weather' && validate(use.input)) good++;
  else console.log(`  tool_use attempt ${seed}: ${JSON.stringify(r).slice(0, 300)}`);
}
check(`tool_choice any: a tool_use whose input validates (${good}/3, one streamed)`, good === 3);

let tight = 0;   /* max_tokens 64: the tool_use still completes */
for (const stream of [false, true]) {
  const req = { model, max_tokens: 64, messages, tools, temperature: 1, tool_choice: { type: 'any', disable_parallel_tool_use: true } };
  const r = stream ? await client.messages.stream(req).finalMessage() : await client.messages.create(req);
  const tu = r.content.find((b) => b.type === 'tool_use');
  if (tu && r.stop_reason === 'tool_use' && validate(tu.input)) tight++;
  else console.log(`  max_tokens 64: ${JSON.stringify(r).slice(0, 300)}`);
}
check(`tool_choice any with max_tokens 64: a complete, valid tool_use (${tight}/2)`, tight === 2);
const named = await client.messages.create({ model, max_tokens: 300, messages, tools,
  tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true } });
const nu = named.content.find((b) => b.type === 'tool_use');
const rt = await client.messages.create({ model, max_tokens: 30, tools, messages: [...messages,
  { role: 'assistant', content: named.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: nu?.id ?? 'x', content: 'Sunny' }] }] });
check('tool_result round trip: answered', nu && ['end_turn', 'max_tokens', 'tool_use'].includes(rt.stop_reason), JSON.stringify(rt));

const count = await client.messages.countTokens({ model, messages });
check('count_tokens: the input_tokens of the same request', count.input_tokens === m.usage.input_tokens, JSON.stringify(count));

const fails = async (what, p, status, re) => {
  let e = null;
  try { await p; } catch (x) { e = x; }
  check(what, e && e.status === status && e.error?.type === 'error' && re.test(e.error?.error?.message ?? '') &&
    (status !== 400 || e.error.error.type === 'invalid_request_error'), String(e));
};
await fails('no max_tokens: 400 in Anthropic\'s shape', client.messages.create({ model, messages }), 400, /max_tokens/);
await fails('an image block: 400 naming it', client.messages.create({ model, max_tokens: 5, messages: [{ role: 'user',
  content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }), 400, /image/);
await fails('a bad role: 400', client.messages.create({ model, max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }), 400, /role/);
await fails('a wrong x-api-key: 401', new Anthropic({ baseURL: process.env.GEN_URL, apiKey: 'nope', maxRetries: 0 })
  .messages.create({ model, max_tokens: 5, messages }), 401, /key/);

console.log(failed ? `${failed} Anthropic check(s) failed` : 'all Anthropic checks passed');
process.exit(failed ? 1 : 0);
