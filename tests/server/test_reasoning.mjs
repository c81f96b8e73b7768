// Reasoning returned apart, through the official clients: a Qwen3.5-templated server (the qwen35 fixture: the
// generation prompt opens <think>, so a greedy reply that never closes it is all reasoning) gives reasoning_content
// equal to the raw reply (reasoning_format "none") trimmed, the same streamed (openai), as Anthropic thinking blocks
// (plain and streamed), Ollama's "thinking" and, in the chat page (headless chromium), a folded "Thought" section;
// with enable_thinking off there is none; its XML tool calls come back typed and valid (plain and streamed). A gpt-oss-templated server
// (harmony) returns forced tool calls in harmony's form as tool_calls valid against the schema (plain, streamed,
// Anthropic tool_use), and an analysis message as reasoning_content equal to the raw reply's analysis body.
// Gemma 4's own call syntax comes back as valid tool_calls within max_tokens 64 (plain and streamed).
// Starts its own servers. Usage: HEARTH=... node test_reasoning.mjs
import { spawn } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import Ajv from 'ajv';
import puppeteer from 'puppeteer-core';
import { existsSync } from 'node:fs';

let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
async function start(model, template) {
  const p = spawn(process.env.HEARTH, ['serve', '--host', '127.0.0.1', '--port', '0', '--parallel', '2', '-c', '2048', '-t', '1',
    '-m', model, '--chat-template', template], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  p.stderr.on('data', (d) => { log += d; });
  for (let i = 0; i < 200 && !/listening on (http:\/\/[0-9.:]+)/.test(log); i++) await new Promise((r) => setTimeout(r, 50));
  const url = log.match(/listening on (http:\/\/[0-9.:]+)/)?.[1];
  if (!url) throw new Error('server did not start: ' + log);
  return { p, url };
}
const stop = async (s) => { s.p.kill('SIGTERM'); await new Promise((r) => s.p.on('exit', r)); };
const trim = (s) => s.replace(/^[ \n\r\t]+|[ \n\r\t]+$/g, '');

// ---- <think>: Qwen3.5 ----
let s = await start('data/models/qwen35.gguf', 'data/templates/qwen3.5.jinja');
let oa = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0 });
const messages = [{ role: 'user', content: 'Why is the sky blue?' }];
const base = { model: 'm', messages, max_tokens: 24, temperature: 0 };
const r = await oa.chat.completions.create(base);
const reasoning = r.choices[0].message.reasoning_content;
check('think: the reply is reasoning (the prompt opened the block)', reasoning?.length > 0 && r.choices[0].message.content === '',
  JSON.stringify(r.choices[0]));
const raw = await oa.chat.completions.create({ ...base, reasoning_format: 'none' });
check('think: reasoning_content is the raw reply, trimmed', trim(raw.choices[0].message.content) === reasoning &&
  raw.choices[0].message.reasoning_content === undefined, JSON.stringify(raw.choices[0]));
let sr = '', sc = '';
for await (const ch of await oa.chat.completions.create({ ...base, stream: true })) {
  sr += ch.choices[0]?.delta?.reasoning_content ?? '';
  sc += ch.choices[0]?.delta?.content ?? '';
}
check('think: streamed reasoning_content deltas add up to the same', sr === reasoning && sc === '', JSON.stringify({ sr, sc }));
const off = await oa.chat.completions.create({ ...base, chat_template_kwargs: { enable_thinking: false } });
check('think: enable_thinking false, no reasoning', off.choices[0].message.reasoning_content === undefined &&
  off.choices[0].message.content.length > 0, JSON.stringify(off.choices[0]));

const an = new Anthropic({ baseURL: s.url, apiKey: 'x', maxRetries: 0 });
const am = await an.messages.create({ model: 'm', max_tokens: 24, temperature: 0, messages, thinking: { type: 'enabled', budget_tokens: 1024 } });
check('anthropic: a thinking block with the reasoning', am.content.length === 1 && am.content[0].type === 'thinking' &&
  am.content[0].thinking === reasoning, JSON.stringify(am.content));
