/* hf_meta.c — what a Hugging Face directory says beyond config.json, carried as GGUF metadata so nothing
 * downstream special-cases HF models: tokenizer_config.json's chat template (tokenizer.chat_template) and
 * generation_config.json's sampling defaults (hearth.generation.*) and end-of-generation ids. The model
 * reads those keys back (model.c) whether they came from an HF directory or a GGUF written by quantize. */
#include "io/hf_meta.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/safetensors.h"

/* Reads dir/name as JSON; *out = NULL (and 0) when the file is absent. */
static int read_optional(const char *dir, const char *name, cJSON **out, hearth_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *out = NULL;
    if (access(path, F_OK)) return 0;
    if (!(*out = st_read_json(path, err))) return -1;
    if (!cJSON_IsObject(*out)) { cJSON_Delete(*out); *out = NULL; return herr(err, "%s: not a JSON object", path); }
    return 0;
}

/* chat_template: a string, or a list of {name, template} (the one named "default", else the first). */
static const char *pick_template(const cJSON *tc) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template"), *first = NULL, *e;
    if (cJSON_IsString(ct)) return ct->valuestring;
    if (!cJSON_IsArray(ct)) return NULL;
    cJSON_ArrayForEach(e, ct) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name"), *t = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(t)) continue;
        if (cJSON_IsString(n) && !strcmp(n->valuestring, "default")) return t->valuestring;
        if (!first) first = t;
    }
    return first ? first->valuestring : NULL;
}

static void put_gen_f32(gguf_writer *w, const cJSON *gc, const char *hf, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(gc, hf);
    if (cJSON_IsNumber(v)) gguf_w_f32(w, key, (float)v->valuedouble);
}

/* eos_token_id: an integer or a list of them -> hearth.generation.eos_token_ids. */
static void put_gen_eos(gguf_writer *w, const cJSON *gc) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(gc, "eos_token_id"), *e;
    int32_t ids[64];
    uint64_t n = 0;
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e9) ids[n++] = (int32_t)v->valuedouble;
    if (cJSON_IsArray(v)) cJSON_ArrayForEach(e, v)
        if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < 1e9 && n < 64) ids[n++] = (int32_t)e->valuedouble;
    if (n) gguf_w_arr_i32(w, GEN_KEY "eos_token_ids", ids, n);
}

static void put_generation(gguf_writer *w, const cJSON *gc) {
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(gc, "do_sample");
    put_gen_f32(w, gc, "temperature", GEN_KEY "temperature");
    if (cJSON_IsFalse(ds)) gguf_w_f32(w, GEN_KEY "temperature", 0.0f);   /* greedy, as transformers does */
    put_gen_f32(w, gc, "top_p", GEN_KEY "top_p");
    put_gen_f32(w, gc, "min_p", GEN_KEY "min_p");
    put_gen_f32(w, gc, "typical_p", GEN_KEY "typical_p");
    put_gen_f32(w, gc, "repetition_penalty", GEN_KEY "repetition_penalty");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(gc, "top_k");
    if (cJSON_IsNumber(k) && k->valuedouble >= 0 && k->valuedouble < 1e9) gguf_w_u32(w, GEN_KEY "top_k", (uint32_t)k->valuedouble);
    put_gen_eos(w, gc);
}

int hf_put_extra_metadata(gguf_writer *w, const char *dir, hearth_err *err) {
    cJSON *tc, *gc;
    if (read_optional(dir, "tokenizer_config.json", &tc, err)) return -1;
    const char *tmpl = tc ? pick_template(tc) : NULL;
    if (tmpl) gguf_w_str(w, "tokenizer.chat_template", tmpl);
    cJSON_Delete(tc);
    if (read_optional(dir, "generation_config.json", &gc, err)) return -1;
    if (gc) put_generation(w, gc);
    cJSON_Delete(gc);
    return 0;
}
