/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_http_parse.c: the incremental HTTP/1.1 parser. Every stream is fed
 * whole, split at every byte boundary and one byte at a time, and must give
 * the same requests (and the same error) every way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/http/http_parse.h"
#include "lib/buf.h"
#include "tap.h"

static const struct http_limits limits = {.max_head = HTTP_HEAD_MAX, .max_body = 64};

/* What a connection would see: one line per event. */
struct run {
    struct buf log;
    struct http_parse p;
    struct buf pending;
    int dead;
};

static void run_init(struct run *r)
{
    memset(r, 0, sizeof *r);
    http_parse_init(&r->p);
}

static void run_free(struct run *r)
{
    buf_free(&r->log);
    buf_free(&r->pending);
    http_parse_free(&r->p);
}

static void record_request(struct run *r)
{
    const struct http_request *q = http_parse_request(&r->p);
    char line[512];
    const char *te = http_parse_header(&r->p, "transfer-encoding");
    snprintf(line, sizeof line,
             "%s %s %s HTTP/%u.%u ka=%d head=%d te=%s body[%zu]=", q->method_name, q->path, q->url,
             q->http_major, q->http_minor, q->keep_alive, q->head, te ? te : "-", q->body_len);
    buf_append_str(&r->log, line);
    buf_append(&r->log, q->body, q->body_len);
    buf_append_str(&r->log, q->body[q->body_len] == '\0' ? "|\n" : "|unterminated\n");
}

/* Feeds one chunk the way http.c does: keep what is not used. */
static void run_feed(struct run *r, const char *data, size_t len, const struct http_limits *lim)
{
    if (r->dead)
        return;
    buf_append(&r->pending, data, len);
    for (;;) {
        size_t used;
        enum http_parse_status st =
            http_parse_feed(&r->p, lim, r->pending.data, r->pending.len, &used);
        buf_consume(&r->pending, used);
        if (st == HTTP_PARSE_MORE) {
            if (r->pending.len != 0)
                buf_append_str(&r->log, "MORE left bytes\n");
            return;
        }
        if (st == HTTP_PARSE_CONTINUE) {
            buf_append_str(&r->log, "100-continue\n");
            continue;
        }
        if (st == HTTP_PARSE_ERROR) {
            const char *msg;
            char line[256];
            enum request_code code = http_parse_error(&r->p, &msg);
            snprintf(line, sizeof line, "ERROR %d %s\n", request_code_status(code),
                     request_code_name(code));
            buf_append_str(&r->log, line);
            r->dead = 1;
            return;
        }
        record_request(r);
    }
}

static char *log_of(struct run *r)
{
    buf_append_char(&r->log, '\0');
    char *s = strdup(r->log.data);
    return s;
}

/* The log of stream fed as chunks cut at cuts[0..ncuts). */
static char *feed_cut(const char *s, size_t len, const size_t *cuts, size_t ncuts,
                      const struct http_limits *lim)
{
    struct run r;
    run_init(&r);
    size_t at = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        run_feed(&r, s + at, end - at, lim);
        at = end;
    }
    char *out = log_of(&r);
    run_free(&r);
    return out;
}

/* Checks that stream gives want fed whole, split at every boundary and
 * byte by byte. */
static void check_stream(const char *name, const char *s, size_t len, const char *want,
                         const struct http_limits *lim)
{
    char *whole = feed_cut(s, len, NULL, 0, lim);
    if (!ok(strcmp(whole, want) == 0, "%s: whole", name))
        printf("# got:\n%s# want:\n%s", whole, want);
    free(whole);
    int same = 1;
    for (size_t i = 1; i < len && same; i++) {
        char *got = feed_cut(s, len, &i, 1, lim);
        if (strcmp(got, want) != 0) {
            printf("# split at %zu:\n%s", i, got);
            same = 0;
        }
        free(got);
    }
    ok(same, "%s: split in two at every byte boundary", name);
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i + 1 < len; i++)
        cuts[i] = i + 1;
    char *bytes = feed_cut(s, len, cuts, len ? len - 1 : 0, lim);
    if (!ok(strcmp(bytes, want) == 0, "%s: one byte at a time", name))
        printf("# got:\n%s", bytes);
    free(bytes);
    free(cuts);
}

