#!/usr/bin/env node
// server_bench.js — aggregate generation throughput of an OpenAI-compatible server with 1, 4 and 8 concurrent
// streaming clients, each generating 64 tokens (ignore_eos, so every client gets exactly that many).
//
//   node bench/server_bench.js MODEL.gguf [--hearth PATH] [-t THREADS] [--clients 1,4,8] [--tokens 64] [--runs 3]
//   node bench/server_bench.js --url http://127.0.0.1:8080 [...]     (an already running server, e.g. llama-server)
//
// With a model path it starts `hearth serve --parallel <max clients>` on a free loopback port and stops it at
// the end. Aggregate t/s = clients x tokens / wall time from the first request to the last stream's end
// (prompt processing included); the best of --runs runs is reported, after one warm-up run. Needs Node >= 18.
'use strict';
const { spawn } = require('node:child_process');
const path = require('node:path');

function parseArgs(argv) {
    const o = { model: null, url: null, hearth: path.join(__dirname, '..', 'build', 'hearth'), threads: null,
                clients: [1, 4, 8], tokens: 64, runs: 3, prompt: 'Once upon a time' };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = argv[i + 1];
        if (a === '--url') { o.url = v; i++; }
        else if (a === '--hearth') { o.hearth = v; i++; }
        else if (a === '-t') { o.threads = v; i++; }
        else if (a === '--clients') { o.clients = v.split(',').map(Number); i++; }
        else if (a === '--tokens') { o.tokens = Number(v); i++; }
        else if (a === '--runs') { o.runs = Number(v); i++; }
        else if (a === '--prompt') { o.prompt = v; i++; }
        else if (a === '-h' || a === '--help') { console.log(require('node:fs').readFileSync(__filename, 'utf8').split('\n').slice(1, 10).join('\n')); process.exit(0); }
        else if (!o.model && !a.startsWith('-')) o.model = a;
        else { console.error(`error: unknown argument ${a}`); process.exit(1); }
    }
    if (!o.model && !o.url) { console.error('error: give a model path or --url'); process.exit(1); }
    if (o.clients.some((c) => !(c >= 1)) || !(o.tokens >= 1) || !(o.runs >= 1)) { console.error('error: bad numbers'); process.exit(1); }
    return o;
}

function startServer(o) {
    const args = ['serve', '-m', o.model, '--host', '127.0.0.1', '--port', '0', '--parallel', String(Math.max(...o.clients))];
    if (o.threads) args.push('-t', String(o.threads));
    const proc = spawn(o.hearth, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    return new Promise((resolve, reject) => {
        let log = '';
        proc.stderr.on('data', (d) => {
            log += d;
            const m = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
            if (m) { proc.stderr.removeAllListeners('data'); proc.stderr.resume(); resolve({ proc, url: m[1] }); }
        });
        proc.on('exit', (code) => reject(new Error(`hearth serve exited (${code}): ${log}`)));
    });
}

// One streaming client; resolves to the number of content chunks received (about one per token).
async function client(url, o, seed) {
    const res = await fetch(`${url}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: o.prompt, max_tokens: o.tokens, ignore_eos: true, stream: true, seed,
                               temperature: 0.8, stream_options: { include_usage: true } }),
    });
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
    const dec = new TextDecoder();
    let buf = '', tokens = 0;
    for await (const chunk of res.body) {
        buf += dec.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
            const ev = buf.slice(0, i);
            buf = buf.slice(i + 2);
            if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
            const j = JSON.parse(ev.slice(6));
            if (j.usage) tokens = j.usage.completion_tokens;
        }
    }
    return tokens;
}

async function measure(url, o, n) {
    const t0 = process.hrtime.bigint();
    const counts = await Promise.all([...Array(n).keys()].map((i) => client(url, o, 1000 + i)));
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const total = counts.reduce((a, b) => a + b, 0);
    return { secs, total, tps: total / secs };
}

(async () => {
    const o = parseArgs(process.argv.slice(2));
    let server = null, url = o.url;
    if (!url) { server = await startServer(o); url = server.url; }
    try {
        await measure(url, o, Math.max(...o.clients));   // warm-up
        console.log(`model ${o.model || url}, ${o.tokens} tokens per client, best of ${o.runs}`);
        console.log('clients  aggregate t/s  per-client t/s  wall s');
        for (const n of o.clients) {
            let best = null;
            for (let r = 0; r < o.runs; r++) {
                const m = await measure(url, o, n);
                if (m.total !== n * o.tokens) throw new Error(`expected ${n * o.tokens} tokens, got ${m.total}`);
                if (!best || m.tps > best.tps) best = m;
            }
            console.log(`${String(n).padStart(7)}  ${best.tps.toFixed(1).padStart(13)}  ${(best.tps / n).toFixed(1).padStart(14)}  ${best.secs.toFixed(2).padStart(6)}`);
        }
    } finally {
        if (server) server.proc.kill('SIGINT');
    }
})().catch((e) => { console.error(`error: ${e.message}`); process.exit(1); });
