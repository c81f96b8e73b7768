/* fuzz_request.c — arbitrary bytes as the body of each OpenAI endpoint (chat, completion, embeddings):
 * api_parse with the server's model (data/models/stories260K.gguf, loaded once), its chat template and a
 * real engine (2 slots; nothing is submitted to it); a parsed request's task is released as the server
 * would on a disconnect. */
#include <stdio.h>

#include "generate/chat.h"
#include "fuzz.h"
#include "server/srv_internal.h"

static srv_api api;

static void free_all(void) {
    engine_free(api.eng);
    chat_fmt_free(api.fmt);
    hearth_model_free(api.m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int loaded;
    hearth_err err;
    if (!loaded) {
        server_params sp = {.parallel = 2, .n_ctx = 256, .n_threads = 1};
        if (hearth_model_load("data/models/stories260K.gguf", &api.m, &err) || chat_fmt_new(api.m, NULL, &api.fmt, &err) ||
            engine_new(api.m, &sp, &api.eng, &err)) {
            fprintf(stderr, "fuzz_request: %s (run from tests/)\n", err.msg);
            abort();
        }
        atexit(free_all);
        api.model_id = "fuzz";
        api.n_vocab = 512;
        loaded = 1;
    }
    char *body = fuzz_text(data, size);
    if (!body) return 0;
    for (int k = API_CHAT; k <= API_EMBED; k++) {
        api_req r;
        srv_task *t;
        int status;
        char msg[256];
        if (!api_parse(&api, (api_kind)k, body, size, &r, &t, &status, msg, sizeof msg)) task_release(t);
    }
    free(body);
    return 0;
}
