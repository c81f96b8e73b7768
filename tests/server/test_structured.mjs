// Structured output through the official openai client: every reply constrained by response_format json_schema
// (the schemas of tests/data/schemas and the held-out tests/data/schemas-heldout, several seeds, plain and streamed)
// must parse and validate (ajv, with ajv-formats), none cut by max_tokens; a max_tokens too small is a 400 and one just large enough gives a valid
// reply; unknown formats are named in "warnings" (streamed: on the final chunk); json_object replies are objects; llama-server's "grammar"
// field is obeyed; a keyword that cannot be enforced is a 400 naming it; Ollama's "format" too.
// Usage: GEN_URL=... API_KEY=... node test_structured.mjs
import OpenAI from 'openai';
import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import AjvDraft04 from 'ajv-draft-04';
import addFormats from 'ajv-formats';
import { readFileSync, readdirSync } from 'node:fs';

const dir = new URL('../data/schemas/', import.meta.url);
const client = new OpenAI({ baseURL: process.env.GEN_URL + '/v1', apiKey: process.env.API_KEY });
let failed = 0;
const check = (name, ok, detail = '') => {
  if (!ok) { failed++; console.log(`FAIL: ${name} ${detail}`); } else console.log(`ok: ${name}`);
};
const validator = (schema) => {
  const s = schema.$schema || '';
  // multipleOfPrecision: ajv checks multipleOf 0.01 by a float division (1.07 / 0.01 is not a whole double)
  const o = { strict: false, multipleOfPrecision: 9 };
  const ajv = s.includes('draft-04') ? new AjvDraft04(o) : s.includes('2020-12') ? new Ajv2020(o) : new Ajv(o);
  addFormats(ajv);
  return ajv.compile(schema);
};
const messages = [{ role: 'user', content: 'Describe it as JSON.' }];

