/* srv_page.c — the web chat page (chat_page.html) compiled into the library with .incbin, so GET / serves it
 * from the binary with no file beside it. */
#include <stddef.h>

#include "server/srv_internal.h"

__asm__(".section .rodata\n"
        ".hidden ht_chat_page\n"
        ".hidden ht_chat_page_end\n"
        ".global ht_chat_page\n"
        ".global ht_chat_page_end\n"
        "ht_chat_page:\n"
        ".incbin \"" HEARTH_CHAT_PAGE "\"\n"
        "ht_chat_page_end:\n"
        ".previous\n");
extern const char ht_chat_page[], ht_chat_page_end[];

const char *srv_chat_page(size_t *size) {
    *size = (size_t)(ht_chat_page_end - ht_chat_page);
    return ht_chat_page;
}
