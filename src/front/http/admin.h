/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin.h: the admin API on keys, transport-neutral below the HTTP routing
 * (http_routes.c routes /v1/keys/ here):
 *
 *   GET|HEAD /v1/keys/<policy>/<key>  every tier's current figures, consuming
 *                                     nothing (a dry run through the core)
 *   DELETE   /v1/keys/<policy>/<key>  resets every tier of the key, on the
 *                                     backend and in the deny cache of every
 *                                     daemon sharing it
 *
 * Owns: the path's strict percent-decoding, the inspection request and the
 * JSON of both answers. Does not own the decision (check.c), the life of a
 * reset (reset.c) nor how a reset is done on a backend (backend.h).
 */
#ifndef RATELIMITD_ADMIN_H
#define RATELIMITD_ADMIN_H

#include <stddef.h>

#include "core/decision.h"
#include "core/request_error.h"
#include "core/reset.h"
#include "lib/buf.h"

#define ADMIN_KEYS_PREFIX "/v1/keys/"

/* A decoded /v1/keys/<policy>/<key>. */
struct admin_target {
    const struct policy *policy; /* points into the config given */
    const struct policy *base;   /* the policy named (policy: its variant for the key) */
    char *key;                   /* owned (free it), keylen bytes, no NUL inside */
    size_t keylen;
};

/*
 * Decodes path (which starts with ADMIN_KEYS_PREFIX) against cfg. The
 * policy is the segment up to the next '/', the key everything after it,
 * percent-decoded strictly: '%' must be followed by two hex digits. Errors
 * (-1, *err filled, nothing to free): 400 invalid_path (no key segment, a
 * bad escape), 400 invalid_key (empty, a NUL byte, over POLICY_KEY_MAX
 * bytes), 404 unknown_policy. Pure.
 */
int admin_parse_path(const struct config *cfg, const char *path, struct admin_target *out,
                     struct request_error *err) RL_WUR;

/* The same for a path that starts with prefix ("/v1/overrides/"). */
int admin_parse_path_in(const struct config *cfg, const char *prefix, const char *path,
                        struct admin_target *out, struct request_error *err) RL_WUR;

/*
 * The request behind GET: a dry run of two checks of t's (policy, key),
 * cost 0 (the state as it is: limit, remaining, reset) then cost 1 (would
 * the next request pass, and if not when), marked inspect so that it is
 * not counted as checks. Takes t->key (left NULL).
 */
void admin_inspect_request(struct admin_target *t, struct check_request *out);

/* The answer to an inspection's verdict (a request made by
 * admin_inspect_request): 200 with the figures (DECIDED, LOCAL), else 503.
 * Appends to out; returns the status. */
int admin_render_inspect(struct buf *out, const struct verdict *v, unsigned flags);

/* Resets t's (policy, key) through the core (reset_start, which says when
 * reply is called). Takes t->key (left NULL). Cancel with reset_cancel. */
struct reset *admin_reset_start(struct core *core, struct admin_target *t, const char *peer,
                                reset_reply_fn reply, void *ctx);

/* The answer to a reset: 200 {"policy","key","reset":true,"deleted"[,
 * "notified"]}, or 503 backend_unavailable with Retry-After: 1. Appends to
 * out; returns the status. */
int admin_render_reset(struct buf *out, const struct reset_result *res, unsigned flags);

#endif
