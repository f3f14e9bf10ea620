/*
 * request.h: the body of POST /check decoded into a plain struct, with every
 * rule about what a valid request is. No I/O, no Redis: a pure function of
 * (config, bytes), so it can be unit-tested and fuzzed.
 */
#ifndef RATELIMITD_REQUEST_H
#define RATELIMITD_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define REQUEST_MAX_CHECKS 64
#define REQUEST_MAX_COST 1000000000LL

struct check_item {
    const struct policy *policy; /* points into the config snapshot */
    char *key;                   /* owned; may not contain NUL */
    size_t keylen;
    int64_t cost; /* costs of duplicate (policy, key) pairs are added */
};

struct check_request {
    int dry_run;
    size_t nchecks;
    struct check_item *checks; /* owned */
};

struct request_error {
    int status;       /* HTTP status: 400 */
    const char *code; /* static string, e.g. "invalid_json" */
    char message[RL_ERRLEN];
};

/*
 * Decodes a /check body. On success fills *out (free it with request_free)
 * and returns 0. On error returns -1, fills *err and leaves *out empty.
 * The config must outlive *out: items point at its policies.
 */
int request_parse(const struct config *cfg, const char *body, size_t len,
                  struct check_request *out, struct request_error *err) RL_WUR;

/* The failure mode for the whole request when Redis cannot decide: the
 * strictest of its policies' (closed, then local, then open). */
enum failure_mode request_failure_mode(const struct check_request *r);

/* Frees what request_parse allocated; safe on a zeroed or freed struct. */
void request_free(struct check_request *r);

#endif
