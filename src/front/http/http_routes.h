/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_routes.h: which path the HTTP front serves where, as one table
 * (http_routes.c):
 *
 *   POST /check     -> check.c (Bearer token when auth_token_file is set)
 *   POST /report    -> check.c, a report (usage charged after the answer,
 *                      check_json_parse_report; same token)
 *   POST /json      -> Envoy's rate limit service, envoyproxy/ratelimit's
 *                      JSON form (rls_json.c, rls.c; same token)
 *   any method /auth/<policy>[/...]
 *                   -> forward-auth (auth.c): one check, key from the
 *                      request; 200 or the policy's deny_status (same token)
 *   GET|HEAD|DELETE /v1/keys/<policy>/<key>
 *                   -> the admin API on keys (admin.c; same token)
 *   GET|HEAD /rlconfig[?format=json|text]
 *                   -> the Envoy domains as loaded (domains_dump.h), where
 *                      and as the admin API on keys is served
 *   GET  /healthz   -> 200 while the event loop runs
 *   GET  /readyz    -> 200 when the worker can take checks
 *   GET  /metrics   -> Prometheus text
 *   anything else   -> 404, or 405 with Allow for a known path
 *
 * A row names the role of the listening socket that serves it: the check
 * port (listen) has HTTP_ROLE_CHECKS, admin_listen HTTP_ROLE_ADMIN and
 * HTTP_ROLE_KEYS; without admin_listen, listen has HTTP_ROLE_ADMIN too, and
 * HTTP_ROLE_KEYS_IF_GUARDED: the admin API on keys (and /rlconfig) only while a token
 * guards it (auth_token_file) or the operator asked for it without one
 * (admin_on_listen), both read per request, so a reload applies them.
 * Otherwise anyone who may ask /check could reset their own counter.
 *
 * Owns the table and what each path does with a request; not the
 * connection (http.c), not the answers' bytes (response.c).
 */
#ifndef RATELIMITD_HTTP_ROUTES_H
#define RATELIMITD_HTTP_ROUTES_H

#include <stdint.h>

#include "front/http/http_parse.h"

#define HTTP_ROLE_CHECKS 1u          /* /check, /report, /json, /auth/: max_connections */
#define HTTP_ROLE_ADMIN 2u           /* /healthz, /readyz, /metrics */
#define HTTP_ROLE_KEYS 4u            /* /v1/keys/, /rlconfig */
#define HTTP_ROLE_KEYS_IF_GUARDED 8u /* those with a token or admin_on_listen */

/* A route's methods: a bit per enum http_method. */
#define HTTP_ROUTE_METHOD(m) ((uint64_t)1 << (m))
#define HTTP_ROUTE_ANY_METHOD UINT64_MAX

struct slot;
struct conn;

/* What a route does once its method (and for a guarded one, the drain and
 * the token) let the request through. */
typedef void http_route_fn(struct slot *s, const struct http_request *req);

struct http_route {
    const char *path;
    int prefix;        /* path is a prefix (/auth/<policy>...), not the whole path */
    unsigned role;     /* HTTP_ROLE_*: a socket with this role serves it */
    uint64_t methods;  /* HTTP_ROUTE_METHOD bits */
    const char *use;   /* the 405's message */
    const char *allow; /* the 405's Allow header */
    int guarded;       /* refused while draining (503) and without the token (401) */
    http_route_fn *start;
};

/* What a socket with socket_roles serves now: HTTP_ROLE_KEYS_IF_GUARDED
 * becomes HTTP_ROLE_KEYS while a token is configured (token) or the
 * operator opted in (admin_on_listen). */
unsigned http_routes_roles(unsigned socket_roles, int token, int admin_on_listen);

/* The row serving path on a socket with roles, or NULL (404). */
const struct http_route *http_routes_find(const char *path, unsigned roles);

/* Calls fn(route, arg) for every row of the table, in its order: for the
 * docs test, which holds ratelimitd(8)'s HTTP API to the paths served. */
void http_routes_foreach(void (*fn)(const struct http_route *r, void *arg), void *arg);

/* True if the row takes method. */
int http_route_allows(const struct http_route *r, enum http_method method);

/* Answers (or starts answering) req, read on c, in a new slot. */
void http_route(struct conn *c, const struct http_request *req);

#endif
