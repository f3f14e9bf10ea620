/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_resp_reader.c: resp_reader against hiredis's own reader on the same
 * bytes: every kind of reply (a batch's array of arrays of integers
 * included), each whole, cut at every byte (0, "more", until whole), and
 * followed by the next reply (only its own bytes taken); protocol errors
 * (bad type byte, bad integers, a bulk string without its CRLF, nesting too
 * deep, lengths out of range); a count announced before its items
 * allocating nothing; a reply larger than the arena's first block; and
 * 2000 random trees, written as RESP, read back equal.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/resp_reader.h"
#include "lib/buf.h"
#include "tap.h"

/* The same tree: types, integers, strings (bytes and length), elements. */
static int same(const redisReply *a, const redisReply *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case REDIS_REPLY_INTEGER:
        return a->integer == b->integer;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        return a->len == b->len && memcmp(a->str, b->str, a->len) == 0 && a->str[a->len] == '\0' &&
               b->str[b->len] == '\0';
    case REDIS_REPLY_ARRAY:
        if (a->elements != b->elements)
            return 0;
        for (size_t i = 0; i < a->elements; i++)
            if (!same(a->element[i], b->element[i]))
                return 0;
        return 1;
    default:
        return 1;
    }
}

/* hiredis's reading of the whole of s (NULL if it finds no reply). */
static redisReply *hiredis_read(const char *s, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;
    redisReaderFeed(rd, s, len);
    if (redisReaderGetReply(rd, &reply) != REDIS_OK)
        reply = NULL;
    redisReaderFree(rd);
    return reply;
}

/* s read whole, cut at every byte, and followed by another reply: the
 * same tree as hiredis's every time. */
static void check_reply(const char *what, const char *s, size_t len)
{
    struct resp_reader r = {0};
    redisReply *want = hiredis_read(s, len), *got = NULL;
    ok(want != NULL, "%s: hiredis reads it", what);
    if (!want)
        return;
    int cuts_ok = 1;
    for (size_t cut = 0; cut < len; cut++)
        if (resp_reader_parse(&r, s, cut, &got) != 0)
            cuts_ok = 0;
    ok(cuts_ok, "%s: every cut asks for more", what);
    ssize_t n = resp_reader_parse(&r, s, len, &got);
    ok(n == (ssize_t)len && same(got, want), "%s: whole, the same tree", what);
    char *two = malloc(len + 4);
    memcpy(two, s, len);
    memcpy(two + len, ":7\r\n", 4);
    n = resp_reader_parse(&r, two, len + 4, &got);
    ok(n == (ssize_t)len && same(got, want), "%s: followed by another, only its bytes", what);
    n = resp_reader_parse(&r, two + len, 4, &got);
    ok(n == 4 && got->type == REDIS_REPLY_INTEGER && got->integer == 7, "%s: then the next one",
       what);
    free(two);
    freeReplyObject(want);
    resp_reader_free(&r);
}

static void check_error(const char *what, const char *s)
{
    struct resp_reader r = {0};
    redisReply *got = NULL;
    ssize_t n = resp_reader_parse(&r, s, strlen(s), &got);
    ok(n == -1 && r.errstr[0], "%s: a protocol error (%s)", what, r.errstr);
    resp_reader_free(&r);
}

