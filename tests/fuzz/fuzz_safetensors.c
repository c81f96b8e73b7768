/* fuzz_safetensors.c — the safetensors reader on arbitrary bytes (header JSON, dtypes, shapes, offsets),
 * then every tensor it accepts is read back as floats. */
#include "fuzz.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fuzz_copy(data, size);
    st_set *s;
    hearth_err err;
    if (buf && !st_open_memory(buf, size, "fuzz", &s, &err)) {
        for (uint64_t i = 0; i < s->n_tensors; i++) {
            const st_tensor *t = &s->tensors[i];
            float f[64];
            uint64_t n = 1;
            for (int d = 0; d < t->n_dims; d++) n *= (uint64_t)t->ne[d];
            if (t->type != ST_UNSUPPORTED && n) {
                st_read_f32(t, 0, n < 64 ? n : 64, f, &err);
                if (n > 64) st_read_f32(t, n - 1, 1, f, &err);
            }
            st_find(s, t->name);
        }
        st_close(s);
    }
    free(buf);
    return 0;
}