// the corpus table: per keyword family, the schemas that use it, their replies valid of all, and those refused
const FAMILIES = [['oneOf', ['oneOf']], ['anyOf', ['anyOf']], ['allOf', ['allOf']], ['not', ['not']],
  ['if/then/else', ['if']], ['multipleOf', ['multipleOf']], ['patternProperties/propertyNames', ['patternProperties', 'propertyNames']],
  ['additionalProperties schema', []], ['dependencies', ['dependentRequired', 'dependencies', 'dependentSchemas']],
  ['contains', ['contains']], ['format', ['format']], ['pattern', ['pattern']], ['min/maxLength', ['minLength', 'maxLength']],
  ['numeric bounds', ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum']],
  ['min/maxProperties', ['minProperties', 'maxProperties']], ['$ref', ['$ref']], ['enum/const', ['enum', 'const']],
  ['array items', ['items', 'prefixItems', 'minItems', 'maxItems', 'uniqueItems']]];
const familiesOf = (schema) => {
  const seen = new Set();
  const walk = (x, inProps) => {
    if (Array.isArray(x)) { x.forEach((y) => walk(y, false)); return; }
    if (!x || typeof x !== 'object') return;
    for (const [k, v] of Object.entries(x)) {
      if (!inProps) for (const [fam, kws] of FAMILIES) if (kws.includes(k)) seen.add(fam);
      if (!inProps && k === 'additionalProperties' && v && typeof v === 'object') seen.add('additionalProperties schema');
      if (['enum', 'const', 'examples', 'default'].includes(k) && !inProps) continue;   /* values, not schemas */
      walk(v, !inProps && ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas', 'dependencies'].includes(k));
    }
  };
  walk(schema, false);
  return seen;
};
const post = async (path, body) => fetch(process.env.GEN_URL + path, { method: 'POST',
  headers: { Authorization: `Bearer ${process.env.API_KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

// Each schema of a folder as response_format, three replies (two seeds, one streamed), four schemas at a time (the
// server batches them; replies do not depend on it). Files named unsupported* must be a 400 naming the keyword; in
// a held-out folder (refusals allowed) any schema may be refused, and the share accepted is the coverage.
async function corpus(folder, heldOut) {
  const dir = new URL(folder, import.meta.url);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  const st = { valid: 0, cut: 0, broken: 0, invalid: 0, total: 0, refused: 0, e5xx: 0, wrongly: [] };
  const table = new Map(FAMILIES.map(([f]) => [f, { schemas: 0, replies: 0, valid: 0, refused: 0 }]));
  const one = async (f) => {
    const schema = JSON.parse(readFileSync(new URL(f, dir)));
    const format = { type: 'json_schema', json_schema: { name: f.replace('.json', ''), schema, strict: true } };
    const fams = familiesOf(schema);
    if (f.startsWith('unsupported') || heldOut) {   /* a keyword hearth cannot enforce: a 400 naming it, never a looser reply */
      const r = await post('/v1/chat/completions', { messages, max_tokens: 8, response_format: format });
      const j = await r.json();
      if (r.status >= 500) st.e5xx++;
      if (r.status === 400 && /not supported/.test(j.error?.message)) {
        st.refused++;
        if (heldOut) console.log(`  refused: ${f}: ${j.error.message}`);
        for (const fam of fams) { table.get(fam).schemas++; table.get(fam).refused++; }
        return;
      }
      const accepted = r.status === 200 || (r.status === 400 && /too small/.test(j.error?.message));   /* 8 tokens: the budget rule */
      if (!heldOut || !accepted) { st.wrongly.push(`${f}: ${r.status} ${JSON.stringify(j).slice(0, 120)}`); return; }
    }
    const validate = validator(schema);
    for (const fam of fams) table.get(fam).schemas++;
    for (const [seed, stream] of [[1, false], [2, false], [3, true]]) {
      const req = { model: 'hearth', messages, seed, temperature: 0.8, max_tokens: 384, response_format: format };
      let text = '', finish = '';
      try {
        if (stream) {
          for await (const c of await client.chat.completions.create({ ...req, stream: true })) {
            text += c.choices[0]?.delta?.content ?? '';
            finish = c.choices[0]?.finish_reason ?? finish;
          }
        } else {
          const r = await client.chat.completions.create(req);
          text = r.choices[0].message.content, finish = r.choices[0].finish_reason;
        }
      } catch (e) { if (e.status >= 500) st.e5xx++; st.wrongly.push(`${f}: ${e.status} ${e.message}`); break; }
      st.total++;
      let doc, parsed = true;
      try { doc = JSON.parse(text); } catch { parsed = false; }
      for (const fam of fams) table.get(fam).replies++;
      if (parsed && validate(doc)) { st.valid++; for (const fam of fams) table.get(fam).valid++; }
      else if (finish === 'length') { st.cut++; if (process.env.SHOW_CUT) console.log(`  cut: ${f} seed ${seed}: ${text.slice(0, 160)}`); }
      else {
        st.broken++, st.invalid += !parsed;
        console.log(`  broken: ${f} seed ${seed}${stream ? ' streamed' : ''}: ${text.slice(0, 200)} ${JSON.stringify(validate.errors)}`);
      }
    }
  };
  const queue = [...files];
  await Promise.all([0, 1, 2, 3].map(async () => { while (queue.length) await one(queue.shift()); }));
  const accepted = files.length - st.refused;
  console.log(`  ${folder} (${files.length} schemas): ${st.total} replies, ${st.valid} valid, ${st.cut} cut by max_tokens, ` +
    `${st.broken} noncompliant (${st.invalid} invalid JSON), ${st.e5xx} 5xx; ${st.refused} schemas refused` +
    (heldOut ? `; coverage ${accepted}/${files.length} = ${(accepted / files.length).toFixed(2)}` : ''));
  console.log('  keyword family                    schemas  replies valid  schemas refused');
  for (const [fam, t] of table) if (t.schemas)
    console.log(`  ${fam.padEnd(34)}${String(t.schemas).padStart(7)}  ${String(t.valid).padStart(6)}/${String(t.replies).padEnd(6)}${String(t.refused).padStart(9)}`);
  const tag = heldOut ? 'held-out json_schema' : 'json_schema';
  check(`${tag}: no reply breaks its schema`, st.broken === 0, `${st.broken} broken`);
  check(`${tag}: no reply cut by max_tokens (the grammar ends within the budget)`, st.cut === 0, `${st.cut} cut`);
  check(`${tag}: at least 90% of replies are complete and valid`, st.valid >= 0.9 * st.total, `${st.valid}/${st.total}`);
  check(`${tag}: no 5xx`, st.e5xx === 0, `${st.e5xx}`);
  if (heldOut) check(`${tag}: at least 90% of the schemas accepted`, accepted >= 0.9 * files.length, `${accepted}/${files.length}`);
  check(`${tag}: supported schemas accepted, unsupported ones refused with a 400`, !st.wrongly.length, st.wrongly.join('; '));
}
await corpus('../data/schemas/', false);
// written from real-world shapes without being run first, then kept as they were: what a user's schema meets
await corpus('../data/schemas-heldout/', true);

const plain = await client.chat.completions.create({ model: 'hearth', messages, seed: 7, max_tokens: 384,
  response_format: { type: 'json_object' } });
let obj = null;
try { obj = JSON.parse(plain.choices[0].message.content); } catch {}
check('json_object: a JSON object (or cut by max_tokens)', (obj && typeof obj === 'object' && !Array.isArray(obj)) ||
  plain.choices[0].finish_reason === 'length', plain.choices[0].message.content.slice(0, 200));

const g = await (await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 64, seed: 3,
  grammar: 'root ::= " there was a " ("cat" | "dog") "." ' })).json();
check('grammar (GBNF): the reply follows it and ends there', /^ there was a (cat|dog)\.$/.test(g.choices?.[0]?.text) &&
  g.choices[0].finish_reason === 'stop', JSON.stringify(g));

// the budget rule: a max_tokens too small for any valid document is a 400 saying how many it takes; with exactly
// that many (and a few more) the reply is complete and valid, and ends with "stop"
const invoice = JSON.parse(readFileSync(new URL('invoice.json', dir)));
const invFormat = { type: 'json_schema', json_schema: { name: 'invoice', schema: invoice } };
const small = await post('/v1/chat/completions', { messages, max_tokens: 5, response_format: invFormat });
const sm = (await small.json()).error?.message ?? '';
const need = Number(/takes up to (\d+)/.exec(sm)?.[1]);
check('budget: max_tokens too small for any document is a 400 saying so', small.status === 400 && /too small/.test(sm) && need > 5, sm);
let fits = 0;
for (const [seed, extra] of [[1, 0], [2, 0], [3, 4], [4, 16]]) {
  const r = await client.chat.completions.create({ model: 'hearth', messages, seed, temperature: 1, max_tokens: need + extra,
    response_format: invFormat });
  let d = null;
  try { d = JSON.parse(r.choices[0].message.content); } catch {}
  if (d && validator(invoice)(d) && r.choices[0].finish_reason === 'stop' && r.usage.completion_tokens <= need + extra) fits++;
  else console.log(`  budget ${need + extra}: ${r.choices[0].finish_reason} ${r.choices[0].message.content.slice(0, 200)}`);
}
check(`budget: with max_tokens at the shortest document's bound (${need}) and a little above, complete and valid, "stop"`, fits === 4, `${fits}/4`);

const unk = await (await post('/v1/chat/completions', { messages, max_tokens: 200, seed: 1, response_format: { type: 'json_schema',
  json_schema: { name: 'u', schema: JSON.parse(readFileSync(new URL('unknown_format.json', dir))) } } })).json();
check('an unknown format is an annotation: answered, and named in "warnings"', unk.choices?.[0]?.finish_reason === 'stop' &&
  /feed-onestop-id/.test(unk.warnings?.[0]), JSON.stringify(unk).slice(0, 300));

// streamed, the warnings ride on the final chunk (the one with finish_reason), once
const us = await post('/v1/chat/completions', { messages, max_tokens: 200, seed: 1, stream: true, response_format: { type: 'json_schema',
  json_schema: { name: 'u', schema: JSON.parse(readFileSync(new URL('unknown_format.json', dir))) } } });
const events = (await us.text()).split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
const fin = events.find((e) => e.choices?.[0]?.finish_reason);
check('an unknown format, streamed: named in the final chunk\'s "warnings"', fin?.choices[0].finish_reason === 'stop' &&
  /feed-onestop-id/.test(fin?.warnings?.[0]) && events.filter((e) => e.warnings).length === 1, JSON.stringify(fin).slice(0, 300));

const bad = await post('/v1/chat/completions', { messages, response_format: { type: 'json_schema',
  json_schema: { name: 'x', schema: JSON.parse(readFileSync(new URL('unsupported_not_pattern.json', dir))) } } });
const be = await bad.json();
check('an unenforceable keyword: 400 naming it', bad.status === 400 && /"not"/.test(be.error?.message), JSON.stringify(be));
const badg = await post('/v1/completions', { prompt: 'x', grammar: 'root ::= "a" b' });
check('a bad grammar: 400 with its line', badg.status === 400 && /line 1/.test((await badg.json()).error?.message));

const ol = await (await post('/api/chat', { model: 'hearth', messages, stream: false, format: JSON.parse(readFileSync(new URL('person.json', dir))),
  options: { seed: 2, num_predict: 384 } })).json();
let od = null;
try { od = JSON.parse(ol.message?.content); } catch {}
const pv = validator(JSON.parse(readFileSync(new URL('person.json', dir))));
check('Ollama format (a schema): a valid reply', (od && pv(od)) || ol.done_reason === 'length', JSON.stringify(ol).slice(0, 300));

console.log(failed ? `${failed} structured-output check(s) failed` : 'all structured-output checks passed');
process.exit(failed ? 1 : 0);
