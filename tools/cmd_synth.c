/* cmd_synth.c — `hearth synth --shape NAME --type TYPE -o FILE.gguf [--seed S]`: writes a random-weight
 * GGUF with the exact layout and metadata of a real model (src/synth.c), for benchmarks and tests. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "convert/quantize.h"
#include "convert/synth.h"

static void synth_usage(void) {
    printf("usage: hearth synth --shape NAME --type TYPE -o FILE.gguf [--seed S] [--pure] [--layers N] [-t THREADS]\n"
           "                    [--layer-scale X]\n"
           "Writes a model with random weights (deterministic for a seed) and a synthetic tokenizer, with the\n"
           "tensor names, shapes, types and metadata llama.cpp's converter and llama-quantize would give the real one.\n"
           "shapes:");
    for (int i = 0; synth_shape_at(i); i++) printf(" %s", synth_shape_at(i)->name);
    printf("\ntypes:  %s\n"
           "        typed as llama-quantize does: a plain type keeps the output (tied embedding) in Q6_K, --pure\n"
           "        uses the type for every matrix; the _M mixes give some attn_v / ffn_down layers Q6_K\n"
           "        --layers N: the shape with N layers instead (small models deep enough to split over ranks)\n"
           "        --layer-scale X: every layer's output projections (attn_output, ffn_down) drawn X times as\n"
           "        large, and a successor structure planted (the embeddings in orbits the last FFN steps along), for\n"
           "        speculative-decoding pairs: an F16 model and its Q4_0 copy (same seed) agree on ~87%% of greedy\n"
           "        tokens at 0.1 on llama-3.2-1b, and continuations do not repeat one token\n"
           "defaults: --seed 0, -t 2\n", quant_type_list());
}

typedef struct { bool tty; int last; double t0; } progress_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Percent on one updating line on a terminal, a line per 10% otherwise. */
static void on_progress(void *user, uint64_t done, uint64_t total) {
    progress_state *ps = user;
    int pct = total ? (int)(done * 100 / total) : 100;
    int step = ps->tty ? 1 : 10;
    if (pct / step == ps->last / step) return;
    ps->last = pct;
    if (ps->tty) fprintf(stderr, "\rsynth: %3d%%", pct);
    else fprintf(stderr, "synth: %3d%%\n", pct);
}

int cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *type_name = NULL, *out = NULL;
    long seed = 0, threads = 2, layers = 0;
    double layer_scale = 0;   /* 0: not given */
    bool pure = false;
    for (int i = 1; i < argc;) {
        const char *a = argv[i++];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { synth_usage(); return 0; }
        if (!strcmp(a, "--pure")) { pure = true; continue; }
        const char *v = i < argc ? argv[i++] : NULL;
        bool ok = true;
        if (!v) return cli_fail("missing value for %s", a);
        else if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--type")) type_name = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--seed")) ok = cli_int(a, v, 0, 0x7fffffffL, &seed);
        else if (!strcmp(a, "-t")) ok = cli_int(a, v, 1, 256, &threads);
        else if (!strcmp(a, "--layers")) ok = cli_int(a, v, 1, 4096, &layers);
        else if (!strcmp(a, "--layer-scale")) {
            ok = cli_float(a, v, &layer_scale);
            if (ok && !(layer_scale > 0 && layer_scale <= 100)) return cli_fail("bad value for --layer-scale: '%s' (expected a number above 0, at most 100)", v);
        }
        else return cli_fail("unknown option '%s' for synth (see hearth synth --help)", a);
        if (!ok) return 1;
    }
    if (!shape_name || !type_name || !out) return cli_fail("synth needs --shape, --type and -o (see hearth synth --help)");
    const synth_shape *found = synth_find_shape(shape_name);
    if (!found) return cli_fail("unknown shape '%s' (see hearth synth --help)", shape_name);
    synth_shape shape = *found;
    if (layers) shape.n_layer = (int)layers;
    const synth_shape *s = &shape;
    synth_ftype ft;
    hearth_err err;
    if (synth_parse_ftype(type_name, pure, &ft, &err)) return cli_fail("%s", err.msg);

    progress_state ps = { isatty(2), -1, now_s() };
    synth_opts o = { .seed = (uint64_t)seed, .n_threads = (int)threads, .layer_scale = (float)layer_scale, .progress = on_progress, .user = &ps };
    cli_unlink_temps_on_signal();
    int rc = synth_write(s, &ft, out, &o, &err);
    if (ps.tty) fputc('\n', stderr);
    if (rc) return cli_fail("%s", err.msg);
    fprintf(stderr, "synth: wrote %s (%s %s%s, seed %ld) in %.1f s\n", out, s->name, ft.name, pure ? " pure" : "", seed,
            now_s() - ps.t0);
    return 0;
}
