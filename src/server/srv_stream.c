/* srv_stream.c — a streamed reply's bytes: what a task produced since the last call, formatted as OpenAI's SSE
 * chunks, Anthropic's events or Ollama's NDJSON lines; before the first token, prompt progress chunks for a
 * client that asked (return_progress) and, on SSE streams, a comment line (": keepalive") whenever nothing was
 * sent for a while, so that proxies and clients with idle timeouts of their own see a live stream. Apart from
 * the HTTP layer (server.c, which waits for the task and hands the bytes to libmicrohttpd) so that the
 * allocation-failure sweep drives the same code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "server/srv_internal.h"

/* With tools, a chat reply is split into text and calls only once it is whole: it is sent at the end. */
bool stream_tools_pending(const api_req *r) { return r->kind == API_CHAT && !r->ollama && r->tools.mode != TOOLS_OFF; }

/* Appends s (malloc'd, taken) to the bytes to send. s is NULL only when making it ran out of memory: then, or
 * when the buffer cannot grow, the stream is lost from here on. */
static void out_add(srv_stream *st, char *s) {
    if (!s || st->lost) { st->lost = true; free(s); return; }
    size_t n = strlen(s);
    if (st->out_n + n > st->out_cap) {
        size_t nc = HT_MAX(st->out_cap * 2, st->out_n + n + 256);
        char *p = realloc(st->out, nc);
        if (!p) { free(s); st->lost = true; return; }
        st->out = p; st->out_cap = nc;
    }
    memcpy(st->out + st->out_n, s, n);
    st->out_n += n;
    free(s);
}

static char *sse_error(int status, const char *msg) {
    char *body = api_error_body(status, msg);
    size_t n = body ? strlen(body) : 0;
    char *s = body ? malloc(n + 9) : NULL;
    if (s) snprintf(s, n + 9, "data: %s\n\n", body);
    free(body);
    return s;
}

static bool wants_progress(const srv_stream *st, const srv_task *t) {
    return st->req->progress && !st->req->ollama && !st->req->anthropic && t->t_start > 0 &&   /* in a slot */
           st->progress_sent < t->n_prompt && t->n_done != st->progress_sent;   /* until the whole prompt is in */
}

static bool ping_due(const srv_stream *st, double now) { return st->ping_ms > 0 && !st->req->ollama && now >= st->next_ping; }

bool stream_news(const srv_stream *st, const srv_task *t) {
    return (!stream_tools_pending(st->req) && t->stable > st->sent) || wants_progress(st, t) || ping_due(st, srv_now_ms());
}

bool stream_begin(srv_stream *st, srv_task *t) {
    if (st->started) return false;
    st->started = true;
    const api_req *r = st->req;
    if (r->anthropic) {
        out_add(st, anthropic_event_start(st->api, r, t));
        if (!stream_tools_pending(r) && r->rfmt == RF_NONE) { out_add(st, anthropic_event_text_start(0)); st->block_open = 'x'; }
        return true;
    }
    if (r->kind == API_CHAT && !r->ollama) {
        out_add(st, api_chunk_delta(st->api, r, "", 0, NULL, 0, 0, NULL, true));
        return true;
    }
    return false;
}

/* A chat reply split into reasoning and answer: the text since the last call goes through the parser; *rs, *cs
 * are the parts it added (lengths *rn, *cn). */
static void split_news(srv_stream *st, srv_task *t, const char **rs, size_t *rn, const char **cs, size_t *cn) {
    if (!st->rp_on) { reasoning_init(&st->rp, st->req->rfmt, st->req->r_open); st->rp_on = true; }
    if (t->stable > st->sent) reasoning_feed(&st->rp, t->text + st->sent, t->stable - st->sent);
    st->sent = t->stable;
    if (t->done && !t->status) reasoning_finish(&st->rp);
    if (st->rp.reasoning.oom || st->rp.content.oom) st->lost = true;
    *rs = st->rp.reasoning.p ? st->rp.reasoning.p + st->r_sent : "", *rn = st->rp.reasoning.n - st->r_sent;
    *cs = st->rp.content.p ? st->rp.content.p + st->c_sent : "", *cn = st->rp.content.n - st->c_sent;
    st->r_sent = st->rp.reasoning.n, st->c_sent = st->rp.content.n;
}

