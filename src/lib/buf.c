/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf.c: the growable byte buffer (buf.h).
 */
#include <stdlib.h>
#include <string.h>

#include "lib/buf.h"
#include "lib/util.h"

char *buf_reserve(struct buf *b, size_t n)
{
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
            cap *= 2;
        b->data = xrealloc(b->data, cap);
        b->cap = cap;
    }
    return b->data + b->len;
}

void buf_append_str(struct buf *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

void buf_append_int(struct buf *b, long long v)
{
    b->len += util_format_int(buf_reserve(b, UTIL_INT_CHARS), v);
}

void buf_consume(struct buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void buf_free(struct buf *b)
{
    free(b->data);
    *b = (struct buf){0};
}
