/*
 * json_out.c: the fixed-shape JSON writer (json_out.h).
 */
#include <string.h>

#include "json_out.h"

/* A comma if the buffer ends with a complete value (and so this is the next
 * member or element); not after '{', '[', ':' or anything before the JSON
 * (an HTTP head ends with '\n'). */
static void sep(struct buf *b)
{
    if (b->len == 0)
        return;
    char last = b->data[b->len - 1];
    if (last == '"' || last == '}' || last == ']' || last == 'e' || last == 'l' ||
        (last >= '0' && last <= '9'))
        buf_append_char(b, ',');
}

void json_out_begin(struct buf *b, char open)
{
    sep(b);
    buf_append_char(b, open);
}

void json_out_end(struct buf *b, char close)
{
    buf_append_char(b, close);
}

void json_out_key(struct buf *b, const char *key)
{
    json_out_cstr(b, key);
    buf_append_char(b, ':');
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

void json_out_str(struct buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    sep(b);
    buf_append_char(b, '"');
    while (p < end) {
        unsigned char c = *p;
        if (c >= 0x80) {
            size_t n = utf8_seq(p, (size_t)(end - p));
            if (n == 0) {
                buf_append_char(b, '?');
                p++;
            } else {
                buf_append(b, p, n);
                p += n;
            }
            continue;
        }
        p++;
        if (c >= 0x20 && c != '"' && c != '\\') {
            buf_append_char(b, (char)c);
            continue;
        }
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
        buf_append(b, esc, n);
    }
    buf_append_char(b, '"');
}

void json_out_cstr(struct buf *b, const char *s)
{
    json_out_str(b, s, strlen(s));
}

void json_out_int(struct buf *b, int64_t v)
{
    sep(b);
    buf_append_int(b, (long long)v);
}

void json_out_bool(struct buf *b, int v)
{
    sep(b);
    buf_append_str(b, v ? "true" : "false");
}

void json_out_null(struct buf *b)
{
    sep(b);
    buf_append_str(b, "null");
}