#define CHECK(name, stream, want) check_stream(name, stream, sizeof stream - 1, want, &limits)

static void test_simple(void)
{
    CHECK("GET", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
          "GET /healthz /healthz HTTP/1.1 ka=1 head=0 te=- body[0]=|\n");
    CHECK("POST with Content-Length", "POST /check?x=1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
          "POST /check /check?x=1 HTTP/1.1 ka=1 head=0 te=- body[5]=hello|\n");
    CHECK("HTTP/1.0 closes", "POST /check HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
          "POST /check /check HTTP/1.0 ka=0 head=0 te=- body[2]={}|\n");
    CHECK("HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
          "GET / / HTTP/1.0 ka=1 head=0 te=- body[0]=|\n");
    CHECK("Connection: close", "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
          "GET / / HTTP/1.1 ka=0 head=0 te=- body[0]=|\n");
    CHECK("HEAD", "HEAD /readyz HTTP/1.1\r\n\r\n",
          "HEAD /readyz /readyz HTTP/1.1 ka=1 head=1 te=- body[0]=|\n");
    CHECK("absolute form", "GET http://example.com/metrics?a HTTP/1.1\r\n\r\n",
          "GET /metrics http://example.com/metrics?a HTTP/1.1 ka=1 head=0 te=- body[0]=|\n");
    CHECK("absolute form without a path (found by fuzz_http)",
          "HEAD https://readyz HTTP/1.1\r\n\r\n",
          "HEAD / https://readyz HTTP/1.1 ka=1 head=1 te=- body[0]=|\n");
}

static void test_pipelining(void)
{
    CHECK("three pipelined requests",
          "POST /check HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
          "GET /healthz HTTP/1.1\r\n\r\n"
          "POST /check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n",
          "POST /check /check HTTP/1.1 ka=1 head=0 te=- body[3]=abc|\n"
          "GET /healthz /healthz HTTP/1.1 ka=1 head=0 te=- body[0]=|\n"
          "POST /check /check HTTP/1.1 ka=1 head=0 te=chunked body[2]=xy|\n");
}

static void test_chunked(void)
{
    CHECK("chunked with extensions and trailers",
          "POST /check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
          "3;ext=1\r\n{\"a\r\na\r\n\":1234567}\r\n0\r\nX-Trailer: t\r\n\r\n",
          "POST /check /check HTTP/1.1 ka=1 head=0 te=chunked body[13]={\"a\":1234567}|\n");
    CHECK("bad chunk size", "POST /check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
          "ERROR 400 bad_request\n");
    CHECK("chunked body over max_body",
          "POST /check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
          "20\r\n0123456789abcdef0123456789abcdef\r\n"
          "20\r\n0123456789abcdef0123456789abcdef\r\n"
          "1\r\nX\r\n0\r\n\r\n",
          "ERROR 413 body_too_large\n");
    CHECK("other transfer codings", "POST /check HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
          "ERROR 400 bad_request\n");
}

static void test_continue(void)
{
    CHECK("Expect: 100-continue",
          "POST /check HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n{}"
          "GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
          "100-continue\nPOST /check /check HTTP/1.1 ka=1 head=0 te=- body[2]={}|\n"
          "GET / / HTTP/1.1 ka=1 head=0 te=- body[0]=|\n");
    CHECK("Expect: 100-continue over max_body: 413 instead",
          "POST /check HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 65\r\n\r\n",
          "ERROR 413 body_too_large\n");
    CHECK("Expect: 100-continue from HTTP/1.0 is ignored",
          "POST /check HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
          "POST /check /check HTTP/1.0 ka=0 head=0 te=- body[1]=x|\n");
}

