/* test_alloc_fail.c — every allocation failure, one at a time: the n-th call to malloc / calloc / realloc /
 * aligned_alloc / posix_memalign (this program's own, forwarding to glibc's) returns NULL, for n = 0, 1, 2, ...
 * until an operation runs through with no failure left to inject. Each operation must then either succeed or
 * fail with an error message — never crash, hang or leave a half-made object — and must leave no allocation
 * behind (live count before = after). Operations: loading a GGUF model (Q4_0, so the weights are packed), a
 * context and a decode; loading small tokenizer.json files of each model kind (byte-level BPE with a regex split,
 * SentencePiece-style BPE with byte fallback, WordPiece) and tokenizing; rendering and tokenizing a conversation
 * through a ChatML template; loading an HF directory; one request through the server's path in each API
 * (OpenAI's, Anthropic's and Ollama's: the body translated, parsed and templated, the task run by the engine
 * thread, the response written), which must fail as a 500; and the same requests streamed (srv_stream.c's
 * events), which must end as lost (the connection closes without the stream's end) or with an error event. Each
 * operation runs once first: glibc keeps a finished thread's stack and TLS for the next thread, which would
 * otherwise look like a leak. A failure the code is meant to absorb (the pool then runs with fewer threads, a
 * cache stays unfilled) counts as recovered, and must give exactly the result of the run without failures
 * (logits, token ids). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)   /* clang's spelling of gcc's __SANITIZE_ADDRESS__ */
#define __SANITIZE_ADDRESS__ 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
/* The sanitizers bring their own allocator: this program's malloc would fight it. The leak half of this test is
 * the sanitizer build's LeakSanitizer; the failure half runs in the normal build. */
#include <stdio.h>
int main(void) { puts("skipped under AddressSanitizer"); return 0; }
#else
#include <errno.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generate/chat.h"
#include "hearth.h"
#include "server/srv_internal.h"
#include "testutil.h"

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t sz);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static atomic_long countdown = -1;   /* allocations left before the injected failure; -1: none */
static atomic_bool injected;
static atomic_long live;             /* allocations not yet freed */

static bool fail_now(void) {
    long c = atomic_load(&countdown);
    while (c >= 0 && !atomic_compare_exchange_weak(&countdown, &c, c - 1)) {}
    if (c == 0) {
        atomic_store(&injected, true); errno = ENOMEM;
        if (getenv("ALLOC_TRACE")) {   /* where each injected failure lands (backtrace allocates once itself) */ void *bt[32]; int k = backtrace(bt, 32); backtrace_symbols_fd(bt, k, 2); fputs("----\n", stderr); }
        return true;
    }
    return false;
}
static void *counted(void *p) { if (p) atomic_fetch_add(&live, 1); return p; }

void *malloc(size_t n) { return fail_now() ? NULL : counted(__libc_malloc(n)); }
void *calloc(size_t n, size_t sz) { return fail_now() ? NULL : counted(__libc_calloc(n, sz)); }
void *realloc(void *p, size_t n) {
    if (fail_now()) return NULL;
    void *q = __libc_realloc(p, n);
    if (!p) counted(q);
    else if (!n) atomic_fetch_sub(&live, 1);
    return q;
}
void *aligned_alloc(size_t align, size_t n) { return fail_now() ? NULL : counted(__libc_memalign(align, n)); }
int posix_memalign(void **out, size_t align, size_t n) {
    if (fail_now()) return ENOMEM;
    *out = counted(__libc_memalign(align, n));
    return *out ? 0 : ENOMEM;
}
void free(void *p) {
    if (p) atomic_fetch_sub(&live, 1);
    __libc_free(p);
}

/* ---- operations: 0 on success, -1 (with an error message) on a clean failure; *h hashes what they produced,
 * so that a success despite a failed allocation can be checked to be the same success ---- */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static int op_model(hearth_err *err, uint64_t *h) {
    hearth_model *m;
    if (hearth_model_load("data/models/llama-Q4_0.gguf", &m, err)) return -1;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 2;
    hearth_ctx *c = NULL;
    int rc = hearth_ctx_new(m, &cp, &c, err);
    if (!rc) {
        hearth_token t[4] = { 1, 5, 9, 13 };
        hearth_batch b = { .n = 4, .tokens = t };
        rc = hearth_decode(c, &b, err);
        const float *lg = rc ? NULL : hearth_logits(c, 3);
        hearth_model_info in;
        hearth_model_get_info(m, &in);
        if (lg) *h = fnv(*h, lg, sizeof(float) * (size_t)in.n_vocab);
        hearth_ctx_free(c);
    }
    hearth_model_free(m);
    return rc;
}

