/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_routes.c: the HTTP front's route table (http_routes.c): which path
 * is served on which listening socket, which methods each takes, the 405's
 * message and Allow header, and which routes the drain and the token guard.
 * One row per case: what the front answers before any handler runs.
 */
#include <stdio.h>
#include <string.h>

#include "front/http/http_routes.h"
#include "tap.h"

#define CHECKS HTTP_ROLE_CHECKS
#define ADMIN HTTP_ROLE_ADMIN
#define KEYS HTTP_ROLE_KEYS
/* listen without admin_listen, with a token or admin_on_listen */
#define BOTH (HTTP_ROLE_CHECKS | HTTP_ROLE_ADMIN | HTTP_ROLE_KEYS)
/* listen without admin_listen, as the socket is opened (http.c) */
#define LISTEN (HTTP_ROLE_CHECKS | HTTP_ROLE_ADMIN | HTTP_ROLE_KEYS_IF_GUARDED)

struct route_case {
    const char *path;
    unsigned roles; /* of the socket the request came on */
    enum http_method method;
    /* "404"; "405 <use> | <Allow>"; or "<row's path> guarded|open" */
    const char *want;
};

static const struct route_case cases[] = {
    /* The check port without admin_listen, when guarded by a token or
     * with admin_on_listen, serves everything. */
    {"/check", BOTH, HTTP_POST, "/check guarded"},
    {"/check", BOTH, HTTP_GET, "405 use POST on /check | POST"},
    {"/json", BOTH, HTTP_POST, "/json guarded"},
    {"/json", BOTH, HTTP_PUT, "405 use POST on /json | POST"},
    {"/auth/api", BOTH, HTTP_GET, "/auth/ guarded"},
    {"/auth/api/x/y", BOTH, HTTP_PATCH, "/auth/ guarded"},
    {"/auth/", BOTH, HTTP_OPTIONS, "/auth/ guarded"},
    {"/v1/keys/api/k", BOTH, HTTP_GET, "/v1/keys/ guarded"},
    {"/v1/keys/api/k", BOTH, HTTP_HEAD, "/v1/keys/ guarded"},
    {"/v1/keys/api/k", BOTH, HTTP_DELETE, "/v1/keys/ guarded"},
    {"/v1/keys/api/k", BOTH, HTTP_POST, "405 use GET, HEAD or DELETE | GET, HEAD, DELETE"},
    {"/healthz", BOTH, HTTP_GET, "/healthz open"},
    {"/readyz", BOTH, HTTP_HEAD, "/readyz open"},
    {"/metrics", BOTH, HTTP_GET, "/metrics open"},
    {"/metrics", BOTH, HTTP_POST, "405 use GET | GET, HEAD"},
    {"/healthz", BOTH, HTTP_DELETE, "405 use GET | GET, HEAD"},
    /* Exact paths are exact; prefixes need their slash. */
    {"/ui", BOTH, HTTP_GET, "404"},
    {"/index.html", BOTH, HTTP_GET, "404"},
    {"/checks", BOTH, HTTP_POST, "404"},
    {"/check/", BOTH, HTTP_POST, "404"},
    {"/auth", BOTH, HTTP_GET, "404"},
    {"/v1/keys", BOTH, HTTP_GET, "404"},
    {"/metrics/", BOTH, HTTP_GET, "404"},
    {"/HEALTHZ", BOTH, HTTP_GET, "404"},
    /* Without either, not the admin API on keys: anyone who may ask
     * /check could reset their own counter. */
    {"/v1/keys/api/k", LISTEN, HTTP_DELETE, "404"},
    {"/v1/keys/api/k", LISTEN, HTTP_GET, "404"},
    {"/healthz", LISTEN, HTTP_GET, "/healthz open"},
    {"/check", LISTEN, HTTP_POST, "/check guarded"},
    /* With admin_listen, the check port serves the decisions only... */
    {"/check", CHECKS, HTTP_POST, "/check guarded"},
    {"/auth/api", CHECKS, HTTP_GET, "/auth/ guarded"},
    {"/healthz", CHECKS, HTTP_GET, "404"},
    {"/metrics", CHECKS, HTTP_POST, "404"},
    {"/v1/keys/api/k", CHECKS, HTTP_GET, "404"},
    /* ...and admin_listen the admin paths only. */
    {"/healthz", ADMIN | KEYS, HTTP_GET, "/healthz open"},
    {"/readyz", ADMIN | KEYS, HTTP_GET, "/readyz open"},
    {"/metrics", ADMIN | KEYS, HTTP_GET, "/metrics open"},
    {"/v1/keys/api/k", ADMIN | KEYS, HTTP_DELETE, "/v1/keys/ guarded"},
    {"/check", ADMIN | KEYS, HTTP_POST, "404"},
    {"/json", ADMIN | KEYS, HTTP_GET, "404"},
    {"/auth/api", ADMIN | KEYS, HTTP_GET, "404"},
    /* The status page is where the keys are, without the token (it asks
     * for it); its JSON is guarded as the keys are. */
    {"/", ADMIN | KEYS, HTTP_GET, "/ open"},
    {"/ui/", ADMIN | KEYS, HTTP_GET, "/ui/ open"},
    {"/favicon.svg", ADMIN | KEYS, HTTP_GET, "/favicon.svg open"},
    {"/", ADMIN | KEYS, HTTP_POST, "405 use GET | GET, HEAD"},
    {"/v1/status", ADMIN | KEYS, HTTP_GET, "/v1/status guarded"},
    {"/v1/rates", ADMIN | KEYS, HTTP_HEAD, "/v1/rates guarded"},
    {"/", BOTH, HTTP_GET, "/ open"},
    {"/", LISTEN, HTTP_GET, "404"},
    {"/v1/status", LISTEN, HTTP_GET, "404"},
    {"/", CHECKS, HTTP_GET, "404"},
};

