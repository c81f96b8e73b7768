/* reasoning.c — the reply parser of reasoning.h: a small state machine over the markers of each format. Text
 * is emitted in runs between markers; a run's tail that may be the start of a marker is held until the next
 * piece (or the end) decides it. Reasoning is trimmed (leading white space dropped, trailing white space held
 * until more text follows), as is the answer's leading white space after a reasoning block. */
#include <stdlib.h>
#include <string.h>

#include "generate/reasoning.h"

enum {
    /* <think>-style */
    S_START,     /* before anything but white space: an opening marker may come */
    S_REASON,    /* inside the block */
    S_AFTER,     /* after the block, before the answer's first non-space byte */
    S_CONTENT,   /* the answer */
    /* harmony */
    H_BETWEEN,   /* outside any message (text here, which a well-formed reply has none of, is answer) */
    H_ROLE,      /* after <|start|>: the role */
    H_HEAD,      /* after <|channel|>: the channel and recipient, up to <|message|> */
    H_REASON,    /* an analysis message's body */
    H_FINAL,     /* a final (or commentary) message to the user */
    H_CALL,      /* a message to a tool: neither output */
};

typedef struct { const char *open, *close; } tags;
static const tags THINK = { "<think>", "</think>" }, GEMMA4 = { "<|channel>thought", "<channel|>" };

static const char *const HARMONY[] = { "<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|return|>", "<|call|>",
                                       "<|constrain|>" };
enum { M_CHANNEL, M_MESSAGE, M_END, M_START, M_RETURN, M_CALL, M_CONSTRAIN, N_HARMONY };

