/* fuzz_gguf.c — the GGUF reader on arbitrary bytes: gguf_open_memory, then every value and tensor it hands
 * out is read (typed getters, arrays, strings), as the loaders do. */
#include "fuzz.h"
#include "io/gguf.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fuzz_copy(data, size);
    gguf_file *g;
    hearth_err err;
    if (buf && !gguf_open_memory(buf, size, &g, &err)) {
        volatile uint64_t sink = 0;
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const gguf_kv *kv = &g->kv[i];
            char key[300];
            snprintf(key, sizeof key, "%.*s", (int)(kv->key.n < 256 ? kv->key.n : 256), kv->key.p);
            uint32_t u; int64_t s; float f; bool b; gguf_str str;
            sink += gguf_get_u32(g, key, &u) + gguf_get_i64(g, key, &s) + gguf_get_f32(g, key, &f) +
                    gguf_get_bool(g, key, &b) + gguf_get_str(g, key, &str);
            if (kv->type == GGUF_ARR && kv->arr_type == GGUF_STR && kv->arr_n < 100000) {
                gguf_str *all = malloc((size_t)kv->arr_n * sizeof *all + 1);
                if (all) { gguf_arr_strs(kv, all); for (uint64_t k = 0; k < kv->arr_n; k++) sink += all[k].n ? (uint8_t)all[k].p[0] : 0; }
                free(all);
            } else if (kv->type == GGUF_ARR && kv->arr_type != GGUF_ARR) {
                for (uint64_t k = 0; k < kv->arr_n && k < 4096; k++) { int64_t v; sink += gguf_arr_int(kv, k, -1000, 1000, &v); }
            }
        }
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
            sink += gguf_find_tensor(g, t->name) != NULL;
        }
        (void)sink;
        gguf_close(g);
    }
    free(buf);
    return 0;
}
