/* test_tokenizer.c — conformance and robustness tests for the tokenizer layer.
 *
 * 1. Every data/tokenizer/ggml-vocab-*.gguf set: each case of the .inp file (cases are separated by the line
 *    "__ggml_vocab_test__"; the text of a case is everything between "\n__ggml_vocab_test__\n" separators,
 *    so a case may be empty or consist of newlines) is encoded without special tokens and must equal the
 *    matching line of .out (ids separated by spaces, an empty line for no tokens).
 * 2. The same vectors through tokenizer.json (qwen3 == qwen2 ids, llama3 == llama-bpe ids).
 * 3. Round trips: concatenated pieces give the text back where the tokenizer is lossless.
 * 4. Special tokens (parse_special on/off, BOS/CLS/SEP), the WordPiece vocab.txt loader.
 * 5. Fuzz: seeded random byte strings (invalid UTF-8, NULs, long runs) through every tokenizer, and a long
 *    single "word"; nothing may crash, byte-level BPE must reproduce its input exactly. Pathological inputs
 *    (long whitespace runs, special-token prefixes repeated) must stay fast.
 * 6. The Hugging Face directories' tokenizer.json / vocab.txt agree with the matching GGUF models.
 * Set HEARTH_TOK_BIG=50 to also run a 50 MB single-word input per tokenizer. */
#define _GNU_SOURCE
#include "testutil.h"
#include "tokenizer/tok_internal.h"   /* regex_split for the delimiter-behaviour test */

#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A tokenizer.json given as text: written to a temporary file and loaded from it. */
static int vocab_from_json_text(const char *js, size_t len, ht_vocab **v, hearth_err *err) {
    char path[] = "/tmp/hearth-tokjson-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    FILE *f = fdopen(fd, "w");
    REQUIRE(f && fwrite(js, 1, len, f) == len && fclose(f) == 0, "cannot write %s", path);
    int rc = vocab_from_tokenizer_json(path, v, err);
    unlink(path);
    return rc;
}

typedef struct { char *text; size_t len; int32_t *ids; int n_ids; } tcase;
typedef struct { tcase *c; int n; } tset;

