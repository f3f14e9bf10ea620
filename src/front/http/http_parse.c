/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_parse.c: incremental HTTP/1.1 request parsing on libhttp-parser
 * (http_parse.h).
 *
 * The parser is paused at two points so that the caller regains control
 * there: when a head is complete (to check it: framing, limits, version,
 * 100-continue) and when a message is complete (to answer it before the
 * next pipelined one is parsed). Everything a request carries is appended
 * to one buffer (url, header names and values, body, each NUL-terminated)
 * that is reused for the next request, so a keep-alive connection stops
 * allocating once its buffer is large enough.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "front/http/http_parse.h"

enum piece { PIECE_NONE, PIECE_URL, PIECE_NAME, PIECE_VALUE };

#define NO_VALUE UINT32_MAX /* a header line with an empty value */

static struct http_parse *of(http_parser *hp)
{
    return hp->data;
}

/* Records a final error; returning -1 from a callback stops the parser. */
static int fail(struct http_parse *p, enum request_code code, const char *message)
{
    if (!p->error_message) {
        p->error_code = code;
        p->error_message = message;
    }
    return -1;
}

/* The 413, with the limit the client went over. */
static int body_too_large(struct http_parse *p)
{
    snprintf(p->error_text, sizeof p->error_text,
             "the request body is larger than max_body (%zu bytes)", p->lim->max_body);
    return fail(p, RC_BODY_TOO_LARGE, p->error_text);
}

static int head_too_large(struct http_parse *p)
{
    return fail(p, RC_HEADERS_TOO_LARGE, "the request line and headers are too large");
}

/* Ends the piece being appended: a value loses its trailing white space. */
static void end_piece(struct http_parse *p)
{
    if (p->piece == PIECE_VALUE) {
        uint32_t start = p->headers[p->nheaders - 1].value;
        while (p->store.len > start &&
               (p->store.data[p->store.len - 1] == ' ' || p->store.data[p->store.len - 1] == '\t'))
            p->store.len--;
    }
    if (p->piece != PIECE_NONE)
        buf_append_char(&p->store, '\0');
    p->piece = PIECE_NONE;
}

/* Appends a piece of the url, a header name or a header value: the parser
 * may hand over any of them in several parts. */
static int add_piece(struct http_parse *p, enum piece kind, const char *at, size_t len)
{
    if (p->too_many_headers)
        return 0;
    if (p->piece != (int)kind) {
        end_piece(p);
        if (kind == PIECE_NAME) {
            /* Refused once the head is complete, not here: the parser
             * reports a name in parts at the end of each read, so failing
             * now would answer differently (431 or 400) depending on how
             * the bytes were split. */
            if (p->nheaders == HTTP_MAX_HEADERS) {
                p->too_many_headers = 1;
                return 0;
            }
            p->headers[p->nheaders].name = (uint32_t)p->store.len;
            p->headers[p->nheaders].value = NO_VALUE;
            p->nheaders++;
        } else if (kind == PIECE_VALUE) {
            p->headers[p->nheaders - 1].value = (uint32_t)p->store.len;
        } else {
            p->url = (uint32_t)p->store.len;
        }
        p->piece = kind;
    }
    if (p->store.len + len > p->lim->max_head)
        return head_too_large(p);
    buf_append(&p->store, at, len);
    return 0;
}

static int on_message_begin(http_parser *hp)
{
    struct http_parse *p = of(hp);
    p->store.len = 0;
    p->piece = PIECE_NONE;
    p->url = 0;
    p->nheaders = 0;
    p->too_many_headers = 0;
    p->body_off = p->body_len = p->trailer_bytes = 0;
    p->headers_done = p->message_done = p->continue_due = p->keep_alive = 0;
    p->in_message = 1;
    return 0;
}

static int on_url(http_parser *hp, const char *at, size_t len)
{
    return add_piece(of(hp), PIECE_URL, at, len);
}

/* Trailers of a chunked body are read and dropped (nothing is kept: they
 * cost no memory); they count against max_head as a second head would,
 * once complete, so that a bad byte in them is a 400 however the bytes
 * are split. */
static int trailer(struct http_parse *p, size_t len)
{
    p->trailer_bytes += len;
    return 0;
}

static int on_header_field(http_parser *hp, const char *at, size_t len)
{
    struct http_parse *p = of(hp);
    if (p->headers_done)
        return trailer(p, len);
    return add_piece(p, PIECE_NAME, at, len);
}

static int on_header_value(http_parser *hp, const char *at, size_t len)
{
    struct http_parse *p = of(hp);
    if (p->headers_done)
        return trailer(p, len);
    if (p->nheaders == 0)
        return fail(p, RC_BAD_REQUEST, "a header value without a name");
    return add_piece(p, PIECE_VALUE, at, len);
}

