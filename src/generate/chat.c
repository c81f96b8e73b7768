/* chat.c — chat prompts rendered through the model's template (or plain continuation) and tokenized so that
 * only the template's own special-token text becomes special tokens; the method is described in chat.h. */
#include "generate/chat.h"

#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"
#include "model/model.h"
#include "tokenizer/tok_internal.h"

/* A byte trie over the texts the tokenizer cuts out before tokenizing: control and unknown tokens (only
 * with special parsing) and user-defined ones (always). Lookup gives the longest token at a position. */
typedef struct { int32_t child, next, id; uint8_t c; } tnode;

struct chat_fmt {
    const hearth_model *m;
    char *tmpl;              /* Jinja source; NULL = plain continuation */
    char *bos, *eos;         /* their token texts, or NULL */
    tnode *t; int nt, capt;  /* node 0 is the root */
    uint8_t *vocab_pua;      /* bitmap of private-use code points used in special-token texts */
    int32_t *ctrl; int n_ctrl;   /* ids of the control (and unknown) tokens with text */
};

/* ---- private-use code points: U+E000..U+F8FF and plane 15 ---- */
#define PUA_BMP_N 0x1900u
#define PUA_N (PUA_BMP_N + 0xFFFEu)

static int pua_index(uint32_t cp) {
    if (cp >= 0xE000 && cp <= 0xF8FF) return (int)(cp - 0xE000);
    if (cp >= 0xF0000 && cp <= 0xFFFFD) return (int)(PUA_BMP_N + cp - 0xF0000);
    return -1;
}
static uint32_t pua_cp(int i) { return i < (int)PUA_BMP_N ? 0xE000u + (uint32_t)i : 0xF0000u + (uint32_t)i - PUA_BMP_N; }

static void pua_mark(uint8_t *bits, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += (size_t)utf8_decode((const uint8_t *)s + i, n - i, &cp);
        int k = pua_index(cp);
        if (k >= 0) bits[k >> 3] |= (uint8_t)(1u << (k & 7));
    }
}

static void pua_mark_json(uint8_t *bits, const cJSON *j) {
    for (; j; j = j->next) {
        if (cJSON_IsString(j) && j->valuestring) pua_mark(bits, j->valuestring, strlen(j->valuestring));
        if (j->string) pua_mark(bits, j->string, strlen(j->string));
        if (j->child) pua_mark_json(bits, j->child);
    }
}

/* ---- trie ---- */
static int trie_node(chat_fmt *f, uint8_t c) {
    if (f->nt == f->capt) {
        int nc = f->capt ? f->capt * 2 : 256;
        tnode *p = realloc(f->t, (size_t)nc * sizeof *p);
        if (!p) return -1;
        f->t = p; f->capt = nc;
    }
    f->t[f->nt] = (tnode){ .child = -1, .next = -1, .id = -1, .c = c };
    return f->nt++;
}

static int trie_add(chat_fmt *f, const char *s, size_t n, int32_t id) {
    int cur = 0;
    for (size_t i = 0; i < n; i++) {
        int k = f->t[cur].child;
        while (k >= 0 && f->t[k].c != (uint8_t)s[i]) k = f->t[k].next;
        if (k < 0) {
            if ((k = trie_node(f, (uint8_t)s[i])) < 0) return -1;
            f->t[k].next = f->t[cur].child;
            f->t[cur].child = k;
        }
        cur = k;
    }
    if (f->t[cur].id < 0 || id < f->t[cur].id) f->t[cur].id = id;
    return 0;
}

/* Longest special token whose text starts s: its id (and *len), or -1. */
static int32_t trie_match(const chat_fmt *f, const char *s, size_t n, size_t *len) {
    int cur = 0;
    int32_t best = -1;
    for (size_t i = 0; i < n; i++) {
        int k = f->t[cur].child;
        while (k >= 0 && f->t[k].c != (uint8_t)s[i]) k = f->t[k].next;
        if (k < 0) break;
        cur = k;
        if (f->t[k].id >= 0) { best = f->t[k].id; *len = i + 1; }
    }
    return best;
}

static bool is_control(const chat_fmt *f, int32_t id) {
    int t = vocab_token_type(f->m->vocab, id);
    return t == TT_CONTROL || t == TT_UNKNOWN;
}