/* Parses .inp/.out as llama.cpp's test-tokenizer-0 does. */
static int load_set(const char *base, tset *out) {
    char path[512];
    size_t ilen, olen;
    snprintf(path, sizeof path, "%s.inp", base);
    char *inp = tu_read_file(path, &ilen);
    snprintf(path, sizeof path, "%s.out", base);
    char *outp = tu_read_file(path, &olen);
    if (!inp || !outp) { free(inp); free(outp); return -1; }
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep);
    out->c = NULL; out->n = 0;
    size_t pos = 0;
    while (pos < ilen) {
        char *hit = memmem(inp + pos, ilen - pos, sep, sl);
        size_t end = hit ? (size_t)(hit - inp) : ilen;
        out->c = realloc(out->c, (size_t)(out->n + 1) * sizeof(tcase));
        tcase *c = &out->c[out->n++];
        c->len = end - pos;
        c->text = malloc(c->len + 1);
        memcpy(c->text, inp + pos, c->len);
        c->text[c->len] = 0;
        c->ids = NULL; c->n_ids = 0;
        if (!hit) break;
        pos = end + sl;
    }
    /* .out: one line per case */
    char *line = outp;
    for (int i = 0; i < out->n && line && line < outp + olen; i++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *p = line;
        for (;;) {
            char *e;
            long x = strtol(p, &e, 10);
            if (e == p) break;
            out->c[i].ids = realloc(out->c[i].ids, (size_t)(out->c[i].n_ids + 1) * sizeof(int32_t));
            out->c[i].ids[out->c[i].n_ids++] = (int32_t)x;
            p = e;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(inp); free(outp);
    return 0;
}

static void free_set(tset *s) {
    for (int i = 0; i < s->n; i++) { free(s->c[i].text); free(s->c[i].ids); }
    free(s->c);
}

/* Concatenated pieces of ids. */
static char *detok(const ht_vocab *v, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, k = 0;
    char *s = malloc(cap);
    for (int i = 0; i < n; i++) {
        char tmp[256];
        int l = tok_piece(v, ids[i], false, tmp, sizeof tmp);
        if (k + (size_t)l + 1 > cap) { while (k + (size_t)l + 1 > cap) cap *= 2; s = realloc(s, cap); }
        if (l <= (int)sizeof tmp) memcpy(s + k, tmp, (size_t)l);
        else { char *big = malloc((size_t)l); tok_piece(v, ids[i], false, big, l); memcpy(s + k, big, (size_t)l); free(big); }
        k += (size_t)l;
    }
    s[k] = 0;
    *len = k;
    return s;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

/* Runs a vector set against a vocabulary; returns the number of passing cases. `round_trip`: 0 none,
 * 1 exact, 2 exact after dropping one leading space (SPM). */
static int run_set(const char *label, const ht_vocab *v, const tset *s, int round_trip) {
    int pass = 0;
    for (int i = 0; i < s->n; i++) {
        const tcase *c = &s->c[i];
        int32_t *ids; int n;
        hearth_err err;
        if (tok_encode(v, c->text, c->len, false, false, &ids, &n, &err)) {
            CHECK(0, "%s case %d: encode failed: %s", label, i, err.msg);
            continue;
        }
        bool ok = n == c->n_ids && (n == 0 || !memcmp(ids, c->ids, (size_t)n * sizeof *ids));
        if (ok) pass++;
        else {
            CHECK(ok, "%s case %d mismatch for text \"%.60s\"", label, i, c->text);
            print_ids("want", c->ids, c->n_ids);
            print_ids("got ", ids, n);
        }
        if (round_trip) {
            size_t dl;
            char *d = detok(v, ids, n, &dl);
            const char *dp = d;
            if (round_trip == 2 && dl > 0 && d[0] == ' ') { dp++; dl--; }
            CHECK(dl == c->len && !memcmp(dp, c->text, dl), "%s case %d: round trip gave \"%.60s\" for \"%.60s\"", label, i, dp, c->text);
            free(d);
        }
        free(ids);
    }
    printf("%-28s %d/%d\n", label, pass, s->n);
    return pass;
}

static ht_vocab *load_gguf_vocab(const char *path) {
    gguf_file *f;
    hearth_err err;
    if (gguf_open(path, &f, &err)) { CHECK(0, "gguf_open %s: %s", path, err.msg); return NULL; }
    ht_vocab *v = NULL;
    double t0 = now_ms();
    if (vocab_from_gguf(f, &v, &err)) CHECK(0, "vocab_from_gguf %s: %s", path, err.msg);
    double t1 = now_ms();
    if (v) printf("  loaded %s: %d tokens in %.1f ms\n", path, vocab_size(v), t1 - t0);
    gguf_close(f);
    return v;
}

static int encode_list(const ht_vocab *v, const char *text, bool add_special, bool parse_special, int32_t **ids) {
    int n; hearth_err err;
    if (tok_encode(v, text, strlen(text), add_special, parse_special, ids, &n, &err)) { CHECK(0, "encode: %s", err.msg); *ids = NULL; return -1; }
    return n;
}

/* xorshift64* */
static uint64_t rng_state = 0x1234567887654321ull;
static uint64_t rnd(void) { rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27; return rng_state * 2685821657736338717ull; }

static void fuzz(const char *label, const ht_vocab *v, bool exact_bytes, int rounds) {
    static const char *const frags[] = { " ", "  ", "\n", "\t", "a", "Hello", "'s", "'LL", "123", "\xc3\xa4", "\xe2\x96\x81",
        "\xf0\x9f\x98\x81", "\xe4\xb8\x80", "<s>", "</s>", "<|im_start|>", "[CLS]", "##", "\x80", "\xff", "\xc3", "\0",
        "\xed\xa0\x80", "\r\n", ".", "!!", "\xcc\x81", "\xef\xbf\xbd", "\xc2\x85", "\xe3\x80\x80" };
    int nf = (int)(sizeof frags / sizeof frags[0]);
    char buf[4096];
    for (int r = 0; r < rounds; r++) {
        size_t len = 0, target = rnd() % 300;
        while (len < target) {
            if (rnd() % 3 == 0) buf[len++] = (char)(rnd() & 0xFF);
            else {
                int k = (int)(rnd() % (uint64_t)nf);
                size_t fl = k == 21 ? 1 : strlen(frags[k]);
                if (len + fl > sizeof buf) break;
                memcpy(buf + len, frags[k], fl);
                len += fl;
            }
        }
        for (int mode = 0; mode < 4; mode++) {
            int32_t *ids; int n; hearth_err err;
            if (tok_encode(v, buf, len, mode & 1, mode & 2, &ids, &n, &err)) { CHECK(0, "%s fuzz encode failed: %s", label, err.msg); continue; }
            for (int i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < vocab_size(v), "%s fuzz: id %d out of range", label, ids[i]);
            if (exact_bytes && mode == 0) {
                size_t dl;
                char *d = detok(v, ids, n, &dl);
                CHECK(dl == len && !memcmp(d, buf, len), "%s fuzz round %d: bytes not reproduced (%zu vs %zu)", label, r, dl, len);
                free(d);
            }
            free(ids);
        }
    }
}

static void long_word(const char *label, const ht_vocab *v, size_t mb) {
    size_t len = mb << 20;
    char *s = malloc(len);
    for (size_t i = 0; i < len; i++) s[i] = "abcabcab"[i % 8];
    double t0 = now_ms();
    int32_t *ids; int n; hearth_err err;
    int rc = tok_encode(v, s, len, false, false, &ids, &n, &err);
    double t1 = now_ms();
    CHECK(rc == 0, "%s long word failed: %s", label, err.msg);
    if (!rc) { CHECK(n > 0, "%s long word: no tokens", label); free(ids); }
    printf("  %s: %zu MB single word -> %d tokens in %.0f ms\n", label, mb, rc ? 0 : n, t1 - t0);
    free(s);
}

int main(void) {
    static const struct { const char *name; int round_trip; bool fuzz_exact; } sets[] = {
        { "llama-spm", 2, false }, { "phi-3", 2, false }, { "llama-bpe", 1, true }, { "qwen2", 1, false },
        { "gpt-2", 1, true }, { "deepseek-coder", 1, false }, { "bert-bge", 0, false },
    };
    const char *big = getenv("HEARTH_TOK_BIG");
    size_t big_mb = big ? (size_t)atoi(big) : 0;
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
        char base[256];
        snprintf(base, sizeof base, "data/tokenizer/ggml-vocab-%s.gguf", sets[k].name);
        tset s;
        REQUIRE(load_set(base, &s) == 0, "cannot read vectors %s", base);
        ht_vocab *v = load_gguf_vocab(base);
        if (v) {
            run_set(sets[k].name, v, &s, sets[k].round_trip);
            fuzz(sets[k].name, v, sets[k].fuzz_exact, 300);
            long_word(sets[k].name, v, big_mb ? big_mb : 1);
            vocab_free(v);
        }
        free_set(&s);
    }

    /* tokenizer.json */
    static const struct { const char *dir, *vectors; } js[] = { { "qwen3", "qwen2" }, { "llama3", "llama-bpe" } };
    for (size_t k = 0; k < 2; k++) {
        char path[256], base[256];
        snprintf(path, sizeof path, "data/tokenizer-json/%s/tokenizer.json", js[k].dir);
        snprintf(base, sizeof base, "data/tokenizer/ggml-vocab-%s.gguf", js[k].vectors);
        tset s;
        REQUIRE(load_set(base, &s) == 0, "cannot read vectors %s", base);
        ht_vocab *v = NULL;
        hearth_err err;
        double t0 = now_ms();
        int rc = vocab_from_tokenizer_json(path, &v, &err);
        double t1 = now_ms();
        CHECK(rc == 0, "vocab_from_tokenizer_json %s: %s", path, rc ? err.msg : "");
        if (v) {
            printf("  loaded %s: %d tokens in %.1f ms\n", path, vocab_size(v), t1 - t0);
            char label[64];
            snprintf(label, sizeof label, "json:%s", js[k].dir);
            run_set(label, v, &s, 1);
            fuzz(label, v, k == 1, 200);
            vocab_free(v);
        }
        free_set(&s);
    }

    /* a hostile tokenizer.json: chained Replace normalizers whose replacement holds what they replace grow a
     * text exponentially (found by fuzz_tokenizer_json as a 16 s input); tokenizing must fail in one line */
    {
        const char *hostile = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0,\"[UNK]\":1},\"unk_token\":\"[UNK]\"},"
                              "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"},"
                              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"          \"}]}}";
        ht_vocab *v = NULL;
        hearth_err err;
        int rc = vocab_from_tokenizer_json_text(hostile, strlen(hostile), "hostile.json", &v, &err);
        CHECK(rc == 0, "hostile tokenizer.json should load: %s", rc ? err.msg : "");
        if (v) {
            int32_t *ids = NULL;
            int n = 0;
            double t0 = now_ms();
            rc = tok_encode(v, "a a a a a a a a a a", 19, false, false, &ids, &n, &err);
            double ms = now_ms() - t0;
            CHECK(rc != 0 && strstr(err.msg, "normalizers grow the text") && !strchr(err.msg, '\n'),
                  "an exponentially growing normalizer: rc %d, '%s'", rc, rc ? err.msg : "");
            CHECK(ms < 1000, "refused in %.0f ms", ms);
            free(ids);
            vocab_free(v);
        }
    }

    /* Gemma 4's BPE (GGUF model "gemma4": spaces as "▁", newline runs apart, byte fallback, always a BOS): ids from
     * llama.cpp's llama-tokenize on the fixture's vocabulary (the first 768 tokens of Gemma 4's), and back to its pieces */
    {
        static const struct { const char *text; int n; int32_t ids[48]; } g4[] = {
            { "Hello world", 14, { 2, 310, 339, 346, 346, 349, 464, 388, 367, 357, 349, 352, 346, 338 } },
            { " leading  and  double spaces", 41, { 2, 464, 388, 367, 346, 339, 335, 338, 343, 348, 341, 464, 388, 367, 464,
              388, 367, 335, 348, 338, 464, 388, 367, 464, 388, 367, 338, 349, 355, 336, 346, 339, 464, 388, 367, 353, 350, 335,
              337, 339, 353 } },
            { "line one\n\nline two\n", 23, { 2, 346, 343, 348, 339, 464, 388, 367, 349, 348, 339, 108, 346, 343, 348, 339,
              464, 388, 367, 354, 357, 349, 107 } },
            { "caf\xc3\xa9 \xf0\x9f\x98\x81 42 \xe4\xb8\x80", 24, { 2, 337, 335, 340, 433, 407, 464, 388, 367, 478, 397,
              390, 367, 464, 388, 367, 290, 288, 464, 388, 367, 466, 422, 366 } },
        };
        hearth_model *m;
        hearth_err err;
        REQUIRE(!hearth_tokenizer_load("data/models/gemma4.gguf", &m, &err), "gemma4 vocabulary: %s", err.msg);
        for (size_t k = 0; k < sizeof g4 / sizeof g4[0]; k++) {
            hearth_token ids[64];
            int n = hearth_tokenize(m, g4[k].text, strlen(g4[k].text), true, false, ids, 64, &err);
            bool same = n == g4[k].n;
            for (int i = 0; same && i < n; i++) same = ids[i] == g4[k].ids[i];
            CHECK(same, "gemma4 tokenizer, text %zu: %d ids, the reference's %d", k, n, g4[k].n);
            /* this vocabulary has no "▁" token: a space comes back as its three fallback bytes, as in the reference */
            char text[256], want[256];
            int len = 0, wn = 0;
            for (int i = 1; i < n && len < 200; i++) len += hearth_token_piece(m, ids[i], text + len, 200 - len);
            for (const char *p = g4[k].text; *p; p++)
                if (*p == ' ') memcpy(want + wn, "\xe2\x96\x81", 3), wn += 3;
                else want[wn++] = *p;
            CHECK(len == wn && !memcmp(text, want, (size_t)len), "gemma4 text %zu: no round trip", k);
        }
        hearth_model_free(m);
    }

    /* special tokens and BOS handling */
    {
        ht_vocab *v = load_gguf_vocab("data/tokenizer/ggml-vocab-qwen2.gguf");
        if (v) {
            int32_t *ids;
            int n = encode_list(v, "<|im_start|>user", false, true, &ids);
            CHECK(n == 2 && ids[0] == 151644, "qwen2 parse_special: n=%d first=%d", n, n > 0 ? ids[0] : -1);
            free(ids);
            n = encode_list(v, "<|im_start|>user", false, false, &ids);
            CHECK(n > 2 && ids[0] != 151644, "qwen2 no parse_special: n=%d", n);
            free(ids);
            CHECK(vocab_is_eog(v, 151645) && vocab_is_eog(v, 151643), "qwen2 eog");
            /* user-defined tokens ([PAD151646] in this GGUF): only with TOK_SPECIAL_USER / ALL */
            hearth_err err;
            int m;
            CHECK(!tok_encode_mode(v, "x[PAD151646]", 12, false, TOK_SPECIAL_USER, &ids, &m, &err) && m == 2 && ids[1] == 151646,
                  "TOK_SPECIAL_USER");
            free(ids);
            CHECK(!tok_encode_mode(v, "x[PAD151646]<|im_end|>", 22, false, TOK_SPECIAL_USER, &ids, &m, &err) && m > 3 &&
                  ids[1] == 151646 && ids[m - 1] != 151645, "TOK_SPECIAL_USER leaves control text alone");
            free(ids);
            /* parse_special=false is TOK_SPECIAL_USER, as in Hugging Face and llama.cpp */
            n = encode_list(v, "x[PAD151646]<|im_end|>", false, false, &ids);
            CHECK(n > 3 && ids[1] == 151646 && ids[n - 1] != 151645, "parse_special=false: user tokens match, control text does not: n=%d", n);
            free(ids);
            CHECK(!tok_encode_mode(v, "x[PAD151646]", 12, false, TOK_SPECIAL_NONE, &ids, &m, &err) && m > 2, "TOK_SPECIAL_NONE");
            free(ids);
            char piece[64];
            CHECK(tok_piece(v, 151644, false, piece, sizeof piece) == 0, "control piece hidden");
            CHECK(tok_piece(v, 151644, true, piece, sizeof piece) == 12 && !memcmp(piece, "<|im_start|>", 12), "control piece shown");
            vocab_free(v);
        }
        v = load_gguf_vocab("data/tokenizer/ggml-vocab-llama-spm.gguf");
        if (v) {
            int32_t *ids;
            int n = encode_list(v, "Hello world", true, false, &ids);
            CHECK(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186, "spm bos: n=%d", n);
            free(ids);
            n = encode_list(v, "<s>Hello", false, true, &ids);
            CHECK(n == 2 && ids[0] == 1 && ids[1] == 15043, "spm parse_special <s>: n=%d", n);
            free(ids);
            n = encode_list(v, "", true, false, &ids);
            CHECK(n == 1 && ids[0] == 1, "spm empty with bos: n=%d", n);
            free(ids);
            char piece[8];
            CHECK(tok_piece(v, 13, false, piece, 8) == 1 && piece[0] == '\n', "spm byte piece");
            CHECK(tok_piece(v, 15043, false, piece, 2) == 6 && piece[0] == ' ' && piece[1] == 'H', "spm piece truncation");
            vocab_free(v);
        }
        v = load_gguf_vocab("data/tokenizer/ggml-vocab-bert-bge.gguf");
        if (v) {
            int32_t *ids;
            int n = encode_list(v, "Hello world", true, false, &ids);
            CHECK(n == 4 && ids[0] == 101 && ids[3] == 102, "bert cls/sep: n=%d", n);
            free(ids);
            vocab_free(v);
        }
        v = load_gguf_vocab("data/tokenizer/ggml-vocab-llama-bpe.gguf");
        if (v) {
            int32_t *ids;
            int n = encode_list(v, "Hello", true, false, &ids);
            CHECK(n == 2 && ids[0] == 128000, "llama3 bos: n=%d", n);
            free(ids);
            vocab_free(v);
        }
    }

    /* every supported tokenizer.ggml.pre: a byte-level vocabulary (256 byte tokens + a few merges) written to
     * a GGUF file loads, tokenizes the fuzz inputs and the vector texts, and reproduces them exactly */
    {
        static const char *const pres[] = { "default", "gpt-2", "llama-bpe", "llama3", "qwen2", "qwen35", "deepseek-llm",
            "deepseek-coder", "deepseek-v3", "falcon", "starcoder", "refact", "mpt", "command-r", "gpt-4o", "llama4", "tekken",
            "smollm", "phi-2", "stablelm2", "olmo", "dbrx", "jina-v1-en", "jina-v2-en", "jina-v2-es", "jina-v2-de",
            "jina-v2-code", "poro-chat", "viking", "bloom", "chatglm-bpe", "exaone", "minerva-7b", "chameleon", "smaug-bpe",
            "codeshell", "jais", "gpt3-finnish", "exaone4", "exaone-moe", "bailingmoe", "seed-coder", "tiny_aya", "minicpm5",
            "ufakzeka", "grok-2", "hunyuan", "no-such-pre" };
        char *texts[260];
        for (int b = 0; b < 256; b++) {
            unsigned cp = b, k = 0;
            if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
                for (int i = 0; i < b; i++) if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174)) k++;
                cp = 256 + k;
            }
            texts[b] = malloc(4);
            if (cp < 0x80) { texts[b][0] = (char)cp; texts[b][1] = 0; }
            else { texts[b][0] = (char)(0xC0 | (cp >> 6)); texts[b][1] = (char)(0x80 | (cp & 0x3F)); texts[b][2] = 0; }
        }
        texts[256] = "he"; texts[257] = "\xc4\xa0t"; texts[258] = "\xc4\xa0the"; texts[259] = "<|endoftext|>";
        const char *merges[] = { "h e", "\xc4\xa0 t", "\xc4\xa0t he" };
        int32_t types[260];
        for (int i = 0; i < 260; i++) types[i] = i == 259 ? 3 : 1;
        tset vs;
        REQUIRE(load_set("data/tokenizer/ggml-vocab-llama-bpe.gguf", &vs) == 0, "vectors");
        int ok_pres = 0;
        for (size_t k = 0; k < sizeof pres / sizeof pres[0]; k++) {
            gguf_writer *w = gguf_writer_new();
            gguf_w_str(w, "general.architecture", "gpt2");
            gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
            gguf_w_str(w, "tokenizer.ggml.pre", pres[k]);
            gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts, 260);
            gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, 260);
            gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 3);
            gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 259);
            char path[] = "/tmp/hearth-pre-XXXXXX";
            int fd = mkstemp(path);
            REQUIRE(fd >= 0, "mkstemp");
            close(fd);
            hearth_err err;
            int rc = gguf_writer_write(w, path, &err);
            gguf_writer_free(w);
            CHECK(rc == 0, "write %s: %s", path, err.msg);
            gguf_file *f = NULL;
            ht_vocab *v = NULL;
            if (!rc && !gguf_open(path, &f, &err)) rc = vocab_from_gguf(f, &v, &err);
            if (f) gguf_close(f);
            unlink(path);
            if (!strcmp(pres[k], "no-such-pre")) {
                CHECK(rc != 0 && strstr(err.msg, "no-such-pre"), "unknown pre accepted");
                continue;
            }
            CHECK(rc == 0 && v, "pre '%s': %s", pres[k], err.msg);
            if (!v) continue;
            int good = 1;
            for (int i = 0; i < vs.n; i++) {
                int32_t *ids; int n;
                if (tok_encode(v, vs.c[i].text, vs.c[i].len, false, false, &ids, &n, &err)) { good = 0; continue; }
                size_t dl;
                char *d = detok(v, ids, n, &dl);
                bool same = dl == vs.c[i].len && !memcmp(d, vs.c[i].text, dl);
                if (!same && !strncmp(pres[k], "qwen", 4)) same = true;   /* NFC may change the text */
                if (!same) { good = 0; CHECK(0, "pre '%s': case %d does not round-trip", pres[k], i); }
                free(d); free(ids);
            }
            int32_t *ids; int n;
            CHECK(!tok_encode(v, " the he", 7, false, false, &ids, &n, &err) && n >= 2 && ids[n - 1] == 256,
                  "pre '%s': merges not applied", pres[k]);
            free(ids);
            fuzz(pres[k], v, strncmp(pres[k], "qwen", 4) != 0, 20);
            ok_pres += good;
            vocab_free(v);
        }
        printf("pre-tokenizers               %d/%d round-trip\n", ok_pres, (int)(sizeof pres / sizeof pres[0]) - 1);
        for (int b = 0; b < 256; b++) free(texts[b]);
        free_set(&vs);
    }

    /* HF Split delimiter behaviours (the examples of the tokenizers documentation) */
    {
        static const struct { int behavior; const char *want; } cases[] = {
            { SB_REMOVED, "the|final|countdown" }, { SB_ISOLATED, "the|-|final|-|-|countdown" },
            { SB_MERGED_PREV, "the-|final-|-|countdown" }, { SB_MERGED_NEXT, "the|-final|-|-countdown" },
            { SB_CONTIGUOUS, "the|-|final|--|countdown" },
        };
        const char *text = "the-final--countdown";
        hearth_err err;
        pcre2_code *lit = regex_compile_literal("-", 1, &err), *re = regex_compile("\\p{P}", 5, &err);
        REQUIRE(lit && re, "compile: %s", err.msg);
        for (int pass = 0; pass < 2; pass++) {
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                ht_spans sp = {0};
                rx_ctx rx = {0};
                int rc = regex_split(pass ? re : lit, text, 0, strlen(text), cases[k].behavior, false, &rx, &sp);
                char got[128] = "";
                for (size_t i = 0; i < sp.n; i++) {
                    if (i) strcat(got, "|");
                    strncat(got, text + sp.v[i].off, sp.v[i].len);
                }
                CHECK(rc == 0 && !strcmp(got, cases[k].want), "split behaviour %d: got %s want %s", cases[k].behavior, got, cases[k].want);
                free(sp.v);
                rx_free(&rx);
            }
        }
        pcre2_code_free(lit); pcre2_code_free(re);
    }

    /* odd metadata: empty and duplicate tokens, malformed merges, ids out of range, wrongly typed arrays */
    for (int model = 0; model < 3; model++) {
        static const char *const models[] = { "llama", "gpt2", "bert" };
        const char *toks[] = { "", "a", "a", "<0x41>", "\xe2\x96\x81\x61", "ab", "[UNK]", "[CLS]", "[SEP]", "b" };
        const char *merges[] = { "", "a", " ", "a b", "ab", "x y" };
        const char *junk[] = { "1", "2" };
        gguf_writer *w = gguf_writer_new();
        gguf_w_str(w, "tokenizer.ggml.model", models[model]);
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 10);
        gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 6);
        gguf_w_arr_str(w, "tokenizer.ggml.token_type", junk, 2);
        gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1000000);
        gguf_w_i32(w, "tokenizer.ggml.eos_token_id", -5);
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true);
        char path[] = "/tmp/hearth-odd-XXXXXX";
        int fd = mkstemp(path);
        REQUIRE(fd >= 0, "mkstemp");
        close(fd);
        hearth_err err;
        gguf_file *f = NULL;
        ht_vocab *v = NULL;
        if (!gguf_writer_write(w, path, &err) && !gguf_open(path, &f, &err) && !vocab_from_gguf(f, &v, &err)) {
            fuzz(models[model], v, false, 30);
            char piece[8];
            for (int32_t id = -2; id < 12; id++) tok_piece(v, id, true, piece, (int)sizeof piece);
            vocab_free(v);
        }
        gguf_writer_free(w);
        if (f) gguf_close(f);
        unlink(path);
    }

    /* NFC: Qwen's tokenizer composes decomposed text first */
    {
        ht_vocab *v = load_gguf_vocab("data/tokenizer/ggml-vocab-qwen2.gguf");
        if (v) {
            int32_t *a, *b;
            int na = encode_list(v, "caf\xc3\xa9 ", false, false, &a), nb = encode_list(v, "cafe\xcc\x81 ", false, false, &b);
            CHECK(na == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a), "qwen2 NFC: %d vs %d tokens", na, nb);
            free(a); free(b);
            vocab_free(v);
        }
    }

    /* pathological inputs: must stay linear */
    {
        ht_vocab *v = load_gguf_vocab("data/tokenizer/ggml-vocab-llama-bpe.gguf");
        static const char *const units[] = { " ", "\n", " \n", "<|", "<|begin_of_text", "a ", "\xc3", "1", "'s", "\t " };
        size_t len = 1u << 20;
        char *s = malloc(len);
        for (size_t u = 0; v && u < sizeof units / sizeof units[0]; u++) {
            size_t ul = strlen(units[u]);
            for (size_t i = 0; i < len; i++) s[i] = units[u][i % ul];
            double t0 = now_ms();
            int32_t *ids; int n; hearth_err err;
            int rc = tok_encode(v, s, len, false, true, &ids, &n, &err);
            double dt = now_ms() - t0;
            CHECK(rc == 0, "pathological '%s': %s", units[u], err.msg);
            if (!rc) free(ids);
            char shown[64] = "";
            for (const char *c = units[u]; *c; c++) {
                char e[8];
                snprintf(e, sizeof e, *c == '\n' ? "\\n" : *c == '\t' ? "\\t" : (unsigned char)*c >= 0x80 ? "\\x%02x" : "%c",
                         (unsigned char)*c);
                strcat(shown, e);
            }
            printf("  1 MB of '%s': %.0f ms\n", shown, dt);
        }
        free(s);
        vocab_free(v);
    }

    /* Hugging Face directories agree with the GGUF models (all vector texts) */
    {
        static const struct { const char *hf, *gguf; } pairs[] = {
            { "data/hf/gpt2-hf/tokenizer.json", "data/models/gpt2.gguf" },
            { "data/hf/qwen2-hf/tokenizer.json", "data/models/qwen2.gguf" },
            { "data/hf/qwen3-hf-f16/tokenizer.json", "data/models/qwen3.gguf" },
            { "data/hf/bert-hf", "data/models/bert.gguf" },
        };
        tset s;
        REQUIRE(load_set("data/tokenizer/ggml-vocab-bert-bge.gguf", &s) == 0, "vectors");
        for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
            ht_vocab *a = NULL, *b = load_gguf_vocab(pairs[k].gguf);
            hearth_err err;
            int rc = strstr(pairs[k].hf, ".json") ? vocab_from_tokenizer_json(pairs[k].hf, &a, &err)
                                                  : vocab_from_wordpiece_txt(pairs[k].hf, true, &a, &err);
            CHECK(rc == 0, "%s: %s", pairs[k].hf, rc ? err.msg : "");
            int same = 0;
            for (int i = 0; a && b && i < s.n; i++) {
                int32_t *x, *y; int nx, ny;
                bool ok = !tok_encode(a, s.c[i].text, s.c[i].len, true, true, &x, &nx, &err) &&
                          !tok_encode(b, s.c[i].text, s.c[i].len, true, true, &y, &ny, &err);
                if (ok && nx == ny && !memcmp(x, y, (size_t)nx * sizeof *x)) same++;
                else { CHECK(0, "%s vs %s differ on case %d", pairs[k].hf, pairs[k].gguf, i); print_ids("hf  ", x, nx); print_ids("gguf", y, ny); }
                if (ok) { free(x); free(y); }
            }
            printf("%-28s %d/%d agree with %s\n", pairs[k].hf + 8, same, s.n, pairs[k].gguf + 5);
            vocab_free(a); vocab_free(b);
        }
        free_set(&s);
    }

    /* synthetic tokenizer.json files: Llama-2 style BPE (Prepend/Replace normalizer or Metaspace, byte
     * fallback) and WordPiece with the BERT normalizer */
    {
        static const char *const words[] = { "\xe2\x96\x81", "h", "e", "l", "o", "\xe2\x96\x81h", "ll", "\xe2\x96\x81he", "llo",
                                              "\xe2\x96\x81hello", "w" };
        char *js = malloc(1 << 16);
        for (int variant = 0; variant < 2; variant++) {
            int k = sprintf(js, "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
                                "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}],");
            if (variant == 0)
                k += sprintf(js + k, "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
                                     "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},\"pre_tokenizer\":null,");
            else
                k += sprintf(js + k, "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\","
                                     "\"prepend_scheme\":\"first\",\"split\":false},");
            k += sprintf(js + k, "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
                                 "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]},"
                                 "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},"
                                 "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},"
                                 "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,\"fuse_unk\":true,\"vocab\":{"
                                 "\"<unk>\":0,\"<s>\":1,\"</s>\":2");
            for (int b = 0; b < 256; b++) k += sprintf(js + k, ",\"<0x%02X>\":%d", b, 3 + b);
            for (int w = 0; w < 11; w++) k += sprintf(js + k, ",\"%s\":%d", words[w], 259 + w);
            k += sprintf(js + k, "},\"merges\":[\"\xe2\x96\x81 h\",\"l l\",\"\xe2\x96\x81h e\",[\"ll\",\"o\"],\"\xe2\x96\x81he llo\"]}}");
            ht_vocab *v = NULL;
            hearth_err err;
            int rc = vocab_from_json_text(js, (size_t)k, &v, &err);
            CHECK(rc == 0, "synthetic llama json %d: %s", variant, rc ? err.msg : "");
            if (!v) continue;
            int32_t *ids;
            int n = encode_list(v, "hello w\xc3\xa9", true, false, &ids);
            static const int32_t want[] = { 1, 268, 259, 269, 3 + 0xC3, 3 + 0xA9 };
            CHECK(n == 6 && !memcmp(ids, want, sizeof want), "synthetic llama json %d: n=%d", variant, n);
            if (n == 6) {
                size_t dl;
                char *d = detok(v, ids, n, &dl);
                CHECK(dl == 10 && !memcmp(d, " hello w\xc3\xa9", 10), "synthetic llama json %d decode: '%s'", variant, d);
                free(d);
            }
            free(ids);
            n = encode_list(v, "<s>hello", false, true, &ids);
            CHECK(n >= 2 && ids[0] == 1 && (variant == 0 ? ids[1] == 268 : ids[1] != 268), "synthetic llama json %d special: n=%d", variant, n);
            free(ids);
            vocab_free(v);
        }
        int k = sprintf(js, "{\"added_tokens\":[{\"id\":0,\"content\":\"[PAD]\",\"special\":true},{\"id\":1,\"content\":\"[UNK]\",\"special\":true},"
                            "{\"id\":2,\"content\":\"[CLS]\",\"special\":true},{\"id\":3,\"content\":\"[SEP]\",\"special\":true}],"
                            "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,"
                            "\"lowercase\":true},\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
                            "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",3],\"cls\":[\"[CLS]\",2]},"
                            "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
                            "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
                            "\"max_input_chars_per_word\":100,\"vocab\":{\"[PAD]\":0,\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,\"un\":4,"
                            "\"##aff\":5,\"##able\":6,\"hello\":7,\",\":8,\"!\":9,\"\xe4\xb8\x80\":10}}}");
        ht_vocab *v = NULL;
        hearth_err err;
        int rc = vocab_from_json_text(js, (size_t)k, &v, &err);
        CHECK(rc == 0, "synthetic wordpiece json: %s", rc ? err.msg : "");
        if (v) {
            int32_t *ids;
            int n = encode_list(v, "Unaffable, H\xc3\xa9LLO!\xe4\xb8\x80x\x01 zzz", true, false, &ids);
            static const int32_t want[] = { 2, 4, 5, 6, 8, 7, 9, 10, 1, 1, 3 };
            CHECK(n == 11 && !memcmp(ids, want, sizeof want), "synthetic wordpiece json: n=%d", n);
            char piece[16];
            CHECK(tok_piece(v, 5, false, piece, 16) == 3 && !memcmp(piece, "aff", 3), "wordpiece ## piece");
            CHECK(tok_piece(v, 4, false, piece, 16) == 3 && !memcmp(piece, " un", 3), "wordpiece word piece");
            free(ids);
            vocab_free(v);
        }
        /* mutated files: loading may fail, but never crash; what loads must tokenize */
        static const char pool[] = "{}[]\":,0123456789-ae\\ ";
        size_t base_len = (size_t)k;
        char *orig = malloc(base_len);
        memcpy(orig, js, base_len);
        for (int r = 0; r < 300; r++) {
            memcpy(js, orig, base_len);
            size_t len = base_len;
            int edits = 1 + (int)(rnd() % 4);
            for (int e = 0; e < edits; e++) {
                size_t at = rnd() % len;
                switch (rnd() % 3) {
                case 0: js[at] = pool[rnd() % (sizeof pool - 1)]; break;
                case 1: len = at + 1; break;                     /* truncate */
                default: js[at] = (char)(rnd() & 0xFF); break;
                }
            }
            ht_vocab *mv = NULL;
            if (!vocab_from_json_text(js, len, &mv, &err)) {
                int32_t *ids; int n;
                if (!tok_encode(mv, "Unaffable, H\xc3\xa9LLO!", 15, true, true, &ids, &n, &err)) free(ids);
                vocab_free(mv);
            }
        }
        free(orig);
        free(js);
    }

    /* vocab.txt WordPiece loader == the GGUF BERT vocabulary on the bert-bge vectors */
    {
        ht_vocab *v = NULL;
        hearth_err err;
        int rc = vocab_from_wordpiece_txt("data/hf/bert-hf", true, &v, &err);
        CHECK(rc == 0, "vocab_from_wordpiece_txt: %s", rc ? err.msg : "");
        if (v) {
            int32_t *ids;
            int n = encode_list(v, "Hello, World! unaffable", true, false, &ids);
            CHECK(n >= 3 && ids[0] == vocab_bos(v), "wordpiece txt: n=%d", n);
            free(ids);
            fuzz("wordpiece-txt", v, false, 100);
            vocab_free(v);
        }
    }
    TEST_DONE();
}
