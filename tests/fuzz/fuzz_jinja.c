/* fuzz_jinja.c — arbitrary text as a chat template, rendered over a fixed conversation (system, user,
 * assistant, tool messages) with bos/eos and a generation prompt. The interpreter's step, memory and output
 * limits are lowered (1M steps, 64 MiB, 16 MiB, far above any real template's needs): a looping input reaches
 * them in milliseconds instead of the seconds the defaults take under ASan, which made fuzzing 12x slower. The
 * limits themselves are tested at their defaults (test_chat_templates). The input may also carry a
 * conversation: text after a NUL byte is parsed as the messages JSON array. */
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
    const jinja_limits lim = { .max_steps = 1000000, .max_memory = (size_t)64 << 20, .max_output = (size_t)16 << 20 };
    if (!chat_render_ex(txt, msgs, "<s>", "</s>", true, NULL, &lim, &out, &err)) free(out);
    cJSON_Delete(msgs);
    free(txt);
    return 0;
}