static int build_specials(chat_fmt *f, hearth_err *err) {
    const ht_vocab *v = f->m->vocab;
    if (trie_node(f, 0) < 0) return herr(err, "out of memory");
    for (int32_t id = 0; id < vocab_size(v); id++) {
        int t = vocab_token_type(v, id);
        if (t != TT_CONTROL && t != TT_UNKNOWN && t != TT_USER_DEFINED) continue;
        gguf_str s = vocab_text(v, id);
        if (!s.n) continue;
        if (trie_add(f, s.p, s.n, id)) return herr(err, "out of memory");
        pua_mark(f->vocab_pua, s.p, s.n);
        if (t == TT_USER_DEFINED) continue;
        int32_t *c = realloc(f->ctrl, (size_t)(f->n_ctrl + 1) * sizeof *c);
        if (!c) return herr(err, "out of memory");
        f->ctrl = c;
        f->ctrl[f->n_ctrl++] = id;
    }
    return 0;
}

static char *token_text(const hearth_model *m, int32_t id) {
    if (id < 0) return NULL;
    gguf_str s = vocab_text(m->vocab, id);
    char *p = malloc(s.n + 1);
    if (p) { memcpy(p, s.p, s.n); p[s.n] = 0; }
    return p;
}

/* The model's tokenizer.chat_template, copied; NULL if it has none. */
static char *model_template(const hearth_model *m) {
    gguf_str s;
    if (!m->gguf || !gguf_get_str(m->gguf, "tokenizer.chat_template", &s) || !s.n) return NULL;
    char *p = malloc(s.n + 1);
    if (p) { memcpy(p, s.p, s.n); p[s.n] = 0; }
    return p;
}

int chat_fmt_new(const hearth_model *m, const char *tmpl, chat_fmt **out, hearth_err *err) {
    *out = NULL;
    if (model_need_vocab(m, err)) return -1;
    chat_fmt *f = calloc(1, sizeof *f);
    if (!f) return herr(err, "out of memory");
    f->m = m;
    f->vocab_pua = calloc(PUA_N / 8 + 1, 1);
    f->tmpl = tmpl ? strdup(tmpl) : model_template(m);
    f->bos = token_text(m, vocab_bos(m->vocab));
    f->eos = token_text(m, vocab_eos(m->vocab));
    if (!f->vocab_pua || (tmpl && !f->tmpl) || build_specials(f, err)) {
        chat_fmt_free(f);
        return herr(err, "out of memory");
    }
    *out = f;
    return 0;
}

void chat_fmt_free(chat_fmt *f) {
    if (!f) return;
    free(f->tmpl); free(f->bos); free(f->eos); free(f->t); free(f->vocab_pua); free(f->ctrl);
    free(f);
}

const char *chat_fmt_source(const chat_fmt *f) { return f ? f->tmpl : NULL; }

bool chat_fmt_has_template(const chat_fmt *f) { return f->tmpl != NULL; }


/* ---- plain continuation (no template) ---- */
static const char *msg_str(const cJSON *msg, const char *key) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, key);
    return cJSON_IsString(c) && c->valuestring ? c->valuestring : "";
}

static char *render_plain(const cJSON *messages) {
    ht_str b = { 0 };
    ht_str_add(&b, "", 0);
    const cJSON *msg;
    cJSON_ArrayForEach(msg, messages) {
        const char *role = msg_str(msg, "role"), *content = msg_str(msg, "content");
        if (!strcmp(role, "assistant")) { ht_str_puts(&b, content); continue; }
        if (b.n && b.p[b.n - 1] != '\n') ht_str_puts(&b, "\n");
        ht_str_puts(&b, content);
        if (!strcmp(role, "system") && *content) ht_str_puts(&b, "\n\n");
    }
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}

int chat_fmt_render(const chat_fmt *f, const cJSON *messages, bool add_gen, const cJSON *extra, char **out,
                    hearth_err *err) {
    *out = NULL;
    if (!cJSON_IsArray(messages)) return herr(err, "messages must be an array");
    if (f->tmpl) return chat_render(f->tmpl, messages, f->bos, f->eos, add_gen, extra, out, err);
    *out = render_plain(messages);
    return *out ? 0 : herr(err, "out of memory");
}

