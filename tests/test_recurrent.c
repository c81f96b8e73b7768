/* test_recurrent.c — the hybrid models' recurrent state (Qwen3.5 dense and MoE fixtures: Gated DeltaNet
 * layers beside attention). Bit for bit: 1 thread == 2 threads; two sequences decoded in one interleaved batch
 * == each alone; a sequence cut back inside its current 64-position chunk and continued == never cut; a cut
 * before that chunk clears the sequence (hearth_seq_len says 0) and decoding again from the start gives the
 * same logits. The prompt cache's export: 128 positions of attention KV and the state checkpoint at 128 written
 * into a fresh context continue exactly as the original (and not before the state is written); a checkpoint
 * that is not kept (64 of 150) is refused. The context reports the state's bytes. */
#include <string.h>

#include "model/recurrent.h"
#include "testutil.h"

#define N 150   /* past two chunk boundaries */

static hearth_ctx *new_ctx(hearth_model *m, int n_seq, int n_threads) {
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_seq = n_seq;
    cp.n_threads = n_threads;
    hearth_ctx *c;
    hearth_err err;
    REQUIRE(!hearth_ctx_new(m, &cp, &c, &err), "ctx: %s", err.msg);
    return c;
}

/* Logits of every row of tokens[0..n) decoded on sequence seq in one batch, continuing it. */
static void decode_all(hearth_ctx *c, int seq, const hearth_token *t, int n, float *out) {
    const int V = c->m->hp.n_vocab;
    int32_t seqs[N];
    int8_t want[N];
    for (int i = 0; i < n; i++) seqs[i] = seq, want[i] = 1;
    hearth_err err;
    REQUIRE(!hearth_decode(c, &(hearth_batch){ .n = n, .tokens = t, .seq = seqs, .want_logits = want }, &err), "%s", err.msg);
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * V, hearth_logits(c, i), (size_t)V * sizeof(float));
}

static void check_model(const char *name) {
    hearth_model *m = tu_load_model(name);
    const int V = m->hp.n_vocab;
    REQUIRE(m->hp.n_recurrent > 0, "%s has no recurrent layers", name);
    hearth_token a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = (i * 37 + 11) % V, b[i] = (i * 101 + 5) % V;
    float *ref = malloc((size_t)N * V * sizeof(float)), *got = malloc((size_t)N * V * sizeof(float)),
          *refb = malloc((size_t)N * V * sizeof(float));
    REQUIRE(ref && got && refb, "malloc");

    hearth_ctx *c1 = new_ctx(m, 1, 1), *c2 = new_ctx(m, 1, 2);
    decode_all(c1, 0, a, N, ref);
    decode_all(c2, 0, a, N, got);
    CHECK(!memcmp(ref, got, (size_t)N * V * sizeof(float)), "%s: 1 and 2 threads differ", name);

    /* cut inside the current chunk (128..149): continuing gives the same bits */
    hearth_seq_truncate(c1, 0, 131);
    CHECK(hearth_seq_len(c1, 0) == 131, "%s: a cut to 131 kept %d", name, hearth_seq_len(c1, 0));
    decode_all(c1, 0, a + 131, N - 131, got);
    CHECK(!memcmp(ref + (size_t)131 * V, got, (size_t)(N - 131) * V * sizeof(float)), "%s: continued after a cut differs", name);
    /* cut before it: the sequence is cleared, and starts again exactly */
    hearth_seq_truncate(c1, 0, 100);
    CHECK(hearth_seq_len(c1, 0) == 0, "%s: a cut to 100 (chunk starts at 128) left %d", name, hearth_seq_len(c1, 0));
    decode_all(c1, 0, a, 100, got);
    CHECK(!memcmp(ref, got, (size_t)100 * V * sizeof(float)), "%s: decoded again after clearing differs", name);

    /* two sequences in one batch, rows interleaved and in uneven runs, == each alone */
    hearth_ctx *cb = new_ctx(m, 1, 2), *cm = new_ctx(m, 2, 2);
    decode_all(cb, 0, b, N, refb);
    hearth_token t[2 * N];
    int32_t seq[2 * N];
    int8_t want[2 * N];
    int rows_a[N], rows_b[N], na = 0, nb = 0, n = 0;
    while (na < N || nb < N) {   /* three of a, then two of b, ... */
        for (int k = 0; k < 3 && na < N; k++) rows_a[na] = n, t[n] = a[na++], seq[n] = 0, want[n++] = 1;
        for (int k = 0; k < 2 && nb < N; k++) rows_b[nb] = n, t[n] = b[nb++], seq[n] = 1, want[n++] = 1;
    }
    hearth_err err;
    REQUIRE(!hearth_decode(cm, &(hearth_batch){ .n = n, .tokens = t, .seq = seq, .want_logits = want }, &err), "%s", err.msg);
    bool same = true;
    for (int i = 0; i < N; i++) {
        same &= !memcmp(hearth_logits(cm, rows_a[i]), ref + (size_t)i * V, (size_t)V * sizeof(float));
        same &= !memcmp(hearth_logits(cm, rows_b[i]), refb + (size_t)i * V, (size_t)V * sizeof(float));
    }
    CHECK(same, "%s: two sequences in one batch differ from each alone", name);

    /* the prompt cache's path: the attention KV of 128 positions and the state at 128, into a fresh context */
    const size_t kvb = hearth_kv_token_bytes(c2) * 128, stb = hearth_state_bytes(c2);
    CHECK(stb > 0, "%s: no checkpoint bytes", name);
    uint8_t *kv = malloc(kvb), *st = malloc(stb);
    REQUIRE(kv && st, "malloc");
    CHECK(!hearth_kv_read(c2, 0, 0, 128, kv), "%s: kv_read", name);
    CHECK(hearth_state_read(c2, 0, 64, st) == -1, "%s: a state read at 64 of 150 positions (not kept) succeeded", name);
    CHECK(!hearth_state_read(c2, 0, 128, st), "%s: state_read at 128", name);
    hearth_ctx *cr = new_ctx(m, 1, 2);
    CHECK(!hearth_kv_write(cr, 0, 0, 128, kv), "%s: kv_write", name);
    hearth_token one = a[128];
    CHECK(hearth_decode(cr, &(hearth_batch){ .n = 1, .tokens = &one }, &err) == -1 && strstr(err.msg, "not restored"),
          "%s: decoded a sequence whose state was not restored", name);
    CHECK(!hearth_state_write(cr, 0, 128, st), "%s: state_write", name);
    decode_all(cr, 0, a + 128, N - 128, got);
    CHECK(!memcmp(ref + (size_t)128 * V, got, (size_t)(N - 128) * V * sizeof(float)), "%s: restored KV + state, continued, differs", name);
    hearth_ctx_free(cr);
    free(kv);
    free(st);
    const size_t sb = rec_state_bytes(c2);
    CHECK(sb > 0, "%s: no recurrent state bytes", name);
    printf("%-10s 1 == 2 threads, cut at 131 == uncut, cut at 100 clears, 2 sequences interleaved == alone, KV + "
           "checkpoint restored == uncut; state %zu bytes a sequence (checkpoint %zu), KV %zu\n", name, sb, stb,
           ctx_kv_bytes(c2, -1));
    hearth_ctx_free(c1);
    hearth_ctx_free(c2);
    hearth_ctx_free(cb);
    hearth_ctx_free(cm);
    free(ref);
    free(got);
    free(refb);
    hearth_model_free(m);
}

int main(void) {
    check_model("qwen35");
    check_model("qwen35moe");
    TEST_DONE();
}