/* Small tokenizer.json files (as tests/fuzz/seeds.mjs makes them), written to a temp directory by main(). */
static const char *const TOKENIZERS[][2] = {
    { "bytelevel.json",
      "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":5,\"content\":\"<s>\",\"special\":true}],"
      "\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
      "\"pattern\":{\"Regex\":\"(?i:'s|'t)|\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+\"},\"behavior\":\"Isolated\"},"
      "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},"
      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xc4\xa0\":0,\"h\":1,\"i\":2,\"hi\":3,\"\xc4\xa0hi\":4,\"<s>\":5},"
      "\"merges\":[[\"h\",\"i\"],[\"\xc4\xa0\",\"hi\"]]}}" },
    { "bpe-fallback.json",
      "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
      "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
      "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},"
      "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
      "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},"
      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"h\":3,\"e\":4,\"l\":5,\"o\":6,\"he\":7,\"ll\":8,"
      "\"hell\":9,\"hello\":10,\"\xe2\x96\x81\":11,\"<0x41>\":12},\"merges\":[\"h e\",\"l l\",\"he ll\",\"hell o\"],"
      "\"byte_fallback\":true,\"unk_token\":\"<unk>\"}}" },
    { "wordpiece.json",
      "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":1,\"content\":\"[CLS]\",\"special\":true}],"
      "\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true,\"clean_text\":true,\"handle_chinese_chars\":true},"
      "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
      "\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,\"hello\":3,\"##o\":4,\"w\":5},"
      "\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\"}}" },
};
static char g_dir[64];
static char *g_chatml;   /* the template, read before the sweeps */