/* ---- defusing message strings ---- */
typedef struct { char m1[5], m2[5]; int l1, l2; } markers;

static int pick_markers(const chat_fmt *f, const cJSON *messages, const cJSON *extra, markers *mk, hearth_err *err) {
    uint8_t *used = malloc(PUA_N / 8 + 1);
    if (!used) return herr(err, "out of memory");
    memcpy(used, f->vocab_pua, PUA_N / 8 + 1);
    if (f->tmpl) pua_mark(used, f->tmpl, strlen(f->tmpl));
    pua_mark_json(used, messages);
    if (extra) pua_mark_json(used, extra);
    int found = 0;
    for (int i = 0; i < (int)PUA_N && found < 2; i++) {
        if (used[i >> 3] & (1u << (i & 7))) continue;
        if (found++ == 0) mk->l1 = utf8_encode(pua_cp(i), mk->m1);
        else mk->l2 = utf8_encode(pua_cp(i), mk->m2);
    }
    free(used);
    if (found < 2) return herr(err, "the conversation uses every private-use character; cannot separate its text from the template's");
    mk->m1[mk->l1] = mk->m2[mk->l2] = 0;
    return 0;
}

static bool is_ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static size_t utf8_char_len(const char *s, size_t n) {
    uint32_t cp;
    return (size_t)utf8_decode((const uint8_t *)s, n, &cp);
}

/* Whether some control token's text has a proper prefix that s[0..n) ends with (head) or a proper
 * suffix that s[0..n) starts with (!head), so that template text next to it could complete the token. */
static bool edge_partial(const chat_fmt *f, const char *s, size_t n, bool head) {
    if (!n) return false;
    for (int i = 0; i < f->n_ctrl; i++) {
        gguf_str t = vocab_text(f->m->vocab, f->ctrl[i]);
        for (size_t k = 1; k < t.n && k <= n; k++) {
            if (head ? !memcmp(s + n - k, t.p, k) : !memcmp(s, t.p + t.n - k, k)) return true;
        }
    }
    return false;
}

/* Copies s with markers: m1 after the first character of each control-token text, m2 at an edge that
 * could complete one together with the neighbouring template text (checked on s as is and trimmed). */
static char *defuse(const chat_fmt *f, const char *s, const markers *mk, bool *changed) {
    size_t n = strlen(s), lo = 0, hi = n;
    while (lo < n && is_ws(s[lo])) lo++;
    while (hi > lo && is_ws(s[hi - 1])) hi--;
    bool g0 = edge_partial(f, s, n, false), g_lo = lo > 0 && edge_partial(f, s + lo, n - lo, false);
    bool g_n = edge_partial(f, s, n, true), g_hi = hi < n && edge_partial(f, s, hi, true);
    ht_str b = { 0 };
    ht_str_add(&b, "", 0);
    for (size_t i = 0; i <= n; ) {
        if ((i == 0 && g0) || (i == lo && g_lo && lo > 0)) { ht_str_add(&b, mk->m2, (size_t)mk->l2); *changed = true; }
        if ((i == hi && g_hi && hi < n) || (i == n && g_n)) { ht_str_add(&b, mk->m2, (size_t)mk->l2); *changed = true; }
        if (i == n) break;
        size_t len = 0;
        int32_t id = trie_match(f, s + i, n - i, &len);
        if (id >= 0 && is_control(f, id)) {
            size_t c = utf8_char_len(s + i, n - i);
            ht_str_add(&b, s + i, c);
            ht_str_add(&b, mk->m1, (size_t)mk->l1);
            *changed = true;
            i += c;
        } else {
            ht_str_add(&b, s + i, 1);
            i++;
        }
    }
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}

/* Defuses every string value in the tree j (in place). */
static int defuse_json(const chat_fmt *f, cJSON *j, const markers *mk, bool *changed) {
    for (; j; j = j->next) {
        if (cJSON_IsString(j) && j->valuestring) {
            bool ch = false;
            char *d = defuse(f, j->valuestring, mk, &ch);
            if (!d) return -1;
            if (ch) { cJSON_free(j->valuestring); j->valuestring = d; *changed = true; }
            else free(d);
        }
        if (j->child && defuse_json(f, j->child, mk, changed)) return -1;
    }
    return 0;
}

