/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_parse.h: the requests of one HTTP/1.1 connection, parsed
 * incrementally from whatever byte chunks arrive (on Debian's libhttp-parser,
 * http_parser_execute). No I/O and no clock: the connection layer (http.c)
 * reads, feeds, and answers.
 *
 * Framing: keep-alive, pipelining (parsing stops after each complete
 * request so that the caller answers in order and feeds the rest again),
 * Content-Length and chunked bodies, and `Expect: 100-continue` (parsing
 * stops once the head is complete so that the caller writes "100 Continue"
 * before the client sends the body). Every framing error is final for the
 * connection (the caller answers it and closes): once framing is in doubt
 * the next request cannot be found safely.
 *
 *   400  bad syntax, bad chunk sizes, Content-Length and Transfer-Encoding
 *        together (request smuggling), several Content-Lengths
 *   413  body over max_body: known from Content-Length before any body byte
 *        is read, or counted while a chunked body arrives
 *   431  head (request line and headers) over max_head
 *   505  an HTTP version other than 1.x
 *
 * Limits are given to every call, so a reload changes them for open
 * connections from their next bytes on.
 */
#ifndef RATELIMITD_HTTP_PARSE_H
#define RATELIMITD_HTTP_PARSE_H

#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>

#include "core/request_error.h"
#include "lib/buf.h"
#include "lib/util.h"

#define HTTP_HEAD_MAX 8192  /* the head's limit unless told otherwise */
#define HTTP_MAX_HEADERS 64 /* more header lines than this: 431 */

struct http_limits {
    size_t max_head; /* request line + headers, bytes */
    size_t max_body; /* decoded body, bytes */
};

enum http_parse_status {
    HTTP_PARSE_MORE,     /* every byte given was used; feed more */
    HTTP_PARSE_CONTINUE, /* head complete, `Expect: 100-continue` and a body
                          * is coming: write "HTTP/1.1 100 Continue", then
                          * feed the rest */
    HTTP_PARSE_REQUEST,  /* one request complete (http_parse_request) */
    HTTP_PARSE_ERROR,    /* final: answer http_parse_error, then close */
};

/* One complete request. Every pointer points into the parser and is valid
 * until the next http_parse_feed or http_parse_free. */
struct http_request {
    enum http_method method;
    const char *method_name; /* "GET", ... */
    const char *url;         /* as sent, NUL-terminated */
    const char *path;        /* url up to '?' or '#', NUL-terminated */
    unsigned short http_major, http_minor;
    int keep_alive;   /* the client keeps the connection (1.1 unless
                       * "Connection: close"; 1.0 with keep-alive) */
    int head;         /* HEAD: the answer carries no body */
    const char *body; /* NUL-terminated (an extra NUL past body_len) */
    size_t body_len;
};

struct http_parse_header {
    uint32_t name, value; /* offsets into store, each NUL-terminated */
};

/* Embedded in a connection; zero-initialize, then http_parse_init. */
struct http_parse {
    http_parser parser;
    struct buf store; /* url, header names and values, body; reused */
    const struct http_limits *lim;
    size_t head_bytes;
    int piece; /* what the last callback appended (url, name, value) */
    uint32_t url;
    size_t nheaders;
    int too_many_headers; /* past HTTP_MAX_HEADERS: 431 once the head is complete */
    struct http_parse_header headers[HTTP_MAX_HEADERS];
    size_t body_off, body_len, trailer_bytes;
    int in_message, headers_done, message_done, continue_due, keep_alive, failed;
    enum request_code error_code;
    const char *error_message; /* NULL until the first error */
    char error_text[96];       /* error_message when it carries a number (the 413's limit) */
    struct http_request req;
};

void http_parse_init(struct http_parse *p);

/*
 * Parses up to len bytes of data. Returns how many were used (*used) and what
 * happened. On HTTP_PARSE_REQUEST and HTTP_PARSE_CONTINUE bytes may be left
 * over: the caller keeps them and feeds them again (pipelining); a
 * HTTP_PARSE_REQUEST's request stays readable until then. After
 * HTTP_PARSE_ERROR every call returns HTTP_PARSE_ERROR.
 */
enum http_parse_status http_parse_feed(struct http_parse *p, const struct http_limits *lim,
                                       const char *data, size_t len, size_t *used) RL_WUR;

/* The request after HTTP_PARSE_REQUEST. */
const struct http_request *http_parse_request(const struct http_parse *p);

/* The value of the first header called name (any case) of the request being
 * parsed or just complete, or NULL. Valid as long as the request. */
const char *http_parse_header(const struct http_parse *p, const char *name);

/* The values of every header called name (any case), in order: at most max
 * of them into values; returns how many. Valid as long as the request. */
size_t http_parse_headers(const struct http_parse *p, const char *name, const char **values,
                          size_t max);

/* True while part of a request has been read (a request is in progress). */
int http_parse_started(const struct http_parse *p);

/* After HTTP_PARSE_ERROR: the error code (bad_request, body_too_large,
 * headers_too_large, not_implemented, http_version_not_supported) and a
 * message (valid while the parser is). */
enum request_code http_parse_error(const struct http_parse *p, const char **message);

/* Frees the buffers; the struct may be initialized again. */
void http_parse_free(struct http_parse *p);

/* The value of the query parameter `name` in url (up to '&' or '#'), with
 * its length in *len; NULL if absent. No percent-decoding: the values
 * asked for are plain words and numbers. Pure. */
const char *http_query_param(const char *url, const char *name, size_t *len);

#endif
