// seeds.mjs — writes the fuzzers' seed corpora from the test fixtures, so no blobs are committed.
// Usage (from tests/): node fuzz/seeds.mjs OUT_DIR   ->  OUT_DIR/<target>/<seed files>
import fs from 'node:fs';
import path from 'node:path';

const out = process.argv[2];
if (!out) { console.error('usage: node fuzz/seeds.mjs OUT_DIR'); process.exit(2); }
const put = (target, name, data) => {
  fs.mkdirSync(path.join(out, target), { recursive: true });
  fs.writeFileSync(path.join(out, target, name), data);
};

// ---- a small GGUF writer: every value type, nested arrays, tensors of several types ----
const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
const str = (s) => { const b = Buffer.from(s); return Buffer.concat([u64(b.length), b]); };
function gguf(kvs, tensors, align = 32) {
  const parts = [Buffer.from('GGUF'), u32(3), u64(tensors.length), u64(kvs.length)];
  for (const [k, type, val] of kvs) parts.push(str(k), u32(type), val);
  let off = 0;
  const datas = [];
  for (const t of tensors) {
    parts.push(str(t.name), u32(t.ne.length), ...t.ne.map(u64), u32(t.type), u64(off));
    const pad = (align - (t.data.length % align)) % align;
    datas.push(t.data, Buffer.alloc(pad));
    off += t.data.length + pad;
  }
  let head = Buffer.concat(parts);
  head = Buffer.concat([head, Buffer.alloc((align - (head.length % align)) % align)]);
  return Buffer.concat([head, ...datas]);
}
const f32s = (n, f) => { const b = Buffer.alloc(4 * n); for (let i = 0; i < n; i++) b.writeFloatLE(f(i), 4 * i); return b; };
const arr = (type, vals, enc) => Buffer.concat([u32(type), u64(vals.length), ...vals.map(enc)]);
put('fuzz_gguf', 'all-types.gguf', gguf([
  ['general.architecture', 8, str('llama')], ['u8', 0, Buffer.from([7])], ['i8', 1, Buffer.from([0xff])],
  ['u16', 2, Buffer.from([1, 2])], ['i16', 3, Buffer.from([0xfe, 0xff])], ['u32', 4, u32(70000)],
  ['i32', 5, u32(0xfffffff0)], ['f32', 6, f32s(1, () => 1.5)], ['bool', 7, Buffer.from([1])],
  ['u64', 10, u64(1n << 40n)], ['i64', 11, u64(-5n & ((1n << 64n) - 1n))], ['f64', 12, Buffer.alloc(8)],
  ['strs', 9, arr(8, ['a', '', 'ünï'], str)], ['ints', 9, arr(5, [1, -2, 3], (v) => { const b = Buffer.alloc(4); b.writeInt32LE(v); return b; })],
  ['floats', 9, arr(6, [0.5, NaN, 1e30], (v) => f32s(1, () => v))],
  ['nested', 9, Buffer.concat([u32(9), u64(2), arr(4, [1, 2], u32), arr(8, ['x'], str)])],
], [
  { name: 'f32', type: 0, ne: [8, 2], data: f32s(16, (i) => i / 3) },
  { name: 'f16', type: 1, ne: [32], data: Buffer.alloc(64, 0x3c) },
  { name: 'q8_0', type: 8, ne: [64], data: Buffer.alloc(68, 1) },
  { name: 'q4_k', type: 12, ne: [256], data: Buffer.alloc(144, 0x11) },
  { name: 'iq2_xxs', type: 16, ne: [256], data: Buffer.alloc(66, 0x21) },
  { name: 'iq1_m', type: 29, ne: [256], data: Buffer.alloc(56, 0xf3) },
  { name: 'mxfp4', type: 39, ne: [64], data: Buffer.alloc(34, 0x7f) },
]));
for (const f of ['qwen3-Q8_0.gguf', 'llama-Q2_K.gguf']) put('fuzz_gguf', f, fs.readFileSync(`data/models/${f}`));
for (const f of ['qwen3-Q8_0.gguf', 'llama-Q2_K.gguf', 'stories260K.gguf', 'gemma3-Q8_0.gguf', 'qwen3moe-Q8_0.gguf',
                 'llama-IQ1_M.gguf'])
  put('fuzz_model', f, fs.readFileSync(`data/models/${f}`));

// ---- safetensors ----
function st(tensors, meta) {
  const header = {}, datas = [];
  let off = 0;
  if (meta) header.__metadata__ = meta;
  for (const t of tensors) { header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.data.length] }; datas.push(t.data); off += t.data.length; }
  const h = Buffer.from(JSON.stringify(header));
  return Buffer.concat([u64(h.length), h, ...datas]);
}
put('fuzz_safetensors', 'small.safetensors', st([
  { name: 'model.embed_tokens.weight', dtype: 'F32', shape: [4, 2], data: f32s(8, (i) => i) },
  { name: 'h', dtype: 'F16', shape: [3], data: Buffer.from([0, 0x3c, 0, 0xc0, 0xff, 0x7b]) },
  { name: 'b', dtype: 'BF16', shape: [2, 1], data: Buffer.from([0x80, 0x3f, 0, 0x40]) },
  { name: 'ids', dtype: 'I64', shape: [1], data: u64(3) },
], { format: 'pt' }));
put('fuzz_safetensors', 'empty.safetensors', st([], null));

