/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json_out.c: the fixed-shape JSON writer (json_out.h).
 */
#include <string.h>

#include "lib/json_out.h"

struct json_out json_out_start(struct buf *b)
{
    return (struct json_out){.b = b};
}

/* The comma before a key or a value, when one is due. */
static void sep(struct json_out *j)
{
    if (j->comma)
        buf_append_char(j->b, ',');
    j->comma = 0;
}

void json_out_begin(struct json_out *j, char open)
{
    sep(j);
    buf_append_char(j->b, open);
}

void json_out_end(struct json_out *j, char close)
{
    buf_append_char(j->b, close);
    j->comma = 1;
}

void json_out_key(struct json_out *j, const char *key)
{
    json_out_cstr(j, key);
    buf_append_char(j->b, ':');
    j->comma = 0;
}

/* The length of the valid UTF-8 sequence at p (n > 0 bytes left), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    size_t want = *p < 0x80             ? 1
                  : (*p & 0xE0) == 0xC0 ? 2
                  : (*p & 0xF0) == 0xE0 ? 3
                  : (*p & 0xF8) == 0xF0 ? 4
                                        : 0;
    if (want == 0 || want > n)
        return 0;
    for (size_t i = 1; i < want; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    /* Overlong forms, surrogates and code points past U+10FFFF are
     * invalid too (jansson refuses them). */
    if ((want == 2 && *p < 0xC2) ||
        (want == 3 && ((*p == 0xE0 && p[1] < 0xA0) || (*p == 0xED && p[1] >= 0xA0))) ||
        (want == 4 && (*p > 0xF4 || (*p == 0xF0 && p[1] < 0x90) || (*p == 0xF4 && p[1] >= 0x90))))
        return 0;
    return want;
}

int json_out_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        size_t n = utf8_seq(p, (size_t)(end - p));
        if (n == 0)
            return 0;
        p += n;
    }
    return 1;
}

void json_out_str(struct json_out *j, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    sep(j);
    buf_append_char(j->b, '"');
    while (p < end) {
        /* Runs of plain ASCII, nearly every name and key, in one copy. */
        const unsigned char *run = p;
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        buf_append(j->b, run, (size_t)(p - run));
        if (p == end)
            break;
        unsigned char c = *p;
        if (c >= 0x80) {
            size_t n = utf8_seq(p, (size_t)(end - p));
            if (n == 0) {
                buf_append_char(j->b, '?');
                p++;
            } else {
                buf_append(j->b, p, n);
                p += n;
            }
            continue;
        }
        p++;
        char esc[6] = {'\\', 0};
        size_t n = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
        }
        buf_append(j->b, esc, n);
    }
    buf_append_char(j->b, '"');
    j->comma = 1;
}

void json_out_cstr(struct json_out *j, const char *s)
{
    json_out_str(j, s, strlen(s));
}

void json_out_int(struct json_out *j, int64_t v)
{
    sep(j);
    buf_append_int(j->b, (long long)v);
    j->comma = 1;
}

void json_out_thousandths(struct json_out *j, int64_t v)
{
    sep(j);
    if (v < 0) {
        buf_append_char(j->b, '-');
        v = -v;
    }
    buf_append_int(j->b, (long long)(v / 1000));
    char frac[5] = {'.', (char)('0' + v / 100 % 10), (char)('0' + v / 10 % 10),
                    (char)('0' + v % 10), 0};
    buf_append(j->b, frac, 4);
    j->comma = 1;
}

void json_out_bool(struct json_out *j, int v)
{
    sep(j);
    if (v)
        buf_append_lit(j->b, "true");
    else
        buf_append_lit(j->b, "false");
    j->comma = 1;
}

void json_out_null(struct json_out *j)
{
    sep(j);
    buf_append_str(j->b, "null");
    j->comma = 1;
}