static int op_tokenizer(hearth_err *err, uint64_t *h) {
    for (size_t i = 0; i < sizeof TOKENIZERS / sizeof TOKENIZERS[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", g_dir, TOKENIZERS[i][0]);
        hearth_model *m;
        if (hearth_tokenizer_load(path, &m, err)) return -1;
        hearth_token ids[64];
        const char *text = "hi hello, Hi! A \xe4\xb8\xad <s> [CLS] 123";
        int n = hearth_tokenize(m, text, strlen(text), true, true, ids, 64, err);
        hearth_model_free(m);
        if (n < 0) return -1;
        *h = fnv(*h, ids, sizeof ids[0] * (size_t)HT_MIN(n, 64));
    }
    return 0;
}

static int op_chat(hearth_err *err, uint64_t *h) {
    hearth_model *m;
    if (hearth_model_load("data/models/qwen2.gguf", &m, err)) return -1;
    chat_fmt *f = NULL;
    int rc = chat_fmt_new(m, g_chatml, &f, err);
    cJSON *msgs = rc ? NULL : cJSON_Parse("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                          "{\"role\":\"user\",\"content\":\"Hi <|im_start|> there\"}]");
    if (!rc && !msgs) rc = herr(err, "out of memory parsing the messages");
    hearth_token *ids = NULL;
    int n = 0;
    if (!rc) rc = chat_fmt_tokenize(f, msgs, true, NULL, &ids, &n, err);
    if (!rc) *h = fnv(*h, ids, sizeof ids[0] * (size_t)n);
    free(ids);
    cJSON_Delete(msgs);
    chat_fmt_free(f);
    hearth_model_free(m);
    return rc;
}

static int op_hf(hearth_err *err, uint64_t *h) {
    hearth_model *m;
    if (hearth_model_load("data/hf/qwen2-hf", &m, err)) return -1;
    hearth_token ids[32];
    int n = hearth_tokenize(m, "Hello world, it's me!", 21, true, false, ids, 32, err);
    hearth_model_info in;
    hearth_model_get_info(m, &in);
    hearth_model_free(m);
    if (n < 0) return -1;
    *h = fnv(fnv(*h, ids, sizeof ids[0] * (size_t)HT_MIN(n, 32)), &in.n_params, sizeof in.n_params);
    return 0;
}

/* The server, made once (2 slots, no shared prompt cache: its entries would outlive the request); the
 * sweep covers what one request allocates, on the connection's thread and on the engine's. */
static srv_api g_api;

/* What differs from one request to the next. */
static const char *const VOLATILE[] = { "id", "created", "timings", "created_at", "total_duration", "load_duration",
                                        "prompt_eval_count", "prompt_eval_duration", "eval_duration", "time_ms" };

/* Drops those keys at any depth (stream events nest them). */
static void drop_volatile(cJSON *o, const char *const *keys, size_t n) {
    cJSON *it;
    for (size_t k = 0; k < n; k++) cJSON_DeleteItemFromObject(o, keys[k]);
    cJSON_ArrayForEach(it, o) if (cJSON_IsObject(it) || cJSON_IsArray(it)) drop_volatile(it, keys, n);
}

/* A streamed reply as server.c forms it (srv_stream.c), the task waited for first so that the bytes do not
 * depend on timing: its events, one JSON each with the volatile keys dropped, hashed into h. A stream lost to
 * memory (it ends without its end, clients see an error) or ending with an error event is a clean failure. */
static int stream_reply(const api_req *r, srv_task *t, hearth_err *err, uint64_t *h) {
    srv_stream st = { .api = &g_api, .req = r };
    stream_begin(&st, t);
    pthread_mutex_lock(&t->mu);
    stream_collect(&st, t);   /* t is done */
    pthread_mutex_unlock(&t->mu);
    atomic_store(&countdown, -1);   /* formed: the checks below must not fail */
    int rc = 0;
    if (st.lost) rc = herr(err, "stream lost: out of memory");
    else if (!st.finished) rc = herr(err, "the stream did not finish");
    for (char *line = st.out, *next; !rc && line && line < st.out + st.out_n; line = next) {
        char *nl = memchr(line, '\n', (size_t)(st.out + st.out_n - line));
        next = nl ? nl + 1 : st.out + st.out_n;
        const char *js = !strncmp(line, "data: {", 7) ? line + 6 : line[0] == '{' ? line : NULL;
        if (!js) {   /* event names, [DONE] */
            if (getenv("ALLOC_SHOW")) fprintf(stderr, "%.*s", (int)(next - line), line);
            *h = fnv(*h, line, (size_t)(next - line));
            continue;
        }
        cJSON *o = cJSON_ParseWithLength(js, (size_t)((nl ? nl : next) - js));
        REQUIRE(o, "stream: an event is not JSON: %.*s", (int)(next - line), line);
        if (cJSON_GetObjectItem(o, "error")) {
            cJSON *e = cJSON_GetObjectItem(o, "error");
            const cJSON *m = cJSON_IsString(e) ? e : cJSON_GetObjectItem(e, "message");
            CHECK(cJSON_IsString(m) && strstr(m->valuestring, "memory"), "stream: an error event not for memory: %.*s",
                  (int)(next - line), line);
            rc = herr(err, "500 %s", cJSON_IsString(m) ? m->valuestring : "error event");
        }
        drop_volatile(o, VOLATILE, sizeof VOLATILE / sizeof VOLATILE[0]);
        char *p = cJSON_PrintUnformatted(o);
        if (getenv("ALLOC_SHOW")) fprintf(stderr, "%s\n", p);
        *h = fnv(*h, p, strlen(p));
        free(p);
        cJSON_Delete(o);
    }
    stream_free(&st);
    return rc;
}

/* One request as the server's routes take it: OpenAI's body parsed as is; Anthropic's and Ollama's first
 * translated into OpenAI's (flavor 1, 2) and answered in their own shapes; OpenAI's with a tool that the reply
 * must call (flavor 3: the tools' grammar, the listing added to the system message, the call split out), and
 * Anthropic's the same way (flavor 4: the call as a tool_use block). With stream, the same body streamed. */
static int server_request(int flavor, bool stream, hearth_err *err, uint64_t *h) {
    static const char *const BODY[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":8,"
        "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2,\"cache_prompt\":false}",
        "{\"model\":\"m\",\"max_tokens\":8,\"temperature\":0,\"system\":\"Be kind.\","
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Tell me a story\"}]}]}",
        "{\"model\":\"m\",\"stream\":false,\"options\":{\"temperature\":0,\"num_predict\":8},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}]}",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Weather?\"}],"
        "\"max_tokens\":128,\"temperature\":0,\"cache_prompt\":false,\"parallel_tool_calls\":false,\"tool_choice\":\"required\",\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"city\":{\"enum\":[\"Oslo\"]}},\"required\":[\"city\"]}}}]}",
        "{\"model\":\"m\",\"max_tokens\":128,\"temperature\":0,\"system\":\"Be brief.\",\"messages\":[{\"role\":\"user\","
        "\"content\":\"Weather?\"}],\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},\"tools\":[{\"name\":"
        "\"get_weather\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"enum\":[\"Oslo\"]}},"
        "\"required\":[\"city\"]}}]}",
    };
    api_req r;
    srv_task *t;
    api_kind kind = API_CHAT;
    int status;
    char msg[256];
    char *translated = NULL;
    const char *body = BODY[flavor];
    char sbody[1024];
    if (stream) {   /* the same request, streamed (OpenAI's with the usage chunk and prompt progress too) */
        const char *rest = flavor == 2 ? strstr(body, "\"options\"") : body + 1;
        snprintf(sbody, sizeof sbody, "{%s%s", flavor == 0 ? "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"return_progress\":true,"
                 : flavor == 2 ? "\"model\":\"m\",\"stream\":true," : "\"stream\":true,", rest);
        body = sbody;
    }
    if (flavor == 1 || flavor == 4) translated = anthropic_translate(&g_api, body, strlen(body), false, msg, sizeof msg);
    if (flavor == 2) translated = ollama_translate(&g_api, OLLAMA_CHAT, body, strlen(body), &kind, msg, sizeof msg);
    if ((flavor == 1 || flavor == 2 || flavor == 4) && !translated) {   /* the body is valid: only memory can fail it, and the route answers 500 */
        CHECK(strstr(msg, "out of memory"), "server %d: translating failed but not for memory: %s", flavor, msg);
        return herr(err, "500 %s", msg);
    }
    if (translated) body = translated;
    int prc = api_parse(&g_api, kind, body, strlen(body), &r, &t, &status, msg, sizeof msg);
    free(translated);
    if (prc) {
        CHECK(status == 500, "server %d: a request failed to parse with %d, not 500: %s", flavor, status, msg);
        return herr(err, "%d %s", status, msg);
    }
    r.anthropic = flavor == 1 || flavor == 4;
    r.ollama = flavor == 2;
    if (engine_submit(g_api.eng, t)) { task_release(t); return herr(err, "503 queue full"); }
    pthread_mutex_lock(&t->mu);
    while (!t->done) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    int rc = 0;
    if (stream) rc = stream_reply(&r, t, err, h);
    else if (t->status) {
        CHECK(t->status == 500, "server %d: a request failed with %d, not 500: %s", flavor, t->status, t->err);
        rc = herr(err, "%d %s", t->status, t->err);
    } else {
        char *resp = r.anthropic ? anthropic_response(&g_api, &r, t) : flavor == 2 ? ollama_response(&g_api, &r, t)
                                                                                 : api_response(&g_api, &r, t);
        atomic_store(&countdown, -1);   /* the request is done: the check below must not fail */
        cJSON *o = resp ? cJSON_Parse(resp) : NULL;
        if (!resp) rc = herr(err, "500 out of memory writing the response");
        else {   /* the whole response but what differs from one request to the next */
            REQUIRE(o, "server %d: the response is not JSON: %s", flavor, resp);
            for (size_t k = 0; k < sizeof VOLATILE / sizeof VOLATILE[0]; k++) cJSON_DeleteItemFromObject(o, VOLATILE[k]);
            cJSON *msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message"), *call;
            cJSON_ArrayForEach(call, cJSON_GetObjectItem(msg, "tool_calls")) cJSON_DeleteItemFromObject(call, "id");
            cJSON_ArrayForEach(call, cJSON_GetObjectItem(o, "content")) cJSON_DeleteItemFromObject(call, "id");   /* tool_use */
            if (flavor >= 3 && getenv("ALLOC_SHOW")) puts(resp);
            char *p = cJSON_PrintUnformatted(o);
            *h = fnv(*h, p, strlen(p));
            free(p);
        }
        cJSON_Delete(o);
        free(resp);
    }
    task_release(t);
    /* the engine thread may still be finishing the slot: let it settle, so the next count starts clean */
    for (long prev = -1, k = 0; k < 1000; k++) {
        int idle, busy, queued;
        engine_slots(g_api.eng, &idle, &busy, &queued);
        long now = atomic_load(&live);
        if (!busy && !queued && now == prev) break;
        prev = now;
        usleep(1000);
    }
    return rc;
}
static int op_openai(hearth_err *err, uint64_t *h) { return server_request(0, false, err, h); }
static int op_anthropic(hearth_err *err, uint64_t *h) { return server_request(1, false, err, h); }
static int op_ollama(hearth_err *err, uint64_t *h) { return server_request(2, false, err, h); }
static int op_tools(hearth_err *err, uint64_t *h) { return server_request(3, false, err, h); }
static int op_tools_anthropic(hearth_err *err, uint64_t *h) { return server_request(4, false, err, h); }
static int op_openai_stream(hearth_err *err, uint64_t *h) { return server_request(0, true, err, h); }
static int op_anthropic_stream(hearth_err *err, uint64_t *h) { return server_request(1, true, err, h); }
static int op_ollama_stream(hearth_err *err, uint64_t *h) { return server_request(2, true, err, h); }
static int op_tools_stream(hearth_err *err, uint64_t *h) { return server_request(3, true, err, h); }
static int op_tools_anthropic_stream(hearth_err *err, uint64_t *h) { return server_request(4, true, err, h); }

static void sweep(const char *name, int (*op)(hearth_err *, uint64_t *)) {
    hearth_err warm;
    uint64_t want = 1469598103934665603ull;
    CHECK(!op(&warm, &want), "%s: %s", name, warm.msg);
    long n = 0, clean_failures = 0;
    for (;; n++) {
        hearth_err err = { "" };
        long before = atomic_load(&live);
        atomic_store(&injected, false);
        atomic_store(&countdown, n);
        uint64_t got = 1469598103934665603ull;
        int rc = op(&err, &got);
        atomic_store(&countdown, -1);
        for (int k = 0; k < 250 && atomic_load(&live) != before; k++) usleep(2000);   /* the engine thread's frees */
        long leaked = atomic_load(&live) - before;
        bool inj = atomic_load(&injected);
        CHECK(leaked == 0, "%s, allocation %ld failing: %ld allocation(s) left behind (rc %d, '%s')", name, n, leaked, rc, err.msg);
        CHECK(rc || got == want, "%s, allocation %ld failing: succeeded with a different result", name, n);
        if (rc) {
            CHECK(inj, "%s failed with no allocation failing: %s", name, err.msg);
            CHECK(err.msg[0] && !strchr(err.msg, '\n'), "%s, allocation %ld failing: no one-line message", name, n);
            clean_failures++;
        }
        if (!inj) break;   /* ran through: every allocation of the operation has been made to fail once */
        if (leaked || (rc && !err.msg[0])) break;   /* one report per operation is enough */
    }
    printf("%-10s %ld allocations, each made to fail once: %ld clean failures, %ld recovered\n", name, n, clean_failures,
           n - clean_failures);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hearth-allocfail-XXXXXX");
    REQUIRE(mkdtemp(g_dir), "mkdtemp");
    for (size_t i = 0; i < sizeof TOKENIZERS / sizeof TOKENIZERS[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", g_dir, TOKENIZERS[i][0]);
        FILE *f = fopen(path, "w");
        REQUIRE(f && fputs(TOKENIZERS[i][1], f) >= 0 && !fclose(f), "writing %s", path);
    }
    g_chatml = tu_read_file("server/chatml.jinja", NULL);
    sweep("model", op_model);
    sweep("tokenizer", op_tokenizer);
    sweep("chat", op_chat);
    sweep("hf", op_hf);
    hearth_err err;
    server_params sp = { .parallel = 2, .n_ctx = 512, .n_threads = 1 };   /* the tools' listing is ~350 tokens */
    REQUIRE(!hearth_model_load("data/models/stories260K.gguf", &g_api.m, &err) &&
                !chat_fmt_new(g_api.m, g_chatml, &g_api.fmt, &err) && !engine_new(g_api.m, &sp, &g_api.eng, &err),
            "server: %s", err.msg);
    g_api.model_id = "stories260K";
    g_api.has_vocab = true;
    g_api.n_vocab = 512;
    sweep("openai", op_openai);
    sweep("anthropic", op_anthropic);
    sweep("ollama", op_ollama);
    sweep("tools", op_tools);
    sweep("tools-anth", op_tools_anthropic);
    sweep("openai-sse", op_openai_stream);
    sweep("anth-sse", op_anthropic_stream);
    sweep("ollama-nd", op_ollama_stream);
    sweep("tools-sse", op_tools_stream);
    sweep("tools-anth-sse", op_tools_anthropic_stream);
    engine_free(g_api.eng);
    chat_fmt_free(g_api.fmt);
    hearth_model_free(g_api.m);
    for (size_t i = 0; i < sizeof TOKENIZERS / sizeof TOKENIZERS[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", g_dir, TOKENIZERS[i][0]);
        unlink(path);
    }
    rmdir(g_dir);
    free(g_chatml);
    TEST_DONE();
}
#endif