/* Checks a complete head: everything that must be refused before the body
 * is read. */
static int on_headers_complete(http_parser *hp)
{
    struct http_parse *p = of(hp);
    end_piece(p);
    if (p->too_many_headers)
        return head_too_large(p);
    if (hp->http_major != 1)
        return fail(p, RC_HTTP_VERSION_NOT_SUPPORTED, "only HTTP/1.0 and HTTP/1.1 are served");
    int has_te = http_parse_header(p, "Transfer-Encoding") != NULL;
    /* Two framings at once is how requests are smuggled past a proxy that
     * reads the other one: refused, whatever the parser would pick. */
    if (has_te && http_parse_header(p, "Content-Length"))
        return fail(p, RC_BAD_REQUEST, "Content-Length and Transfer-Encoding together are refused");
    if (has_te && !(hp->flags & F_CHUNKED))
        return fail(p, RC_BAD_REQUEST, "only the chunked transfer coding is accepted");
    int body_expected =
        (hp->flags & F_CHUNKED) || ((hp->flags & F_CONTENTLENGTH) && hp->content_length > 0);
    if ((hp->flags & F_CONTENTLENGTH) && hp->content_length > p->lim->max_body)
        return body_too_large(p);
    const char *expect = http_parse_header(p, "Expect");
    p->continue_due =
        expect && strcasecmp(expect, "100-continue") == 0 && body_expected && hp->http_minor >= 1;
    p->body_off = p->store.len;
    p->headers_done = 1;
    http_parser_pause(hp, 1);
    return 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
    struct http_parse *p = of(hp);
    if (p->body_len + len > p->lim->max_body)
        return body_too_large(p);
    buf_append(&p->store, at, len);
    p->body_len += len;
    return 0;
}

