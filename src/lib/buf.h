/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf.h: a growable byte buffer, the one the HTTP front reads into, parses
 * into and renders answers into. Grows by doubling and never shrinks on its
 * own, so a connection that keeps its buffers allocates only while warming
 * up. Allocation failure aborts (xrealloc), like every allocation here.
 */
#ifndef RATELIMITD_BUF_H
#define RATELIMITD_BUF_H

#include <stddef.h>
#include <string.h>

struct buf {
    char *data; /* owned; NULL while cap is 0 */
    size_t len;
    size_t cap;
};

/* Makes room for n more bytes and returns where they go (len unchanged). */
char *buf_reserve(struct buf *b, size_t n);

/* Inline, like buf_append_char: most appends are a few bytes of a length
 * known where they are called (JSON keys, header names), which the
 * compiler then copies without calling memcpy (bench/instructions.py). */
static inline void buf_append(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (b->cap - b->len < n)
        buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* A string literal, its length known where it is called. */
#define buf_append_lit(b, lit) buf_append((b), "" lit, sizeof(lit) - 1)

void buf_append_str(struct buf *b, const char *s);

/* Inline: the JSON writer appends most punctuation one byte at a time. */
static inline void buf_append_char(struct buf *b, char c)
{
    if (b->len == b->cap)
        buf_reserve(b, 1);
    b->data[b->len++] = c;
}

/* Appends v in decimal. */
void buf_append_int(struct buf *b, long long v);

/* Removes the first n bytes (n <= len), keeping the rest in order. */
void buf_consume(struct buf *b, size_t n);

/* Frees the memory; the struct is then empty and may be reused. */
void buf_free(struct buf *b);

#endif