// ---- tokenizer.json: small ones of each model kind, with normalizers, pre-tokenizers and decoders ----
const bpeVocab = { '<unk>': 0, '<s>': 1, '</s>': 2, 'h': 3, 'e': 4, 'l': 5, 'o': 6, 'he': 7, 'll': 8, 'hell': 9, 'hello': 10, '▁': 11, '<0x41>': 12 };
const tj = (model, extra) => JSON.stringify({ version: '1.0', added_tokens: [{ id: 1, content: '<s>', special: true, lstrip: false, rstrip: false, normalized: false, single_word: false }], ...extra, model });
put('fuzz_tokenizer_json', 'bpe-fallback.json', tj({ type: 'BPE', vocab: bpeVocab, merges: ['h e', 'l l', 'he ll', 'hell o'], byte_fallback: true, unk_token: '<unk>' },
  { normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }] } }));
put('fuzz_tokenizer_json', 'bytelevel.json', tj({ type: 'BPE', vocab: { 'Ġ': 0, 'h': 1, 'i': 2, 'hi': 3, 'Ġhi': 4, '<s>': 5 }, merges: [['h', 'i'], ['Ġ', 'hi']] },
  { pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+" }, behavior: 'Isolated' }, { type: 'ByteLevel', add_prefix_space: false, use_regex: false }] },
    normalizer: { type: 'NFC' }, decoder: { type: 'ByteLevel' } }));
put('fuzz_tokenizer_json', 'wordpiece.json', tj({ type: 'WordPiece', vocab: { '[UNK]': 0, '[CLS]': 1, '[SEP]': 2, 'hello': 3, '##o': 4, 'w': 5 }, unk_token: '[UNK]', continuing_subword_prefix: '##' },
  { normalizer: { type: 'BertNormalizer', lowercase: true, strip_accents: null, clean_text: true, handle_chinese_chars: true }, pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '[CLS]' } }, { Sequence: { id: 'A' } }] } }));

// ---- text for the tokenizers ----
let k = 0;
for (const f of fs.readdirSync('data/tokenizer').filter((f) => f.endsWith('.inp')).slice(0, 3))
  for (const s of fs.readFileSync(`data/tokenizer/${f}`, 'utf8').split('\n__ggml_vocab_test__\n')) put('fuzz_tokenize', `t${k++}.txt`, s);

// ---- chat templates, each with its conversation after a NUL ----
const cases = JSON.parse(fs.readFileSync('data/chat-templates.json', 'utf8'));
const seen = new Set();
for (const c of cases) {
  if (seen.has(c.template)) continue;
  seen.add(c.template);
  put('fuzz_jinja', `${c.name.replace(/[^\w.-]/g, '_')}.jinja`, Buffer.concat([Buffer.from(c.template), Buffer.from([0]), Buffer.from(JSON.stringify(c.messages))]));
}
put('fuzz_jinja', 'features.jinja', '{% set ns = namespace(x=0) %}{% for m in messages if m.role != "tool" %}{{ loop.index }}:{{ m.content | trim | upper }}{% if not loop.last %}, {% endif %}{% set ns.x = ns.x + 1 %}{% endfor %}{{ ns.x }}{{ "%s-%d" % ("a", 3) }}{{ [1,2,3] | join("|") }}{{ {"k": "v"} | tojson }}{% macro f(a, b=2) %}{{ a * b }}{% endmacro %}{{ f(3) }}{{ raise_exception("x") if false }}');

// ---- request bodies ----
const bodies = {
  chat: { model: 'm', messages: [{ role: 'system', content: 'x' }, { role: 'user', content: [{ type: 'text', text: 'hi' }] }], max_tokens: 4, temperature: 0.5, top_p: 0.9, stop: ['a', 'b'], logprobs: true, top_logprobs: 2, seed: 3, stream: true, stream_options: { include_usage: true }, logit_bias: { 5: -100 } },
  completion: { prompt: ['Once', 'upon'], max_tokens: 8, n: 1, echo: false, presence_penalty: 0.5, frequency_penalty: 0.1 },
  embed: { input: ['a', 'b'], encoding_format: 'base64' },
  tokens: { prompt: [1, 2, 3], max_tokens: 2 },
};
for (const [n, b] of Object.entries(bodies)) put('fuzz_request', `${n}.json`, JSON.stringify(b));
console.log(`seed corpora written to ${out}`);

// ---- grammars (first byte 0) and JSON Schemas (first byte 1): the test schemas and a few GBNF shapes ----
for (const d of ['data/schemas', 'data/schemas-heldout'])
  for (const f of fs.readdirSync(d)) put('fuzz_grammar', `schema-${f}`, Buffer.concat([Buffer.from([1]), fs.readFileSync(path.join(d, f))]));
[
  'root ::= "a" [b-d]* ("x" | "yz")?',
  'root ::= x{2,3}\nx ::= "ab" # c\n',
  'root ::= [^a]+ "\u00e9" .\n',
  'root ::= ("a" root "b")?',
  'root ::= x | y\n  | "z"\nx ::= "x" (\n "1" |\n "2")\ny ::= [\\]\\-]{1,}',
].forEach((g, i) => put('fuzz_grammar', `gbnf-${i}`, Buffer.concat([Buffer.from([0]), Buffer.from(g)])));