/* Anthropic: the block of kind k ('t'hinking or te'x't) is the open one, the one before it closed. */
static void anthropic_block(srv_stream *st, char k) {
    if (st->block_open == k) return;
    if (st->block_open) out_add(st, anthropic_event_block_stop(st->block++));
    out_add(st, k == 't' ? anthropic_event_thinking_start(st->block) : anthropic_event_text_start(st->block));
    st->block_open = k;
}

/* Anthropic's stream: thinking and text deltas as they come, each kind in a block of its own (or, with tools,
 * every block at the end), then the close. */
static void collect_anthropic(srv_stream *st, srv_task *t) {
    if (!stream_tools_pending(st->req) && st->req->rfmt != RF_NONE) {
        const char *rs, *cs;
        size_t rn, cn;
        split_news(st, t, &rs, &rn, &cs, &cn);
        if (rn) { anthropic_block(st, 't'); out_add(st, anthropic_event_thinking(st->block, rs, rn)); }
        if (cn) { anthropic_block(st, 'x'); out_add(st, anthropic_event_text(st->block, cs, cn)); }
    } else if (!stream_tools_pending(st->req) && t->stable > st->sent) {
        out_add(st, anthropic_event_text(0, t->text + st->sent, t->stable - st->sent));
        st->sent = t->stable;
    }
    if (!t->done) return;
    out_add(st, t->status ? anthropic_event_error(t->status, t->err)
                          : anthropic_event_end(st->req, t, st->block_open ? st->block : -1));
    st->finished = true;
}

/* What t produced since the last call, in the stream's dialect, and its end once t is done. */
static void collect(srv_stream *st, srv_task *t) {
    const srv_api *a = st->api;
    const api_req *r = st->req;
    if (r->anthropic) { collect_anthropic(st, t); return; }
    if (stream_tools_pending(r)) {
        if (!t->done) return;
        if (t->status) out_add(st, sse_error(t->status, t->err));
        else {
            out_add(st, api_chunk_tools(a, r, t));
            if (r->include_usage) out_add(st, api_chunk_usage(a, r, t));
        }
        out_add(st, strdup("data: [DONE]\n\n"));
        st->finished = true;
        return;
    }
    size_t end = t->stable;
    int nt = 0;
    while (st->sent_toks + nt < t->n_toks && t->toks[st->sent_toks + nt].text_end <= end) nt++;
    const char *text = end > st->sent ? t->text + st->sent : "", *rs = "";   /* t->text, t->toks: NULL until the first token */
    size_t tn = end > st->sent ? end - st->sent : 0, rn = 0;
    if (r->kind == API_CHAT && r->rfmt != RF_NONE) split_news(st, t, &rs, &rn, &text, &tn);
    if ((tn || rn || nt) && r->ollama) out_add(st, ollama_chunk(a, r, text, tn, rs, rn, NULL));
    else {
        if (rn) out_add(st, api_chunk_reasoning(a, r, rs, rn));
        if (tn || nt)
            out_add(st, api_chunk_delta(a, r, text, tn, nt ? t->toks + st->sent_toks : NULL, nt,
                                        st->sent_toks ? t->toks[st->sent_toks - 1].text_end : 0, NULL, false));
    }
    st->sent = end;
    st->sent_toks += nt;
    if (!t->done) return;
    if (r->ollama) {   /* NDJSON: the closing line carries the counts; no [DONE] */
        out_add(st, t->status ? ollama_error_line(t->err) : ollama_chunk(a, r, "", 0, NULL, 0, t));
        st->finished = true;
        return;
    }
    if (t->status) out_add(st, sse_error(t->status, t->err));
    else {
        out_add(st, api_chunk_finish(a, r, t, t->finish ? t->finish : "stop"));
        if (r->include_usage) out_add(st, api_chunk_usage(a, r, t));
    }
    out_add(st, strdup("data: [DONE]\n\n"));
    st->finished = true;
}

void stream_collect(srv_stream *st, srv_task *t) {
    double now = srv_now_ms();
    size_t before = st->out_n;
    if (wants_progress(st, t)) {
        out_add(st, api_chunk_progress(st->api, st->req, t));
        st->progress_sent = t->n_done;
    }
    collect(st, t);
    if (st->out_n == before && !st->finished && ping_due(st, now)) out_add(st, strdup(": keepalive\n\n"));
    if (st->out_n != before) st->next_ping = now + st->ping_ms;
}

void stream_free(srv_stream *st) {
    free(st->out);
    st->out = NULL;
    if (st->rp_on) reasoning_free(&st->rp);
    st->rp_on = false;
}
