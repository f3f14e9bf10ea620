/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_http.c: libFuzzer harness for the HTTP/1.1 request parser
 * (http_parse.c). The input is one connection's byte stream (after two
 * bytes that pick the limits); it is fed whole, then again cut at points
 * picked from a hash of the input, the way http.c feeds what each read()
 * returns. Beyond what ASan/UBSan/LSan catch, the harness aborts when:
 *
 *   - the two feedings disagree (requests, their order, the error);
 *   - a call claims more bytes than it was given, or returns MORE without
 *     using every byte;
 *   - a request breaks the contract: body over max_body or not
 *     NUL-terminated, a path that is not a prefix of what was sent;
 *   - an error has a status other than 400, 413, 431, 501 or 505, or no code;
 *   - the error's answer (response_error) is not a complete response.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/http/http_parse.h"
#include "front/http/response.h"
#include "lib/buf.h"

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_http: " __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ULL;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void log_request(struct buf *log, const struct http_parse *p, const struct http_limits *lim)
{
    const struct http_request *r = http_parse_request(p);
    REQUIRE(r->body_len <= lim->max_body, "body of %zu over max_body %zu", r->body_len,
            lim->max_body);
    REQUIRE(r->body[r->body_len] == '\0', "body not NUL-terminated");
    REQUIRE(r->http_major == 1, "HTTP/%u accepted", r->http_major);
    REQUIRE(strstr(r->url, r->path) != NULL || r->path[0] == '/', "path %s of url %s", r->path,
            r->url);
    const char *cl = http_parse_header(p, "Content-Length");
    const char *te = http_parse_header(p, "Transfer-Encoding");
    REQUIRE(!(cl && te), "Content-Length and Transfer-Encoding both accepted");
    char line[96];
    snprintf(line, sizeof line, "R %s %d %d %d %zu|", r->method_name, r->keep_alive, r->head,
             r->http_minor, r->body_len);
    buf_append_str(log, line);
    buf_append_str(log, r->url);
    buf_append_char(log, '|');
    buf_append(log, r->body, r->body_len);
    buf_append_char(log, '\n');
}

static void log_error(struct buf *log, const struct http_parse *p)
{
    const char *message;
    enum request_code code = http_parse_error(p, &message);
    int status = request_code_status(code);
    REQUIRE(status == 400 || status == 413 || status == 431 || status == 501 || status == 505,
            "status %d", status);
    REQUIRE(message, "no message");
    struct buf out = {0};
    response_error(&out, code, message, NULL, NULL, RESPONSE_CLOSE);
    buf_append_char(&out, '\0');
    REQUIRE(strstr(out.data, "\r\n\r\n{\"error\":") != NULL, "bad answer %s", out.data);
    buf_free(&out);
    char line[64];
    snprintf(line, sizeof line, "E %d %s\n", status, request_code_name(code));
    buf_append_str(log, line);
}

/* Feeds data cut at the points seed picks (none when seed is 0); returns
 * the log. */
static void run(const uint8_t *data, size_t size, const struct http_limits *lim, uint64_t seed,
                struct buf *log)
{
    struct http_parse p = {0};
    struct buf pending = {0};
    http_parse_init(&p);
    size_t at = 0;
    int dead = 0;
    while (at < size && !dead) {
        size_t n = size - at;
        if (seed)
            n = 1 + next(&seed) % (n < 64 ? n : 64);
        buf_append(&pending, data + at, n);
        at += n;
        for (;;) {
            size_t used;
            enum http_parse_status st = http_parse_feed(&p, lim, pending.data, pending.len, &used);
            REQUIRE(used <= pending.len, "used %zu of %zu", used, pending.len);
            buf_consume(&pending, used);
            if (st == HTTP_PARSE_MORE) {
                REQUIRE(pending.len == 0, "MORE with %zu bytes left", pending.len);
                break;
            }
            if (st == HTTP_PARSE_CONTINUE) {
                buf_append_str(log, "C\n");
                continue;
            }
            if (st == HTTP_PARSE_ERROR) {
                log_error(log, &p);
                dead = 1;
                break;
            }
            log_request(log, &p, lim);
        }
    }
    buf_free(&pending);
    http_parse_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    struct http_limits lim = {.max_head = 64 + (size_t)data[0] * 32,
                              .max_body = (size_t)data[1] * 4};
    data += 2;
    size -= 2;
    struct buf whole = {0}, cut = {0};
    run(data, size, &lim, 0, &whole);
    uint64_t seed = 1469598103934665603ULL;
    for (size_t i = 0; i < size; i++)
        seed = (seed ^ data[i]) * 1099511628211ULL;
    run(data, size, &lim, seed | 1, &cut);
    buf_append_char(&whole, '\0');
    buf_append_char(&cut, '\0');
    REQUIRE(strcmp(whole.data, cut.data) == 0, "whole:\n%s\ncut:\n%s", whole.data, cut.data);
    buf_free(&whole);
    buf_free(&cut);
    return 0;
}
