/* common.c — the error-value helper. */
#include "common.h"

#include <stdio.h>

int herr(hearth_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        for (char *p = err->msg; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return -1;
}