/* ---- tokenizing the rendered text ---- */
typedef struct { hearth_token *v; int n, cap; bool oom; } tvec;

static void tv_push(tvec *t, const hearth_token *ids, int n) {
    if (t->oom) return;
    if (t->n + n > t->cap) {
        int nc = HT_MAX(t->cap * 2, t->n + n + 64);
        hearth_token *p = realloc(t->v, (size_t)nc * sizeof *p);
        if (!p) { t->oom = true; return; }
        t->v = p; t->cap = nc;
    }
    memcpy(t->v + t->n, ids, (size_t)n * sizeof *ids);
    t->n += n;
}

static int tokenize_into(const hearth_model *m, const char *s, size_t n, bool parse_special, tvec *out,
                         hearth_err *err) {
    if (!n) return 0;
    int32_t *ids = NULL;
    int k = 0;
    if (tok_encode(m->vocab, s, n, false, parse_special, &ids, &k, err)) return -1;
    tv_push(out, ids, k);
    free(ids);
    return out->oom ? herr(err, "out of memory") : 0;
}

/* Copies s[0..n) without the markers into b (reset first). */
static void strip_markers(ht_str *b, const char *s, size_t n, const markers *mk) {
    b->n = 0;
    ht_str_add(b, "", 0);
    for (size_t i = 0; i < n;) {
        if (n - i >= (size_t)mk->l1 && !memcmp(s + i, mk->m1, (size_t)mk->l1)) { i += (size_t)mk->l1; continue; }
        if (n - i >= (size_t)mk->l2 && !memcmp(s + i, mk->m2, (size_t)mk->l2)) { i += (size_t)mk->l2; continue; }
        ht_str_add(b, s + i, 1);
        i++;
    }
}

/* Plain text between two template special tokens: markers removed, lstrip of the token that follows. */
static int flush_text(const chat_fmt *f, const char *s, size_t n, const markers *mk, int32_t next, ht_str *tmp,
                      tvec *out, hearth_err *err) {
    strip_markers(tmp, s, n, mk);
    if (tmp->oom) return herr(err, "out of memory");
    size_t l = tmp->n;
    if (next >= 0 && (f->m->vocab->flags[next] & TF_LSTRIP)) while (l > 0 && is_ws(tmp->p[l - 1])) l--;
    return tokenize_into(f->m, tmp->p, l, false, out, err);
}

static bool at(const char *s, size_t n, const char *m, int ml) { return n >= (size_t)ml && !memcmp(s, m, (size_t)ml); }

/* Cuts the rendered text at control-token matches (all the template's own: message text was defused). */
static int tokenize_marked(const chat_fmt *f, const char *r, size_t n, const markers *mk, tvec *out, hearth_err *err) {
    ht_str tmp = { 0 };
    size_t start = 0, i = 0;
    int rc = 0;
    while (i < n && !rc) {
        size_t len = 0;
        int32_t id = trie_match(f, r + i, n - i, &len);
        if (id < 0) { i++; continue; }
        if (!is_control(f, id) || at(r + i + len, n - i - len, mk->m1, mk->l1)) { i += len; continue; }
        rc = flush_text(f, r + start, i - start, mk, id, &tmp, out, err);
        tv_push(out, &id, 1);
        i += len;
        if (f->m->vocab->flags[id] & TF_RSTRIP)
            for (;;) {
                if (i < n && is_ws(r[i])) i++;
                else if (at(r + i, n - i, mk->m1, mk->l1)) i += (size_t)mk->l1;
                else if (at(r + i, n - i, mk->m2, mk->l2)) i += (size_t)mk->l2;
                else break;
            }
        start = i;
    }
    if (!rc) rc = flush_text(f, r + start, n - start, mk, -1, &tmp, out, err);
    free(tmp.p);
    if (!rc && out->oom) rc = herr(err, "out of memory");
    return rc;
}