static void outcome(const struct route_case *c, char *out, size_t outlen)
{
    const struct http_route *r = http_routes_find(c->path, c->roles);
    if (!r)
        snprintf(out, outlen, "404");
    else if (!http_route_allows(r, c->method))
        snprintf(out, outlen, "405 %s | %s", r->use ? r->use : "(null)",
                 r->allow ? r->allow : "(null)");
    else
        snprintf(out, outlen, "%s %s", r->path, r->guarded ? "guarded" : "open");
}

int main(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct route_case *c = &cases[i];
        char got[128];
        outcome(c, got, sizeof got);
        is_str(got, c->want, "%s on roles %u, method %d", c->path, c->roles, (int)c->method);
    }
    /* Every row has a start, and a 405 text wherever it refuses a method. */
    const char *paths[] = {"/check",   "/json",   "/auth/x", "/v1/keys/x",
                           "/healthz", "/readyz", "/metrics"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        const struct http_route *r = http_routes_find(paths[i], BOTH);
        ok(r && r->start && (r->methods == HTTP_ROUTE_ANY_METHOD || (r->use && r->allow)),
           "%s: a start, and a 405 message and Allow", paths[i]);
    }
    /* The keys on listen: only with a token or admin_on_listen. */
    is_int((int)http_routes_roles(LISTEN, 0, 0), (int)LISTEN, "listen: no keys without either");
    is_int((int)http_routes_roles(LISTEN, 1, 0), (int)(LISTEN | KEYS), "listen: keys with a token");
    is_int((int)http_routes_roles(LISTEN, 0, 1), (int)(LISTEN | KEYS),
           "listen: keys with admin_on_listen");
    is_int((int)http_routes_roles(CHECKS, 1, 1), (int)CHECKS,
           "listen with admin_listen: never the keys");
    is_int((int)http_routes_roles(ADMIN | KEYS, 0, 0), (int)(ADMIN | KEYS),
           "admin_listen: the keys, token or not");
    /* A method past the mask's bits is taken only by an every-method row. */
    const struct http_route *auth = http_routes_find("/auth/x", BOTH);
    const struct http_route *check = http_routes_find("/check", BOTH);
    ok(auth && http_route_allows(auth, (enum http_method)70), "every method: even an unknown one");
    ok(check && !http_route_allows(check, (enum http_method)70), "/check: not an unknown one");
    return tap_done();
}
