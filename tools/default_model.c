/* default_model.c — the default model (models/stories260K.gguf, 1.1 MB) compiled into the binary with
 * .incbin, so an installed hearth runs from any directory with no file beside it. 64-byte aligned: GGUF
 * tensor data is used in place. */
#include <stddef.h>

#include "cli.h"

__asm__(".section .rodata\n"
        ".balign 64\n"
        ".hidden ht_default_model\n"
        ".hidden ht_default_model_end\n"
        ".global ht_default_model\n"
        ".global ht_default_model_end\n"
        "ht_default_model:\n"
        ".incbin \"" HEARTH_DEFAULT_MODEL "\"\n"
        "ht_default_model_end:\n"
        ".previous\n");
extern const unsigned char ht_default_model[], ht_default_model_end[];

const void *cli_default_model_data(size_t *size) {
    *size = (size_t)(ht_default_model_end - ht_default_model);
    return ht_default_model;
}