static int on_message_complete(http_parser *hp)
{
    struct http_parse *p = of(hp);
    if (p->trailer_bytes > p->lim->max_head)
        return head_too_large(p);
    p->keep_alive = http_should_keep_alive(hp);
    p->message_done = 1;
    p->in_message = 0;
    http_parser_pause(hp, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void http_parse_init(struct http_parse *p)
{
    struct buf keep = p->store;
    memset(p, 0, sizeof *p);
    p->store = keep;
    p->store.len = 0;
    http_parser_init(&p->parser, HTTP_REQUEST);
    p->parser.data = p;
}

/* Where the path of url starts and how long it is: up to '?' or '#',
 * after the scheme and authority of the absolute form. *root: the absolute
 * form has no path at all, which means "/". */
static void path_span(const char *url, size_t *start, size_t *len, int *root)
{
    size_t at = 0;
    *root = 0;
    if (strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0) {
        const char *authority = strchr(url, ':') + 3;
        const char *slash = strchr(authority, '/');
        at = slash ? (size_t)(slash - url) : strlen(url);
        *root = slash == NULL;
    }
    *start = at;
    *len = strcspn(url + at, "?#");
}

/* Fills p->req once a message is complete. */
static void finish_request(struct http_parse *p)
{
    buf_append_char(&p->store, '\0'); /* after the body */
    size_t path_in, path_len;
    int root;
    path_span(p->store.data + p->url, &path_in, &path_len, &root);
    path_in += p->url;
    size_t path_off = p->store.len;
    /* The store may move while growing: copy by offset. */
    buf_reserve(&p->store, path_len + 1);
    memcpy(p->store.data + path_off, p->store.data + path_in, path_len);
    p->store.len += path_len;
    if (root)
        buf_append_char(&p->store, '/');
    buf_append_char(&p->store, '\0');

    http_parser *hp = &p->parser;
    p->req = (struct http_request){
        .method = (enum http_method)hp->method,
        .method_name = http_method_str((enum http_method)hp->method),
        .url = p->store.data + p->url,
        .path = p->store.data + path_off,
        .http_major = hp->http_major,
        .http_minor = hp->http_minor,
        .keep_alive = p->keep_alive,
        .head = hp->method == HTTP_HEAD,
        .body = p->store.data + p->body_off,
        .body_len = p->body_len,
    };
}

/* A byte of a token (RFC 9110 §5.6.2), what a method is made of. */
static int is_tchar(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Maps a parser error that no callback of ours explains; bad is the byte
 * the parser stopped at (-1: none left). */
static void parser_error(struct http_parse *p, int bad)
{
    enum http_errno e = HTTP_PARSER_ERRNO(&p->parser);
    if (e == HPE_HEADER_OVERFLOW)
        head_too_large(p);
    else if (e == HPE_INVALID_METHOD && is_tchar(bad))
        /* RFC 9110 §15.6.2: a method the server does not recognize is 501
         * (405 is for a known method a path does not take: http_routes.c).
         * The parser stops at the first byte no method it knows has there:
         * a token's byte makes an unknown method, any other byte garbage
         * (400). */
        fail(p, RC_NOT_IMPLEMENTED, "unknown HTTP method");
    else if (e == HPE_UNEXPECTED_CONTENT_LENGTH)
        fail(p, RC_BAD_REQUEST, "conflicting Content-Length or Transfer-Encoding");
    else
        fail(p, RC_BAD_REQUEST, http_errno_description(e));
}

enum http_parse_status http_parse_feed(struct http_parse *p, const struct http_limits *lim,
                                       const char *data, size_t len, size_t *used)
{
    *used = 0;
    if (p->failed)
        return HTTP_PARSE_ERROR;
    p->lim = lim;
    size_t off = 0;
    /* Never execute zero bytes: libhttp-parser reads that as end of input. */
    while (off < len) {
        int head_before = p->headers_done;
        size_t n = http_parser_execute(&p->parser, &settings, data + off, len - off);
        off += n;
        if (!head_before) {
            /* Paused at the end of a head, the parser hands its last byte
             * (the final LF) back, to read it again when resumed. */
            p->head_bytes += n + (p->headers_done ? 1 : 0);
        }
        enum http_errno e = HTTP_PARSER_ERRNO(&p->parser);
        /* A head over the limit is 431 whatever else is wrong with it, so
         * that the answer does not depend on how the bytes were split. */
        if (!head_before && p->head_bytes > lim->max_head) {
            p->error_message = NULL;
            head_too_large(p);
            p->failed = 1;
            *used = off;
            return HTTP_PARSE_ERROR;
        }
        if (e != HPE_OK && e != HPE_PAUSED) {
            if (!p->error_message)
                parser_error(p, off < len ? (unsigned char)data[off] : -1);
            p->failed = 1;
            *used = off;
            return HTTP_PARSE_ERROR;
        }
        if (e == HPE_PAUSED)
            http_parser_pause(&p->parser, 0);
        if (p->message_done) {
            finish_request(p);
            /* The next head counts from here (on_message_begin comes only
             * with its first byte, inside the next execute). */
            p->message_done = p->headers_done = 0;
            p->head_bytes = 0;
            *used = off;
            return HTTP_PARSE_REQUEST;
        }
        if (p->continue_due) {
            p->continue_due = 0;
            *used = off;
            return HTTP_PARSE_CONTINUE;
        }
    }
    *used = off;
    return HTTP_PARSE_MORE;
}

const struct http_request *http_parse_request(const struct http_parse *p)
{
    return &p->req;
}

/* Whether two header names are the same, case aside. The first bytes are
 * compared inline first: most names differ there, and a strcasecmp call
 * per header per lookup (a few lookups on every request) showed in
 * callgrind. Folding with 0x20 never tells equal names apart; it may let
 * unequal first bytes through, which strcasecmp then refuses. */
static int same_name(const char *a, const char *b)
{
    return (a[0] | 0x20) == (b[0] | 0x20) && strcasecmp(a, b) == 0;
}

const char *http_parse_header(const struct http_parse *p, const char *name)
{
    for (size_t i = 0; i < p->nheaders; i++) {
        if (!same_name(p->store.data + p->headers[i].name, name))
            continue;
        return p->headers[i].value == NO_VALUE ? "" : p->store.data + p->headers[i].value;
    }
    return NULL;
}

size_t http_parse_headers(const struct http_parse *p, const char *name, const char **values,
                          size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < p->nheaders && n < max; i++)
        if (same_name(p->store.data + p->headers[i].name, name))
            values[n++] =
                p->headers[i].value == NO_VALUE ? "" : p->store.data + p->headers[i].value;
    return n;
}

int http_parse_started(const struct http_parse *p)
{
    return p->in_message || p->head_bytes > 0;
}

enum request_code http_parse_error(const struct http_parse *p, const char **message)
{
    *message = p->error_message;
    return p->error_code;
}

void http_parse_free(struct http_parse *p)
{
    buf_free(&p->store);
}

const char *http_query_param(const char *url, const char *name, size_t *len)
{
    const char *p = strchr(url, '?');
    size_t nlen = strlen(name);
    while (p && *p && *p != '#') {
        p++;
        size_t plen = strcspn(p, "&#");
        if (plen > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
            *len = plen - nlen - 1;
            return p + nlen + 1;
        }
        p += plen;
    }
    return NULL;
}