static void test_kinds(void)
{
    static const struct {
        const char *what, *s;
    } cases[] = {
        {"integer", ":42\r\n"},
        {"negative integer", ":-1\r\n"},
        {"zero", ":0\r\n"},
        {"largest integer", ":9223372036854775807\r\n"},
        {"smallest integer", ":-9223372036854775808\r\n"},
        {"status", "+OK\r\n"},
        {"empty status", "+\r\n"},
        {"error", "-NOSCRIPT No matching script\r\n"},
        {"bulk", "$5\r\nhello\r\n"},
        {"empty bulk", "$0\r\n\r\n"},
        {"nil bulk", "$-1\r\n"},
        {"nil array", "*-1\r\n"},
        {"empty array", "*0\r\n"},
        {"a check's reply", "*9\r\n:1700000000000000\r\n:1\r\n:1\r\n:100\r\n:99\r\n"
                            ":59000000\r\n:-1\r\n:0\r\n:0\r\n"},
        {"a batch's reply",
         "*3\r\n*3\r\n:1\r\n:2\r\n:3\r\n-ERR one failed\r\n*2\r\n:4\r\n$1\r\nx\r\n"},
        {"CLUSTER SLOTS", "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$"
                          "40\r\n0123456789012345678901234567890123456789\r\n"},
        {"pub/sub message", "*3\r\n$7\r\nmessage\r\n$5\r\nreset\r\n$3\r\nabc\r\n"},
        {"nested to the limit", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_reply(cases[i].what, cases[i].s, strlen(cases[i].s));
    }
    static const char with_nul[] = "$6\r\na\r\n\0bc\r\n";
    check_reply("bulk holding CRLF and NUL", with_nul, sizeof with_nul - 1);
}

static void test_errors(void)
{
    check_error("unknown type byte", "?1\r\n");
    check_error("integer with a letter", ":12a\r\n");
    check_error("integer with a plus", ":+1\r\n");
    check_error("empty integer", ":\r\n");
    check_error("lone minus", ":-\r\n");
    check_error("integer past 64 bits", ":9223372036854775808\r\n");
    check_error("integer below 64 bits", ":-9223372036854775809\r\n");
    check_error("CR without LF", ":1\rx\n");
    check_error("bulk without its CRLF", "$3\r\nabcde\r\n");
    check_error("negative bulk length", "$-2\r\n");
    check_error("bulk length past 512 MB", "$536870913\r\n");
    check_error("negative array length", "*-2\r\n");
    check_error("nesting too deep", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n");
    check_error("an error inside an array", "*2\r\n:1\r\n!\r\n");
}

static void test_sizes(void)
{
    struct resp_reader r = {0};
    redisReply *got = NULL;
    /* A count far larger than the bytes: more, and no block allocated. */
    ok(resp_reader_parse(&r, "*2000000000\r\n:1\r\n", 17, &got) == 0 && r.first == NULL &&
           r.extra == NULL,
       "a count before its items: more, nothing allocated");
    /* A reply larger than the first block: overflow blocks, then freed. */
    struct buf b = {0};
    buf_append_str(&b, "*3\r\n$40000\r\n");
    for (int i = 0; i < 40000; i++)
        buf_append_char(&b, (char)('a' + i % 26));
    buf_append_str(&b, "\r\n:5\r\n$1\r\nz\r\n");
    ssize_t n = resp_reader_parse(&r, b.data, b.len, &got);
    ok(n == (ssize_t)b.len && got->elements == 3 && got->element[0]->len == 40000 &&
           got->element[0]->str[39999] == 'a' + 39999 % 26 && got->element[1]->integer == 5 &&
           strcmp(got->element[2]->str, "z") == 0,
       "a 40 kB bulk inside an array");
    ok(r.extra != NULL, "it took an overflow block");
    resp_reader_reset(&r);
    ok(r.extra == NULL && r.first != NULL, "reset frees the overflow, keeps the first block");
    buf_free(&b);
    resp_reader_free(&r);
}

/* ---- random trees ---- */

static unsigned long long rng = 0x2545F4914F6CDD1DULL;
static unsigned long long rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void write_tree(struct buf *b, int depth)
{
    unsigned k = (unsigned)(rnd() % (depth < 4 ? 7 : 6));
    char tmp[64];
    switch (k) {
    case 0:
        snprintf(tmp, sizeof tmp, ":%lld\r\n", (long long)rnd());
        buf_append_str(b, tmp);
        break;
    case 1:
        buf_append_str(b, rnd() % 2 ? "+OK\r\n" : "-ERR x\r\n");
        break;
    case 2:
    case 3: {
        size_t n = rnd() % 40;
        snprintf(tmp, sizeof tmp, "$%zu\r\n", n);
        buf_append_str(b, tmp);
        for (size_t i = 0; i < n; i++)
            buf_append_char(b, (char)(rnd() & 0xff));
        buf_append_str(b, "\r\n");
        break;
    }
    case 4:
        buf_append_str(b, rnd() % 2 ? "$-1\r\n" : "*-1\r\n");
        break;
    case 5:
        snprintf(tmp, sizeof tmp, ":%d\r\n", (int)(rnd() % 2000) - 1000);
        buf_append_str(b, tmp);
        break;
    default: {
        size_t n = rnd() % 6;
        snprintf(tmp, sizeof tmp, "*%zu\r\n", n);
        buf_append_str(b, tmp);
        for (size_t i = 0; i < n; i++)
            write_tree(b, depth + 1);
    }
    }
}

static void test_random(void)
{
    struct resp_reader r = {0};
    struct buf b = {0};
    int all = 1;
    for (int i = 0; i < 2000 && all; i++) {
        b.len = 0;
        write_tree(&b, 0);
        redisReply *want = hiredis_read(b.data, b.len), *got = NULL;
        size_t cut = (size_t)(rnd() % b.len);
        all = want && resp_reader_parse(&r, b.data, cut, &got) == 0 &&
              resp_reader_parse(&r, b.data, b.len, &got) == (ssize_t)b.len && same(got, want);
        if (!all)
            printf("# random tree %d differs\n", i);
        if (want)
            freeReplyObject(want);
    }
    ok(all, "2000 random trees read as hiredis reads them, and cut: more");
    buf_free(&b);
    resp_reader_free(&r);
}

int main(void)
{
    test_kinds();
    test_errors();
    test_sizes();
    test_random();
    return tap_done();
}