reasoning_fmt reasoning_detect(const char *src) {
    if (!src) return RF_NONE;
    if (strstr(src, "<|channel|>") && strstr(src, "analysis")) return RF_HARMONY;
    if (strstr(src, "<|channel>") && strstr(src, "<channel|>")) return RF_GEMMA4;
    if (strstr(src, "<think>") && strstr(src, "</think>")) return RF_THINK;
    return RF_NONE;
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

bool reasoning_prompt_opens(reasoning_fmt f, const char *tail, size_t n) {
    if (f != RF_THINK && f != RF_GEMMA4) return false;
    while (n && is_space(tail[n - 1])) n--;
    const char *open = f == RF_THINK ? THINK.open : GEMMA4.open;
    size_t k = strlen(open);
    return n >= k && !memcmp(tail + n - k, open, k);
}

const char *reasoning_close(reasoning_fmt f) { return f == RF_THINK ? THINK.close : f == RF_GEMMA4 ? GEMMA4.close : NULL; }

void reasoning_init(reasoning_parser *p, reasoning_fmt f, bool in_reasoning) {
    memset(p, 0, sizeof *p);
    p->fmt = f;
    p->state = f == RF_HARMONY ? H_BETWEEN : f == RF_NONE ? S_CONTENT : in_reasoning ? S_REASON : S_START;
}

void reasoning_free(reasoning_parser *p) {
    free(p->reasoning.p);
    free(p->content.p);
    free(p->ws.p);
    memset(p, 0, sizeof *p);
}

/* Reasoning text: leading white space dropped, trailing white space held in p->ws until more text comes. */
static void put_reasoning(reasoning_parser *p, const char *s, size_t n) {
    if (!p->reasoning.n && !p->ws.n)
        while (n && is_space(*s)) s++, n--;
    size_t k = n;
    while (k && is_space(s[k - 1])) k--;
    if (k) {
        if (p->ws.n) { ht_str_add(&p->reasoning, p->ws.p, p->ws.n); p->ws.n = 0; }
        ht_str_add(&p->reasoning, s, k);
    }
    if (n > k) ht_str_add(&p->ws, s + k, n - k);
}

/* A run of plain text in the current state. */
static void put(reasoning_parser *p, const char *s, size_t n) {
    if (!n) return;
    switch (p->state) {
    case S_START: case S_AFTER:
        while (n && is_space(*s)) s++, n--;
        if (!n) return;
        p->state = S_CONTENT;
        ht_str_add(&p->content, s, n);
        return;
    case S_REASON: case H_REASON: put_reasoning(p, s, n); return;
    case S_CONTENT: case H_FINAL: case H_BETWEEN: ht_str_add(&p->content, s, n); return;
    case H_HEAD: {
        size_t k = HT_MIN(n, sizeof p->head - 1 - (size_t)p->n_head);   /* the channel's name is all that is read */
        memcpy(p->head + p->n_head, s, k);
        p->n_head += (int)k;
        return;
    }
    default: return;   /* H_ROLE, H_CALL */
    }
}

/* The markers that mean something in the current state (count in *n). */
static const char *const *markers(const reasoning_parser *p, int *n, const char *buf[2]) {
    *n = 0;
    if (p->fmt == RF_HARMONY) {
        if (p->state == H_HEAD || p->state == H_ROLE || p->state == H_BETWEEN || p->state == H_REASON ||
            p->state == H_FINAL || p->state == H_CALL)
            *n = N_HARMONY;
        return HARMONY;
    }
    const tags *t = p->fmt == RF_THINK ? &THINK : &GEMMA4;
    if (p->state == S_START) buf[(*n)++] = t->open;
    else if (p->state == S_REASON) buf[(*n)++] = t->close;
    return buf;
}

static void harmony_event(reasoning_parser *p, int m) {
    switch (m) {
    case M_CHANNEL: p->state = H_HEAD; p->n_head = 0; return;
    case M_START: p->state = H_ROLE; return;
    case M_CONSTRAIN: if (p->state == H_HEAD) put(p, " ", 1); return;   /* part of the header */
    case M_MESSAGE:
        if (p->state == H_HEAD) {
            p->head[p->n_head] = 0;
            const char *h = p->head;
            while (is_space(*h)) h++;
            p->state = strstr(h, "to=") ? H_CALL : !strncmp(h, "analysis", 8) ? H_REASON : H_FINAL;
        } else if (p->state == H_ROLE) p->state = H_FINAL;
        else put(p, HARMONY[m], strlen(HARMONY[m]));   /* inside a body: text */
        return;
    default:   /* <|end|>, <|return|>, <|call|>: the message ends */
        if (p->state == H_REASON && p->reasoning.n) p->ws.n = 0, ht_str_add(&p->ws, "\n", 1);   /* messages apart */
        p->state = H_BETWEEN;
        return;
    }
}

static void think_event(reasoning_parser *p) {
    if (p->state == S_START) p->state = S_REASON;
    else { p->ws.n = 0; p->state = S_AFTER; }   /* the block closed: its trailing white space goes */
}

static void scan(reasoning_parser *p, const char *s, size_t n, bool final) {
    size_t run = 0, i = 0;
    while (i < n) {
        if (s[i] != '<') { i++; continue; }
        put(p, s + run, i - run);   /* the text before decides the state, and so the markers */
        run = i;
        const char *buf[2];
        int nm;
        const char *const *ms = markers(p, &nm, buf);
        int hit = -1;
        bool partial = false;
        for (int k = 0; k < nm && hit < 0; k++) {
            size_t L = strlen(ms[k]);
            if (n - i >= L) { if (!memcmp(s + i, ms[k], L)) hit = k; }
            else if (!final && !memcmp(s + i, ms[k], n - i)) partial = true;
        }
        if (hit >= 0) {
            if (p->fmt == RF_HARMONY) harmony_event(p, hit);
            else think_event(p);
            i += strlen(ms[hit]);
            run = i;
        } else if (partial) {   /* the rest may begin a marker: hold it */
            memcpy(p->hold, s + i, n - i);
            p->n_hold = (int)(n - i);
            return;
        } else i++;
    }
    put(p, s + run, n - run);
}

void reasoning_feed(reasoning_parser *p, const char *s, size_t n) {
    if (!n) return;
    if (!p->n_hold) { scan(p, s, n, false); return; }
    size_t h = (size_t)p->n_hold;   /* the held bytes begin a marker only s can finish */
    char *buf = malloc(h + n);
    if (!buf) { p->content.oom = true; return; }
    memcpy(buf, p->hold, h);
    memcpy(buf + h, s, n);
    p->n_hold = 0;
    scan(p, buf, h + n, false);
    free(buf);
}

void reasoning_finish(reasoning_parser *p) {
    if (p->n_hold) {
        int h = p->n_hold;
        p->n_hold = 0;
        scan(p, p->hold, (size_t)h, true);
    }
    p->ws.n = 0;
}