static void test_errors(void)
{
    CHECK("Content-Length and chunked: smuggling",
          "POST /check HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
          "0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
          "ERROR 400 bad_request\n");
    CHECK("Transfer-Encoding then Content-Length",
          "POST /check HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-length: 3\r\n\r\nabc",
          "ERROR 400 bad_request\n");
    CHECK("two different Content-Lengths",
          "POST /check HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
          "ERROR 400 bad_request\n");
    CHECK("Content-Length over max_body: 413 before the body",
          "POST /check HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n",
          "ERROR 413 body_too_large\n");
    CHECK("garbage", "\x01\x02 nonsense\r\n\r\n", "ERROR 400 bad_request\n");
    /* RFC 9110 §15.6.2: an unknown method is 501, garbage stays 400. */
    CHECK("an unknown method", "BREW /check HTTP/1.1\r\n\r\n", "ERROR 501 not_implemented\n");
    CHECK("a known method's prefix, then more", "GETX / HTTP/1.1\r\n\r\n",
          "ERROR 501 not_implemented\n");
    CHECK("a lowercase method", "get / HTTP/1.1\r\n\r\n", "ERROR 501 not_implemented\n");
    CHECK("a method with a control byte", "GE\x01 / HTTP/1.1\r\n\r\n", "ERROR 400 bad_request\n");
    CHECK("HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", "ERROR 505 http_version_not_supported\n");
    CHECK("error after a good request",
          "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/9.9\r\n\r\nGET /c HTTP/1.1\r\n\r\n",
          "GET /a /a HTTP/1.1 ka=1 head=0 te=- body[0]=|\nERROR 505 http_version_not_supported\n");

    /* A head one byte over the limit, and one exactly at it. */
    static char big[HTTP_HEAD_MAX + 64];
    const char *start = "GET / HTTP/1.1\r\nX-Big: ";
    size_t n = strlen(start);
    size_t fill = HTTP_HEAD_MAX - n - 4; /* "\r\n\r\n" */
    memcpy(big, start, n);
    memset(big + n, 'x', fill);
    memcpy(big + n + fill, "\r\n\r\n", 4);
    char *at_limit = feed_cut(big, HTTP_HEAD_MAX, NULL, 0, &limits);
    ok(strncmp(at_limit, "GET / / HTTP/1.1", 16) == 0, "a head of exactly max_head is accepted");
    free(at_limit);
    memset(big + n, 'x', fill + 1);
    memcpy(big + n + fill + 1, "\r\n\r\n", 4);
    check_stream("a head one byte over max_head: 431", big, HTTP_HEAD_MAX + 1,
                 "ERROR 431 headers_too_large\n", &limits);
    /* A head that never ends is refused as soon as it is too large. */
    char *endless = feed_cut(big, HTTP_HEAD_MAX - 10, NULL, 0, &limits);
    is_str(endless, "", "a head still within max_head waits for more");
    free(endless);

    /* Found by fuzz_http: a head over the limit with a bad version is 431
     * however it is split (not 505 when the whole head comes at once). */
    static const struct http_limits small = {.max_head = 64, .max_body = 64};
    static const char bad_version[] = "GET /metrics HTTP/2.1\r\nX-Long: "
                                      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    check_stream("a head over max_head with a bad version: 431", bad_version,
                 sizeof bad_version - 1, "ERROR 431 headers_too_large\n", &small);

    /* Found by fuzz_http: the head of a pipelined request counts too, when
     * it comes in the same read as the request before it. */
    static const char second[] =
        "GET /a HTTP/1.1\r\n\r\n"
        "GET /b HTTP/1.1\r\nX-Long: "
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n\x01\r\n\r\n";
    check_stream(
        "a pipelined head over max_head: 431 however it is split", second, sizeof second - 1,
        "GET /a /a HTTP/1.1 ka=1 head=0 te=- body[0]=|\nERROR 431 headers_too_large\n", &small);

    /* Found by fuzz_http: a bad byte in the name of the header past the
     * last one allowed is 400 however the bytes are split. */
    char bad_name[4096] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < HTTP_MAX_HEADERS; i++)
        snprintf(bad_name + strlen(bad_name), sizeof bad_name - strlen(bad_name), "H%d: v\r\n", i);
    strcat(bad_name, "Ab\x01"
                     "cd: v\r\n\r\n");
    check_stream("a bad header name past the last header allowed: 400", bad_name, strlen(bad_name),
                 "ERROR 400 bad_request\n", &limits);

    /* Found by fuzz_http: trailers, like heads, answer the same whatever
     * the split: 431 when too large, 400 when bad. */
    static const char big_trailer[] = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      "0\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                      "aaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    check_stream("trailers over max_head: 431", big_trailer, sizeof big_trailer - 1,
                 "ERROR 431 headers_too_large\n", &small);
    static const char bad_trailer[] = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      "0\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                      "aaaaaaaaaaaaaaaaaaaaaa\r\nBad\x01: x\r\n\r\n";
    check_stream("a bad trailer after a long one: 400", bad_trailer, sizeof bad_trailer - 1,
                 "ERROR 400 bad_request\n", &small);

    char many[4096] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i <= HTTP_MAX_HEADERS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "H%d: v\r\n", i);
    strcat(many, "\r\n");
    check_stream("too many header lines: 431", many, strlen(many), "ERROR 431 headers_too_large\n",
                 &limits);
}

