/* fuzz_jinja.c — arbitrary text as a chat template, rendered over a fixed conversation (system, user,
 * assistant, tool messages) with bos/eos and a generation prompt, under the interpreter's step, memory and
 * output limits. The input may also carry a conversation: text after a NUL byte is parsed as the messages
 * JSON array. */
#include <cJSON.h>

#include "fuzz.h"
#include "jinja/jinja.h"

static const char CONV[] = "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi <b>\"},"
                           "{\"role\":\"assistant\",\"content\":\"Hello!\"},{\"role\":\"tool\",\"content\":\"{\\\"x\\\":1}\"}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *txt = fuzz_text(data, size);
    if (!txt) return 0;
    size_t tl = strlen(txt);
    cJSON *msgs = tl < size ? cJSON_ParseWithLength(txt + tl + 1, size - tl - 1) : NULL;
    if (!msgs) msgs = cJSON_Parse(CONV);
    char *out = NULL;
    hearth_err err;
    if (!chat_render(txt, msgs, "<s>", "</s>", true, NULL, &out, &err)) free(out);
    cJSON_Delete(msgs);
    free(txt);
    return 0;
}
