/* fuzz.h — what the libFuzzer targets share. Every target gets the input as an exact-size heap copy (never
 * the fuzzer's own buffer, and never a file mapping): a read one byte past the end of a "file" is then a
 * heap overflow AddressSanitizer reports, where a real mmap would hide it in the last page. */
#ifndef HEARTH_FUZZ_H
#define HEARTH_FUZZ_H
#include <sanitizer/asan_interface.h>
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
/* The same exact-size view for large inputs (whole model files), in one buffer kept from run to run. A fresh
 * heap copy of a megabyte costs a page fault per 4 KiB (ASan maps large blocks anew and unmaps them when
 * freed): half of fuzz_model's time. Here the bytes past the input are poisoned, and between runs the whole
 * buffer (fuzz_release), so a read past the end, or of the input after its run, is still reported. */
static uint8_t *fuzz_held;
static size_t fuzz_held_cap;

static inline uint8_t *fuzz_hold(const uint8_t *data, size_t size) {
    if (!fuzz_held || size > fuzz_held_cap) {
        const size_t cap = size > 2 * fuzz_held_cap ? size : 2 * fuzz_held_cap;
        ASAN_UNPOISON_MEMORY_REGION(fuzz_held, fuzz_held_cap);
        free(fuzz_held);
        fuzz_held = malloc(cap ? cap : 1);
        fuzz_held_cap = fuzz_held ? cap : 0;
        if (!fuzz_held) return NULL;
    }
    ASAN_POISON_MEMORY_REGION(fuzz_held, fuzz_held_cap);
    ASAN_UNPOISON_MEMORY_REGION(fuzz_held, size);
    if (size) memcpy(fuzz_held, data, size);
    return fuzz_held;
}

static inline void fuzz_release(void) { ASAN_POISON_MEMORY_REGION(fuzz_held, fuzz_held_cap); }
#endif
