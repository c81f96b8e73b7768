/* cmd_info.c — `hearth info -m MODEL`: architecture, hyperparameters, tensors by type, sizes; under mpirun,
 * each rank's share of the model (its layers, its tensor part, the MiB of weights it holds). */
#include <string.h>

#include "cli.h"
#include "model/model.h"

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    cli_lora lora = { 0 };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: hearth info -m MODEL [--lora FILE[,FILE]] [--lora-scaled FILE:SCALE[,...]]\n");
            return 0;
        }
        if (!strcmp(argv[i], "-m") && i + 1 < argc) path = argv[++i];
        else if ((!strcmp(argv[i], "--lora") || !strcmp(argv[i], "--lora-scaled")) && i + 1 < argc) {
            if (!cli_lora_arg(argv[i], argv[i + 1], &lora)) return 1;
            i++;
        }
        else return cli_fail("unknown option '%s' for info (usage: hearth info -m MODEL [--lora FILE])", argv[i]);
    }
    if (!path) path = cli_default_model();
    hearth_model *m = cli_load_model(path);
    if (!m || cli_lora_load(m, &lora)) { cli_lora_free(&lora); hearth_model_free(m); return 1; }
    hearth_model_info in;
    hearth_model_get_info(m, &in);
    const ht_hparams *hp = &m->hp;
    printf("model        %s\n", path);
    printf("name         %s\n", in.name[0] ? in.name : "(none)");
    char tk[64] = "", pre[64] = "";
    hearth_model_meta_str(m, "tokenizer.ggml.model", tk, sizeof tk);
    hearth_model_meta_str(m, "tokenizer.ggml.pre", pre, sizeof pre);
    printf("tokenizer    %s%s%s%s\n", !hearth_model_has_tokenizer(m) ? "none (token ids only)" : tk[0] ? tk : "yes",
           pre[0] ? " (pre-tokenizer " : "", pre, pre[0] ? ")" : "");
    if (!m->arch) {   /* a vocabulary-only file */
        printf("architecture none: vocabulary only, no weights\nvocab        %d\nfile         %.2f MiB\n", in.n_vocab,
               in.file_bytes / 1048576.0);
        hearth_model_free(m);
        return 0;
    }
    printf("architecture %s%s\n", in.arch, in.is_encoder ? " (encoder)" : "");
    printf("vocab        %d\ncontext      %d\nembedding    %d\nlayers       %d\nheads        %d (kv %d, head dim %d)\n"
           "ffn          %d\nnorm eps     %g\nrope         %s, base %g, %d dims\n",
           in.n_vocab, in.n_ctx_train, in.n_embd, in.n_layer, in.n_head, in.n_head_kv, in.head_dim, in.n_ff,
           hp->norm_eps, hp->rope_type == ROPE_NEOX ? "neox" : "norm", hp->rope_base, hp->n_rot);
    if (hp->rope_yarn) printf("rope scaling YaRN x%g over %d original positions\n", hp->rope_scale, hp->n_ctx_orig);
    if (in.n_expert)
        printf("experts      %d, %d used per token, expert ffn %d; active %.2f M of %.2f M parameters (%.1f%%)\n", in.n_expert,
               in.n_expert_used, in.n_ff_exp, in.n_params_active / 1e6, in.n_params / 1e6, 100.0 * (double)in.n_params_active / (double)in.n_params);
    if (hp->n_recurrent)
        printf("recurrent    %d of %d layers Gated DeltaNet (conv %d, %d k-heads, %d v-heads of %d)%s\n", hp->n_recurrent,
               hp->n_layer, hp->ssm_conv, hp->ssm_k_heads, hp->ssm_v_heads, hp->ssm_state,
               hp->n_ff_shexp ? "; a shared expert" : "");
    if (hp->sliding_window && hp->swa_per_layer) {   /* Gemma 4: a pattern, and each kind its own geometry */
        printf("sliding win  %d, layers ", hp->sliding_window);
        int n_shared = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            putchar(m->layers[il].swa ? 'S' : 'G');
            n_shared += m->layers[il].kv_shared;
        }
        for (int k = 0; k < 2; k++)
            for (int il = 0; il < hp->n_layer; il++)
                if (m->layers[il].swa == (k == 0)) {
                    const ht_layer *L = &m->layers[il];
                    printf("; %s: kv %d, head dim %d, rope %d dims, base %g", L->swa ? "sliding" : "global", L->n_head_kv,
                           L->head_dim, L->n_rot, L->swa ? hp->rope_base_swa : hp->rope_base);
                    break;
                }
        printf("\n");
        if (n_shared) printf("kv sharing   the last %d layers read earlier layers' caches\n", n_shared);
        if (hp->n_embd_per_layer) printf("per-layer    embeddings of %d per layer\n", hp->n_embd_per_layer);
        if (hp->n_altup) {   /* Gemma 3n */
            int n_sparse = 0;
            for (int il = 0; il < hp->n_layer; il++) n_sparse += m->layers[il].ffn_sparse;
            printf("altup        %d residual streams (layers compute on stream %d), LAuReL rank %lld, sparse FFN gate in %d "
                   "layers\n", hp->n_altup, hp->altup_act, (long long)m->layers[0].laurel_l.ne[1], n_sparse);
        }
    } else if (hp->sliding_window)
        printf("sliding win  %d (every %d-th layer global, local base %g)\n", hp->sliding_window, hp->swa_period, hp->rope_base_swa);
    int count[HT_NTYPES] = { 0 };
    for (int i = 0; i < m->n_tensors; i++) if (m->tensors[i].type < HT_NTYPES) count[m->tensors[i].type]++;
    printf("tensors      %d:", m->n_tensors);
    for (int t = 0; t < HT_NTYPES; t++) if (count[t]) printf(" %s×%d", ht_get_traits((uint32_t)t)->name, count[t]);
    printf("\nparameters   %.2f M\nweights      %.2f MiB\nfile         %.2f MiB\n", in.n_params / 1e6,
           in.weight_bytes / 1048576.0, in.file_bytes / 1048576.0);
    for (int i = 0; i < lora.n; i++)
        printf("lora         %s: %d weights, rank %d, alpha %g, scale %g\n", lora.path[i], hearth_lora_count(lora.a[i]),
               hearth_lora_rank(lora.a[i]), hearth_lora_alpha(lora.a[i]), lora.scale[i]);
    cli_lora_free(&lora);
    int rc = 0;
    if (hearth_mpi_size() > 1) {   /* under mpirun: a small context makes each rank load its share, which it names */
        fflush(stdout);
        hearth_ctx_params p = hearth_ctx_default_params();
        p.n_ctx = p.n_batch = 16;
        p.n_threads = 1;
        hearth_ctx *c = NULL;
        hearth_err err;
        if (hearth_ctx_new(m, &p, &c, &err)) rc = cli_fail("%s", err.msg);
        hearth_ctx_free(c);
    }
    hearth_model_free(m);
    return rc;
}
