/* fuzz.h — what the libFuzzer targets share. Every target gets the input as an exact-size heap copy (never
 * the fuzzer's own buffer, and never a file mapping): a read one byte past the end of a "file" is then a
 * heap overflow AddressSanitizer reports, where a real mmap would hide it in the last page. */
#ifndef HEARTH_FUZZ_H
#define HEARTH_FUZZ_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint8_t *fuzz_copy(const uint8_t *data, size_t size) {
    uint8_t *p = malloc(size ? size : 1);
    if (p && size) memcpy(p, data, size);
    return p;
}

/* The same, NUL-terminated (for text parsers); the NUL is not part of the size. */
static inline char *fuzz_text(const uint8_t *data, size_t size) {
    char *p = malloc(size + 1);
    if (p) { memcpy(p, data, size); p[size] = 0; }
    return p;
}
#endif
