/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_reader.c: RESP2 replies into redisReply trees in an arena (see
 * resp_reader.h).
 *
 * A reply is parsed whole or not at all: an item cut by the end of the
 * input makes the parse return 0, and the caller tries again from the
 * same start once more bytes came. Replies are small (a batch's is a few
 * kilobytes), so parsing a cut one again costs less than hiredis's
 * resumable task stack did on every item. Before allocating an array the
 * parse checks that the input could hold that many items (3 bytes each at
 * least), so a count announced before its items arrive allocates nothing.
 */
#include <limits.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/resp_reader.h"
#include "lib/util.h"

#define BLOCK_BYTES 16384
/* Redis's own bound on a bulk string (proto-max-bulk-len's default). */
#define MAX_BULK (512LL * 1024 * 1024)

struct resp_block {
    struct resp_block *next;
    size_t used, size;
    alignas(max_align_t) char mem[];
};

static struct resp_block *block_new(size_t size)
{
    struct resp_block *b = xmalloc(sizeof *b + size);
    b->next = NULL;
    b->used = 0;
    b->size = size;
    return b;
}

static void *arena_alloc(struct resp_reader *r, size_t n)
{
    n = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    if (!r->first)
        r->first = block_new(BLOCK_BYTES);
    struct resp_block *b = r->extra ? r->extra : r->first;
    if (b->size - b->used < n) {
        b = block_new(n > BLOCK_BYTES ? n : BLOCK_BYTES);
        b->next = r->extra;
        r->extra = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    return p;
}

void resp_reader_reset(struct resp_reader *r)
{
    while (r->extra) {
        struct resp_block *b = r->extra;
        r->extra = b->next;
        free(b);
    }
    if (r->first)
        r->first->used = 0;
}

void resp_reader_free(struct resp_reader *r)
{
    resp_reader_reset(r);
    free(r->first);
    r->first = NULL;
}

/* What one step of the parse found. */
enum step { STEP_OK, STEP_MORE, STEP_ERROR };

struct parse {
    struct resp_reader *r;
    const char *p, *end;
};

static enum step fail(struct parse *ps, const char *what)
{
    snprintf(ps->r->errstr, sizeof ps->r->errstr, "%s", what);
    return STEP_ERROR;
}

/* The line at ps->p up to "\r\n": its start and length, ps->p past it. */
static enum step line(struct parse *ps, const char **s, size_t *len)
{
    const char *cr = memchr(ps->p, '\r', (size_t)(ps->end - ps->p));
    if (!cr || cr + 1 >= ps->end)
        return STEP_MORE;
    if (cr[1] != '\n')
        return fail(ps, "Protocol error: a line does not end with CRLF");
    *s = ps->p;
    *len = (size_t)(cr - ps->p);
    ps->p = cr + 2;
    return STEP_OK;
}

/* A decimal integer line, as Redis writes them (optional '-', digits):
 * at most 19 digits (10^19 fits in 64 unsigned bits, so the loop needs
 * no overflow test), since most of a reply is integers; a 20th digit is
 * refused below, as the end of the line it is not. */
static enum step integer(struct parse *ps, long long *v)
{
    const char *p = ps->p, *end = ps->end;
    int neg = p < end && *p == '-';
    p += neg;
    const char *digits = p, *stop = end - p > 19 ? p + 19 : end;
    unsigned long long u = 0;
    for (; p < stop && (unsigned)(*p - '0') <= 9; p++)
        u = u * 10 + (unsigned)(*p - '0');
    if (p == end || (*p == '\r' && p + 1 == end))
        return STEP_MORE;
    if (p == digits || *p != '\r' || p[1] != '\n' ||
        u > (neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX))
        return fail(ps, "Bad integer value");
    *v = neg ? (long long)(0ULL - u) : (long long)u;
    ps->p = p + 2;
    return STEP_OK;
}

static redisReply *node(struct parse *ps, int type)
{
    redisReply *n = arena_alloc(ps->r, sizeof *n);
    memset(n, 0, sizeof *n);
    n->type = type;
    return n;
}

/* A NUL-terminated copy of s in the arena, as n's string. */
static void set_str(struct parse *ps, redisReply *n, const char *s, size_t len)
{
    char *copy = arena_alloc(ps->r, len + 1);
    memcpy(copy, s, len);
    copy[len] = '\0';
    n->str = copy;
    n->len = len;
}

static enum step item(struct parse *ps, int depth, redisReply **out)
{
    if (ps->p >= ps->end)
        return STEP_MORE;
    char type = *ps->p++;
    const char *s;
    size_t len;
    long long v = 0;
    enum step st;
    /* The integer, bulk length or count of the three typed by a number;
     * -1 for the last two is a nil (Redis's null bulk and null array). */
    if (type == ':' || type == '$' || type == '*') {
        if ((st = integer(ps, &v)) != STEP_OK)
            return st;
        if (type != ':' && v == -1) {
            *out = node(ps, REDIS_REPLY_NIL);
            return STEP_OK;
        }
    }
    switch (type) {
    case '+':
    case '-':
        if ((st = line(ps, &s, &len)) != STEP_OK)
            return st;
        *out = node(ps, type == '+' ? REDIS_REPLY_STATUS : REDIS_REPLY_ERROR);
        set_str(ps, *out, s, len);
        return STEP_OK;
    case ':':
        *out = node(ps, REDIS_REPLY_INTEGER);
        (*out)->integer = v;
        return STEP_OK;
    case '$':
        if (v < 0 || v > MAX_BULK)
            return fail(ps, "Bulk string length out of range");
        if (ps->end - ps->p < v + 2)
            return STEP_MORE;
        if (ps->p[v] != '\r' || ps->p[v + 1] != '\n')
            return fail(ps, "Protocol error: a bulk string does not end with CRLF");
        *out = node(ps, REDIS_REPLY_STRING);
        set_str(ps, *out, ps->p, (size_t)v);
        ps->p += v + 2;
        return STEP_OK;
    case '*':
        if (v < 0 || v > INT_MAX)
            return fail(ps, "Multi-bulk length out of range");
        if (depth >= RESP_MAX_DEPTH)
            return fail(ps, "No support for nested multi bulk replies this deep");
        /* Each item takes 3 bytes at least ("+\r\n"). */
        if ((ps->end - ps->p) / 3 < v)
            return STEP_MORE;
        *out = node(ps, REDIS_REPLY_ARRAY);
        (*out)->elements = (size_t)v;
        if (v > 0)
            (*out)->element = arena_alloc(ps->r, (size_t)v * sizeof *(*out)->element);
        for (long long i = 0; i < v; i++)
            if ((st = item(ps, depth + 1, &(*out)->element[i])) != STEP_OK)
                return st;
        return STEP_OK;
    default: {
        char msg[64];
        snprintf(msg, sizeof msg, "Protocol error, got \"\\x%02x\" as reply type byte",
                 (unsigned char)type);
        return fail(ps, msg);
    }
    }
}

ssize_t resp_reader_parse(struct resp_reader *r, const char *data, size_t len, redisReply **out)
{
    resp_reader_reset(r);
    struct parse ps = {.r = r, .p = data, .end = data + len};
    redisReply *reply = NULL;
    switch (item(&ps, 0, &reply)) {
    case STEP_OK:
        *out = reply;
        return ps.p - data;
    case STEP_MORE:
        resp_reader_reset(r);
        return 0;
    default:
        resp_reader_reset(r);
        return -1;
    }
}