static void test_headers(void)
{
    static const char s[] = "POST /check HTTP/1.1\r\nAuthorization:   Bearer abc  \r\n"
                            "X-Empty:\r\nX-Multi: a\r\n b\r\nContent-Length: 0\r\n\r\n";
    for (size_t cut = 1; cut < sizeof s - 1; cut += 7) {
        struct run r;
        run_init(&r);
        run_feed(&r, s, cut, &limits);
        run_feed(&r, s + cut, sizeof s - 1 - cut, &limits);
        if (cut == 1) {
            is_str(http_parse_header(&r.p, "authorization"), "Bearer abc",
                   "a header by name, any case, white space trimmed");
            is_str(http_parse_header(&r.p, "X-Empty"), "", "an empty header");
            ok(http_parse_header(&r.p, "X-Empty-Not") == NULL, "an absent header");
            is_str(http_parse_header(&r.p, "Content-Length"), "0",
                   "the header after an empty one keeps its own name");
        } else if (!http_parse_header(&r.p, "x-empty") ||
                   strcmp(http_parse_header(&r.p, "authorization"), "Bearer abc") != 0) {
            ok(0, "headers split at %zu", cut);
        }
        run_free(&r);
    }
}

/* Limits change between two requests of one connection (a reload). */
static void test_limits_change(void)
{
    struct http_limits small = {.max_head = HTTP_HEAD_MAX, .max_body = 4};
    struct run r;
    run_init(&r);
    static const char req[] = "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n12345";
    run_feed(&r, req, sizeof req - 1, &limits);
    run_feed(&r, req, sizeof req - 1, &small);
    char *got = log_of(&r);
    is_str(got, "POST / / HTTP/1.1 ka=1 head=0 te=- body[5]=12345|\nERROR 413 body_too_large\n",
           "a new max_body applies to the next request of an open connection");
    free(got);
    run_free(&r);
}

static void test_started(void)
{
    struct http_parse p = {0};
    http_parse_init(&p);
    size_t used;
    ok(!http_parse_started(&p), "nothing started on a new connection");
    is_int(http_parse_feed(&p, &limits, "GE", 2, &used), HTTP_PARSE_MORE, "two bytes: more");
    ok(http_parse_started(&p), "started after the first bytes");
    enum http_parse_status st = http_parse_feed(&p, &limits, "T / HTTP/1.1\r\n\r\n", 16, &used);
    is_int(st, HTTP_PARSE_REQUEST, "complete");
    ok(!http_parse_started(&p), "between requests: nothing started");
    http_parse_free(&p);
}

int main(void)
{
    test_simple();
    test_pipelining();
    test_chunked();
    test_continue();
    test_errors();
    test_headers();
    test_limits_change();
    test_started();
    return tap_done();
}