const ast = an.messages.stream({ model: 'm', max_tokens: 24, temperature: 0, messages, thinking: { type: 'enabled', budget_tokens: 1024 } });
let athink = '';
ast.on('thinking', (d) => { athink += d; });
const asm = await ast.finalMessage();
check('anthropic: streamed thinking, the same message', athink === reasoning && asm.content.length === 1 &&
  asm.content[0].type === 'thinking' && asm.content[0].thinking === reasoning, JSON.stringify(asm.content));
const aoff = await an.messages.create({ model: 'm', max_tokens: 24, temperature: 0, messages, thinking: { type: 'disabled' } });
check('anthropic: thinking disabled, a text block only', aoff.content.length === 1 && aoff.content[0].type === 'text' &&
  aoff.content[0].text === off.choices[0].message.content, JSON.stringify(aoff.content));

const ol = new Ollama({ host: s.url });
const oc = await ol.chat({ model: 'm', messages, think: true, options: { temperature: 0, num_predict: 24 } });
check('ollama: message.thinking', oc.message.thinking === reasoning && oc.message.content === '', JSON.stringify(oc.message));
let othink = '';
for await (const part of await ol.chat({ model: 'm', messages, think: true, stream: true, options: { temperature: 0, num_predict: 24 } }))
  othink += part.message.thinking ?? '';
check('ollama: streamed thinking adds up', othink === reasoning, JSON.stringify(othink));
const exe = process.env.CHROMIUM || '/usr/bin/chromium';
if (existsSync(exe)) {
  const browser = await puppeteer.launch({ executablePath: exe, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  try {
    const page = await browser.newPage();
    await page.goto(s.url + '/', { waitUntil: 'load' });
    await page.$eval('#temperature', (e) => { e.value = '0'; e.dispatchEvent(new Event('change')); });
    await page.$eval('#max_tokens', (e) => { e.value = '24'; e.dispatchEvent(new Event('change')); });
    await page.type('#prompt', messages[0].content);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('.assistant .stats')?.textContent.length > 0, { timeout: 30000 });
    const shown = await page.$eval('.assistant details.reasoning', (e) => ({ open: e.open, hidden: e.hidden,
      summary: e.querySelector('summary').textContent, text: e.querySelector('div').textContent }));
    check('chat page: the reasoning folded under "Thought"', !shown.hidden && !shown.open && shown.summary === 'Thought' &&
      shown.text === reasoning, JSON.stringify(shown));
  } finally { await browser.close(); }
} else console.log(`SKIP: chat page check, no browser at ${exe}`);

// Qwen3.5's XML tool calls: typed values valid against the schema (a string raw, an integer and an enum)
const xparams = { type: 'object', properties: { city: { type: 'string' }, unit: { enum: ['C', 'F'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['unit', 'days'], additionalProperties: false };
const xvalid = new Ajv().compile(xparams);
const xtools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: xparams } }];
const xbase = { model: 'm', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: xtools, tool_choice: 'required',
  max_tokens: 160, temperature: 0, parallel_tool_calls: false, chat_template_kwargs: { enable_thinking: false } };
const xr = await oa.chat.completions.create(xbase);
const xc = xr.choices[0].message.tool_calls ?? [];
check('xml: a call, its arguments typed and valid', xr.choices[0].finish_reason === 'tool_calls' && xc.length === 1 &&
  xvalid(JSON.parse(xc[0].function.arguments)), JSON.stringify(xr.choices[0]));
let xargs = '';
for await (const ch of await oa.chat.completions.create({ ...xbase, stream: true }))
  for (const t of ch.choices[0]?.delta?.tool_calls ?? []) xargs += t.function?.arguments ?? '';
check('xml: streamed, the same call', xargs === xc[0]?.function.arguments, xargs);
await stop(s);

// ---- harmony: gpt-oss ----
s = await start('data/models/gpt-oss.gguf', 'data/templates/gpt-oss.jinja');
oa = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0 });
const params = { type: 'object', properties: { city: { enum: ['Paris', 'Rome', 'Oslo'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'], additionalProperties: false };
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: params } },
  { type: 'function', function: { name: 'get_time', description: 'The time', parameters: { type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } }, required: ['tz'], additionalProperties: false } } }];
