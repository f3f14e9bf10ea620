/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_json_out.c: the fixed-shape JSON writer against jansson's parser and
 * printer: whatever the bytes, the output parses, valid UTF-8 round-trips
 * exactly, and the text is what json_dumps(JSON_COMPACT) writes.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "lib/json_out.h"
#include "tap.h"

static char *text(struct buf *b)
{
    buf_append_char(b, '\0');
    return b->data;
}

/* What jansson writes for the string s (valid UTF-8). */
static char *jansson_str(const char *s, size_t len)
{
    json_t *a = json_pack("[s%]", s, len);
    if (!a)
        return NULL;
    char *out = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return out;
}

static void test_shape(void)
{
    struct buf b = {0};
    struct json_out j = json_out_start(&b);
    json_out_begin(&j, '{');
    json_out_key(&j, "allowed");
    json_out_bool(&j, 1);
    json_out_key(&j, "n");
    json_out_int(&j, -9223372036854775807LL - 1);
    json_out_lkey(&j, "none");
    json_out_null(&j);
    json_out_key(&j, "list");
    json_out_begin(&j, '[');
    json_out_begin(&j, '{');
    json_out_key(&j, "a");
    json_out_bool(&j, 0);
    json_out_end(&j, '}');
    json_out_begin(&j, '{');
    json_out_end(&j, '}');
    json_out_int(&j, 7);
    json_out_cstr(&j, "s");
    json_out_begin(&j, '[');
    json_out_end(&j, ']');
    json_out_end(&j, ']');
    json_out_lkey(&j, "k"); /* after a value: a comma first */
    json_out_int(&j, 7);
    json_out_end(&j, '}');
    is_str(text(&b),
           "{\"allowed\":true,\"n\":-9223372036854775808,\"none\":null,"
           "\"list\":[{\"a\":false},{},7,\"s\",[]],\"k\":7}",
           "objects, arrays, separators, every kind of value, keys literal or not");
    buf_free(&b);

    /* After an HTTP head (ends with '\n') no separator is written. */
    buf_append_str(&b, "HTTP/1.1 200 OK\r\n\r\n1");
    j = json_out_start(&b);
    json_out_begin(&j, '{');
    json_out_end(&j, '}');
    is_str(text(&b), "HTTP/1.1 200 OK\r\n\r\n1{}", "no comma after what the buffer held before");
    buf_free(&b);
}

static void test_escapes(void)
{
    static const char all[] = "\"\\/\b\f\n\r\t\x01\x1f\x7f a\0z";
    struct buf b = {0};
    struct json_out j = json_out_start(&b);
    json_out_begin(&j, '[');
    json_out_str(&j, all, sizeof all - 1);
    json_out_end(&j, ']');
    char *want = jansson_str(all, sizeof all - 1);
    is_str(text(&b), want, "escapes as jansson writes them");
    free(want);
    buf_free(&b);
}

/* Checks one string: the output parses as a one-string array; if the input
 * is valid UTF-8, it round-trips and matches jansson's text; if not, the
 * invalid bytes became '?'. */
static int check_string(const unsigned char *s, size_t len)
{
    struct buf b = {0};
    struct json_out j = json_out_start(&b);
    json_out_begin(&j, '[');
    json_out_str(&j, (const char *)s, len);
    json_out_end(&j, ']');
    json_error_t e;
    json_t *v = json_loadb(b.data, b.len, JSON_ALLOW_NUL, &e);
    int good =
        v && json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0));
    json_t *valid = json_stringn((const char *)s, len); /* NULL: not valid UTF-8 */
    if (good && valid) {
        json_t *got = json_array_get(v, 0);
        good = json_string_length(got) == len && memcmp(json_string_value(got), s, len) == 0;
        char *want = jansson_str((const char *)s, len);
        good = good && want && strlen(want) == b.len && memcmp(want, b.data, b.len) == 0;
        free(want);
    } else if (good) {
        /* Invalid input: same length at most, every non-ASCII byte either
         * kept in a valid sequence or replaced. */
        good = json_string_length(json_array_get(v, 0)) <= len;
    }
    json_decref(valid);
    json_decref(v);
    buf_free(&b);
    return good;
}

static void test_hostile(void)
{
    static const char *const cases[] = {
        "\xff\xfe",
        "\xc0\xaf",
        "\xe0\x80\xaf",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "\xf5\x80\x80\x80",
        "\xc3",
        "\xe2\x82",
        "\xf0\x9f\x98",
        "a\xc3(b",
        "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
        "\xef\xbf\xbf",
        "\xf4\x8f\xbf\xbf",
        "\xc2\x80",
        "\xed\x9f\xbf",
        "\xee\x80\x80",
    };
    int all = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!check_string((const unsigned char *)cases[i], strlen(cases[i]))) {
            printf("# case %zu fails\n", i);
            all = 0;
        }
    ok(all, "edge cases of UTF-8 (overlong, surrogates, past U+10FFFF, cut sequences)");

    struct buf b = {0};
    struct json_out j = json_out_start(&b);
    json_out_cstr(&j, "a\xff\xc3\xa9\xed\xa0\x80z");
    is_str(text(&b), "\"a?\xc3\xa9???z\"", "each invalid byte becomes '?', valid ones stay");
    buf_free(&b);

    /* Random strings, biased towards the bytes that matter. */
    static const unsigned char alphabet[] = {0,    1,    0x1f, ' ',  '"',  '\\', 'a',
                                             0x7f, 0x80, 0xbf, 0xc2, 0xc3, 0xe0, 0xed,
                                             0xef, 0xf0, 0xf4, 0xf5, 0xff};
    srand(12345);
    int random_ok = 1;
    unsigned char s[64];
    for (int n = 0; n < 20000 && random_ok; n++) {
        size_t len = (size_t)(rand() % (int)sizeof s);
        for (size_t i = 0; i < len; i++)
            s[i] = rand() % 4 ? alphabet[rand() % (int)sizeof alphabet] : (unsigned char)rand();
        if (!check_string(s, len)) {
            printf("# random string %d fails\n", n);
            random_ok = 0;
        }
    }
    ok(random_ok, "20000 random strings: always valid JSON, valid UTF-8 round-trips exactly");
}

int main(void)
{
    test_shape();
    test_escapes();
    test_hostile();
    return tap_done();
}
