/*
 * response.h: every answer the daemon gives, as a plain struct (status, JSON
 * body, headers) that http.c sends. Owns the JSON shapes, the choice of the
 * binding tier and the X-RateLimit-* / Retry-After headers.
 */
#ifndef RATELIMITD_RESPONSE_H
#define RATELIMITD_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "request.h"

#define RESPONSE_MAX_HEADERS 6

struct answer {
    int status;
    int close;                /* ask the client to close the connection */
    const char *content_type; /* static; NULL: application/json */
    char *body; /* owned, NUL-terminated JSON */
    size_t nheaders;
    struct {
        const char *name; /* static */
        char value[32];
    } headers[RESPONSE_MAX_HEADERS];
};

/* The answer to a check: 200/429 with the figures when decided (plus
 * "degraded" and "local" when decided in memory), the failure-mode answer
 * when unavailable, 503 overloaded. */
void response_verdict(const struct verdict *v, struct answer *ans);

/* {"error": code, "message": message} with the given status. */
void response_error(int status, const char *code, const char *message, struct answer *ans);

/* Adds a header (value copied, truncated to fit). */
void response_add_header(struct answer *ans, const char *name, const char *value);

/* Frees the body; the struct may be reused. */
void answer_free(struct answer *ans);

#endif
