/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.h: the forward-auth front's decoding: a gateway's subrequest
 * `/auth/<policy>[/<anything>]`, any method, becomes one check of that
 * policy, its key built from the request by the policy's `key:` template
 * (key_template.h, client_ip.h) and its cost from `X-RateLimit-Cost`
 * (default 1). Any body is ignored. No I/O: http_routes.c routes and answers,
 * check.c decides.
 */
#ifndef RATELIMITD_AUTH_H
#define RATELIMITD_AUTH_H

#include "config/config.h"
#include "core/decision.h"
#include "core/request_error.h"
#include "front/http/http_parse.h"
#include "lib/client_ip.h"

#define AUTH_PATH_PREFIX "/auth/"

enum auth_outcome {
    AUTH_CHECK, /* *out holds the check to decide */
    AUTH_SKIP,  /* the key lacks a part and missing_key is skip: allow, count nothing */
    AUTH_ERROR, /* *err says what to answer: 404 unknown policy, 400 bad cost or key */
};

/* What a skipped request is answered with (response_auth_skipped). */
struct auth_skip {
    const struct policy *policy; /* points into the config */
    const char *missing;         /* the absent part: "ip" or a header name */
};

/*
 * Decodes the request p (complete, path starting with AUTH_PATH_PREFIX)
 * from peer against cfg. On AUTH_CHECK fills *out (the caller owns it:
 * check_start or request_free), a request with one check and
 * use_deny_status set, so that a denial answers the policy's deny_status.
 * cfg must outlive *out and *skip.
 */
enum auth_outcome auth_parse(const struct config *cfg, const struct http_parse *p,
                             const struct client_addr *peer, struct check_request *out,
                             struct auth_skip *skip, struct request_error *err) RL_WUR;

#endif
