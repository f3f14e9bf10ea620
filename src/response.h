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

/* One tier's outcome, as the script reports it (times in microseconds). */
struct tier_result {
    int allowed;
    int64_t limit;
    int64_t remaining;
    int64_t reset_us;
    int64_t retry_us; /* -1: no finite wait */
    int64_t delay_us; /* leaky_bucket only */
    int cost_exceeds_limit;
};

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

/*
 * The decision for a whole request. results holds one entry per tier, in
 * check order then tier order (as the script returns them).
 */
void response_decision(const struct check_request *req, const struct tier_result *results,
                       struct answer *ans);

/* The same, decided by this daemon's memory (failure_mode local) while
 * Redis could not: marked "degraded":true, "local":true. */
void response_local_decision(const struct check_request *req, const struct tier_result *results,
                             struct answer *ans);

/* The answer when Redis could not decide and no local decision is made:
 * 503 backend_unavailable if any policy involved fails closed, else 200
 * {"allowed":true,"degraded":true}. */
void response_unavailable(const struct check_request *req, const char *why, struct answer *ans);

/* {"error": code, "message": message} with the given status. */
void response_error(int status, const char *code, const char *message, struct answer *ans);

/* Adds a header (value copied, truncated to fit). */
void response_add_header(struct answer *ans, const char *name, const char *value);

/* Frees the body; the struct may be reused. */
void answer_free(struct answer *ans);

#endif
