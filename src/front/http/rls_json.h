/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rls_json.h: the body of POST /json, envoyproxy/ratelimit's JSON form of
 * RateLimitRequest, decoded into struct rls_request (rls.h). A pure function
 * of the bytes, like check_json.c for /check: no I/O, no config.
 *
 *   {"domain": "d",
 *    "descriptors": [{"entries": [{"key": "k", "value": "v"}],
 *                     "hits_addend": N}],
 *    "hits_addend": N}
 *
 * Field names as protojson reads them: snake_case or camelCase
 * (hitsAddend); a uint64 also as a string of digits, as protojson writes it.
 * Unknown fields are errors.
 */
#ifndef RATELIMITD_RLS_JSON_H
#define RATELIMITD_RLS_JSON_H

#include <stddef.h>

#include "core/request_error.h"
#include "core/rls.h"

/* A decoded body: req points into the rest, all owned here. */
struct rls_json {
    struct rls_request req;
    void *root; /* the jansson document the strings point into */
    struct rls_descriptor *descriptors;
    struct descriptor_entry *entries;
};

/* Decodes body. On success fills *out (free it with rls_json_free) and
 * returns 0; on error returns -1 with *err set (status 400) and *out empty. */
int rls_json_parse(const char *body, size_t len, struct rls_json *out,
                   struct request_error *err) RL_WUR;

/* Frees what *j owns; safe on an empty or freed struct. */
void rls_json_free(struct rls_json *j);

#endif
