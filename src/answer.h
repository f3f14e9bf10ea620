/*
 * answer.h: INTERIM. The evhttp front (http.c) and today's check.c send an
 * answer as a struct answer (status, headers, body) that evhttp frames
 * itself. This adapter renders with response.c and splits the result into
 * that struct, so both fronts send the very same bytes. It goes away when
 * check.c moves to check_start(worker, request, reply) and http.c to our
 * own HTTP/1.1 front, which write response.c's output as is.
 */
#ifndef RATELIMITD_ANSWER_H
#define RATELIMITD_ANSWER_H

#include <stddef.h>

#include "decision.h"

#define ANSWER_MAX_HEADERS 6

struct answer {
    int status;
    int close;                /* ask the client to close the connection */
    const char *content_type; /* static; NULL: application/json */
    char *body;               /* owned, NUL-terminated */
    size_t nheaders;
    struct {
        const char *name; /* static */
        char value[32];
    } headers[ANSWER_MAX_HEADERS];
};

/* The answer to a verdict (response_verdict). */
void answer_verdict(const struct verdict *v, struct answer *ans);

/* {"error": code, "message": message} with the given status. */
void answer_error(int status, const char *code, const char *message, struct answer *ans);

/* Adds a header (value copied, truncated to fit). */
void answer_add_header(struct answer *ans, const char *name, const char *value);

/* Frees the body; the struct may be reused. */
void answer_free(struct answer *ans);

#endif
