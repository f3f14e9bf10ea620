/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request_error.c: request_fail (request_error.h). Owns nothing else.
 */
#include <stdarg.h>
#include <stdio.h>

#include "core/request_error.h"

int request_fail(struct request_error *err, const char *code, const char *fmt, ...)
{
    va_list ap;
    err->status = 400;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}
