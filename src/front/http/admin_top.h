/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_top.h: GET /v1/top/<policy>?by=denied|used&window=1m|10m&n=20, the
 * heaviest keys of a policy across every daemon sharing the backend
 * (core/top_keys.h), below the HTTP routing (http_routes.c).
 *
 * Owns the path and query's reading and the answer's JSON. Does not own
 * the sketches, the merge or the query's life (core/top_keys.h).
 */
#ifndef RATELIMITD_ADMIN_TOP_H
#define RATELIMITD_ADMIN_TOP_H

#include "core/request_error.h"
#include "core/top_keys.h"
#include "lib/buf.h"

#define ADMIN_TOP_PREFIX "/v1/top/"
#define ADMIN_TOP_N_DEFAULT 20

struct admin_top_query {
    const struct policy *policy; /* points into the config given */
    enum top_by by;              /* default denied */
    int window;                  /* minutes: 1 (the default) or 10 */
    size_t n;                    /* 1 .. TOP_KEYS_N_MAX, default ADMIN_TOP_N_DEFAULT */
};

/* Reads path (which starts with ADMIN_TOP_PREFIX) and url's query against
 * cfg. Errors (-1, *err filled): 404 unknown_policy, 400 invalid_path (a
 * segment after the policy), 400 invalid_query (by, window or n not one of
 * theirs). Pure. */
int admin_top_parse(const struct config *cfg, const char *path, const char *url,
                    struct admin_top_query *out, struct request_error *err) RL_WUR;

/* The answer: 200 {"policy","by","window","total","daemons","merged_at",
 * "keys":[{"key","count","error"}]}, or 503 backend_unavailable with
 * Retry-After: 1. Appends to out; returns the status. */
int admin_render_top(struct buf *out, const struct top_result *r, unsigned flags);

#endif