/* Renders a defused copy of the conversation and tokenizes it. */
static int tokenize_template(const chat_fmt *f, const cJSON *messages, bool add_gen, const cJSON *extra, tvec *out,
                             hearth_err *err) {
    markers mk;
    if (pick_markers(f, messages, extra, &mk, err)) return -1;
    cJSON *msgs = cJSON_Duplicate(messages, true), *ext = extra ? cJSON_Duplicate(extra, true) : NULL;
    bool changed = false;
    int rc = 0;
    if (!msgs || (extra && !ext) || defuse_json(f, msgs->child, &mk, &changed) ||
        (ext && defuse_json(f, ext->child, &mk, &changed)))
        rc = herr(err, "out of memory");
    char *r = NULL;
    if (!rc) rc = chat_render(f->tmpl, msgs, f->bos, f->eos, add_gen, ext, &r, err);
    if (!rc) {
        size_t n = strlen(r);
        if (!changed) rc = tokenize_into(f->m, r, n, true, out, err);
        else rc = tokenize_marked(f, r, n, &mk, out, err);
    }
    free(r);
    cJSON_Delete(msgs);
    cJSON_Delete(ext);
    return rc;
}

int chat_fmt_tokenize(const chat_fmt *f, const cJSON *messages, bool add_gen, const cJSON *extra,
                      hearth_token **out, int *n_out, hearth_err *err) {
    *out = NULL; *n_out = 0;
    if (!cJSON_IsArray(messages)) return herr(err, "messages must be an array");
    tvec t = { 0 };
    int32_t bos = vocab_bos(f->m->vocab);
    if (bos >= 0 && vocab_add_bos(f->m->vocab)) tv_push(&t, &bos, 1);
    int rc;
    if (f->tmpl) rc = tokenize_template(f, messages, add_gen, extra, &t, err);
    else {
        char *r = render_plain(messages);
        rc = r ? tokenize_into(f->m, r, strlen(r), false, &t, err) : herr(err, "out of memory");
        free(r);
    }
    if (!rc && t.n >= 2 && t.v[0] == bos && t.v[1] == bos) { memmove(t.v, t.v + 1, (size_t)(t.n - 1) * sizeof *t.v); t.n--; }
    if (!rc && t.oom) rc = herr(err, "out of memory");
    if (rc) { free(t.v); return -1; }
    if (!t.v) { t.v = malloc(sizeof *t.v); if (!t.v) return herr(err, "out of memory"); }
    *out = t.v;
    *n_out = t.n;
    return 0;
}

/* ---- message normalization ---- */
static int flatten_content(cJSON *msg, int i, hearth_err *err) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsNull(c)) return 0;
    if (cJSON_IsString(c)) return 0;
    if (!cJSON_IsArray(c)) return herr(err, "messages[%d].content must be a string or an array of content parts", i);
    ht_str b = { 0 };
    ht_str_add(&b, "", 0);
    int k = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (cJSON_IsString(part)) text = part;
        else if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            free(b.p);
            return herr(err, "messages[%d].content[%d]: only text parts ({\"type\":\"text\",\"text\":...}) are supported", i, k);
        }
        if (k++) ht_str_puts(&b, "\n");
        ht_str_puts(&b, text->valuestring);
    }
    cJSON *s = b.oom ? NULL : cJSON_CreateString(b.p);
    free(b.p);
    if (!s) return herr(err, "out of memory");
    cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", s);
    return 0;
}

cJSON *chat_messages_normalize(const cJSON *messages, hearth_err *err) {
    if (!cJSON_IsArray(messages)) { herr(err, "'messages' must be an array"); return NULL; }
    if (!cJSON_GetArraySize(messages)) { herr(err, "'messages' must not be empty"); return NULL; }
    cJSON *out = cJSON_Duplicate(messages, true);
    if (!out) { herr(err, "out of memory"); return NULL; }
    int i = 0;
    cJSON *msg;
    cJSON_ArrayForEach(msg, out) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsObject(msg)) { herr(err, "messages[%d] must be an object", i); break; }
        if (!cJSON_IsString(role)) { herr(err, "messages[%d].role must be a string", i); break; }
        if (flatten_content(msg, i, err)) break;
        i++;
    }
    if (msg) { cJSON_Delete(out); return NULL; }
    return out;
}
