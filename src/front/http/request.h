/*
 * request.h: the body of POST /check decoded into a plain struct, with every
 * rule about what a valid request is. No I/O, no Redis: a pure function of
 * (config, bytes), so it can be unit-tested and fuzzed.
 */
#ifndef RATELIMITD_REQUEST_H
#define RATELIMITD_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/decision.h"

struct request_error {
    int status;       /* HTTP status: 400 */
    const char *code; /* static string, e.g. "invalid_json" */
    char message[RL_ERRLEN];
};

/* Fills err as a 400 with code (a static string) and a printf-style
 * message; returns -1. Every JSON body decoder (/check, /json, rls.c's
 * checks) reports through it. */
int request_fail(struct request_error *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Refuses (400 unknown_field, naming it and `where`) any member of obj not
 * named in allowed (NULL-terminated). Returns 0 or -1. */
int request_only_fields(json_t *obj, const char *const *allowed, const char *where,
                        struct request_error *err);

/*
 * Decodes a /check body. On success fills *out (free it with request_free)
 * and returns 0. On error returns -1, fills *err and leaves *out empty.
 * The config must outlive *out: items point at its policies.
 */
int request_parse(const struct config *cfg, const char *body, size_t len, struct check_request *out,
                  struct request_error *err) RL_WUR;

/* The same decoding through jansson only, without the fast path for plain
 * bodies: the reference request_parse is tested against. */
int request_parse_full(const struct config *cfg, const char *body, size_t len,
                       struct check_request *out, struct request_error *err) RL_WUR;

#endif