const hm = [{ role: 'user', content: 'Weather in Paris for 3 days?' }];
const valid = new Ajv().compile(params);
const tc = await oa.chat.completions.create({ model: 'm', messages: hm, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
  max_tokens: 200, temperature: 0 });
const call = tc.choices[0].message.tool_calls?.[0];
check('harmony: a named call, arguments valid', tc.choices[0].finish_reason === 'tool_calls' && call?.function.name === 'get_weather' &&
  valid(JSON.parse(call.function.arguments)), JSON.stringify(tc.choices[0]));
const raw2 = await oa.chat.completions.create({ model: 'm', messages: hm, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
  max_tokens: 200, temperature: 0, reasoning_format: 'none' });
const rtext = raw2.choices[0].message.content;
check('harmony: the raw reply is harmony\'s call form', /<\|channel\|>commentary to=functions\.get_weather <\|constrain\|>json<\|message\|>\{/.test(rtext), rtext);
const ana = rtext.match(/^<\|channel\|>analysis<\|message\|>([\s\S]*?)<\|end\|>/);
check('harmony: reasoning_content is the analysis message (if any)', ana ? tc.choices[0].message.reasoning_content === trim(ana[1])
  : tc.choices[0].message.reasoning_content === undefined, JSON.stringify({ rtext, rc: tc.choices[0].message.reasoning_content }));
let args = '', names = '';
for await (const ch of await oa.chat.completions.create({ model: 'm', messages: hm, tools, tool_choice: 'required', max_tokens: 200,
  temperature: 0, stream: true })) {
  for (const t of ch.choices[0]?.delta?.tool_calls ?? []) { args += t.function?.arguments ?? ''; names += t.function?.name ?? ''; }
}
check('harmony: a required call, streamed', ['get_weather', 'get_time'].includes(names) && JSON.parse(args) !== null &&
  (names !== 'get_weather' || valid(JSON.parse(args))), JSON.stringify({ names, args }));
const an2 = new Anthropic({ baseURL: s.url, apiKey: 'x', maxRetries: 0 });
const at = await an2.messages.create({ model: 'm', max_tokens: 200, temperature: 0, messages: hm, tool_choice: { type: 'any' },
  tools: [{ name: 'get_weather', description: 'The weather', input_schema: params }] });
const use = at.content.find((b) => b.type === 'tool_use');
check('harmony: anthropic tool_choice any, a valid tool_use', at.stop_reason === 'tool_use' && use?.name === 'get_weather' && valid(use.input),
  JSON.stringify(at.content));
await stop(s);

// ---- Gemma 4's calls: <|tool_call>call:NAME{key:<|"|>text<|"|>,...}<tool_call|>, typed and valid ----
s = await start('data/models/gemma4.gguf', 'data/templates/gemma4.jinja');
oa = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'x', maxRetries: 0 });
const gparams = { type: 'object', properties: { city: { type: 'string' }, unit: { enum: ['C', 'F'] }, days: { type: 'integer', minimum: 1, maximum: 7 },
  tags: { type: 'array', items: { type: 'string' } } }, required: ['unit', 'days'], additionalProperties: false };
const gvalid = new Ajv().compile(gparams);
const gbase = { model: 'm', messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 64, temperature: 0,
  tools: [{ type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: gparams } }], tool_choice: 'required' };
const gr = await oa.chat.completions.create(gbase);
const gc = gr.choices[0].message.tool_calls ?? [];
check('gemma 4: a call within max_tokens 64, typed and valid', gr.choices[0].finish_reason === 'tool_calls' && gc.length >= 1 &&
  gc.every((c) => c.function.name === 'get_weather' && gvalid(JSON.parse(c.function.arguments))), JSON.stringify(gr.choices[0]));
let gargs = '';
for await (const ch of await oa.chat.completions.create({ ...gbase, stream: true, parallel_tool_calls: false }))
  for (const t of ch.choices[0]?.delta?.tool_calls ?? []) gargs += t.function?.arguments ?? '';
check('gemma 4: streamed, a valid call', gargs.length > 0 && gvalid(JSON.parse(gargs)), gargs);
await stop(s);

if (failed) { console.log(`${failed} check(s) failed`); process.exit(1); }
console.log('all reasoning checks passed');
