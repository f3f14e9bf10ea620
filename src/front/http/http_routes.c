/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_routes.c: the HTTP front's route table and what each path does
 * (http_routes.h): a request read on a connection (http.c) is matched to
 * one row by its path and the role of the socket it came on; the row says
 * which methods it takes (405 with its Allow header otherwise), whether a
 * drain and the bearer token guard it, and which start answers it.
 *
 * Owns the table, the order of the guards, and the bridge from a request
 * to the core (check.c, rls.c, admin.c) and back into the request's slot;
 * not the connection (http.c), not the answers' bytes (response.c,
 * admin.c).
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/domains_dump.h"
#include "core/check.h"
#include "core/metrics.h"
#include "core/override_change.h"
#include "core/override_json.h"
#include "core/rate_headers.h"
#include "core/rates.h"
#include "core/rls.h"
#include "front/http/admin.h"
#include "front/http/admin_overrides.h"
#include "front/http/admin_top.h"
#include "front/http/auth.h"
#include "front/http/check_json.h"
#include "front/http/http_conn.h"
#include "front/http/http_routes.h"
#include "front/http/lease_json.h"
#include "front/http/response.h"
#include "front/http/rls_json.h"
#include "front/http/ui_page.h"
#include "lib/buf.h"
#include "lib/client_ip.h"
#include "lib/json_out.h"
#include "lib/sha1.h"

static const char metrics_type[] = "text/plain; version=0.0.4; charset=utf-8";

/* ---- the decisions ---- */

static void on_check_reply(void *ctx, const struct verdict *v)
{
    struct slot *s = ctx;
    s->check = NULL;
    http_close_if_draining(s);
    http_slot_answered(s, response_verdict(&s->out, v, s->flags));
}

/* True if the request carries "Authorization: Bearer <token>" with the
 * configured token (or none is configured: then the headers are not
 * searched, a walk the hot path need not pay). */
static int authorized(const struct conn *c)
{
    if (!c->h->l.token)
        return 1;
    const char *v = http_parse_header(&c->parse, "Authorization");
    return listener_bearer_ok(&c->h->l, v, v ? strlen(v) : 0);
}

typedef int check_parse_fn(const struct config *cfg, const char *body, size_t len,
                           struct check_request *out, struct request_error *err);

/* A body decoded by parse, then through the core. */
static void start_parsed(struct slot *s, const struct http_request *req, check_parse_fn *parse)
{
    struct core *core = s->c->h->host->core;
    struct check_request creq;
    struct request_error rerr;
    if (parse(core->config, req->body, req->body_len, &creq, &rerr) < 0) {
        http_answer_error(s, rerr.code, rerr.message, NULL, NULL);
        return;
    }
    struct check *ch = check_start(core, &creq, on_check_reply, s);
    if (s->state == SLOT_WAITING)
        s->check = ch;
}

static void start_check(struct slot *s, const struct http_request *req)
{
    start_parsed(s, req, check_json_parse);
}

/* POST /report: usage charged after the answer (check_json_parse_report). */
static void start_report(struct slot *s, const struct http_request *req)
{
    start_parsed(s, req, check_json_parse_report);
}

static void start_auth(struct slot *s, const struct http_request *req)
{
    struct conn *c = s->c;
    struct core *core = c->h->host->core;
    struct check_request creq;
    struct auth_skip skip;
    struct request_error rerr;
    (void)req; /* auth_parse reads the parser itself: it needs every header */
    switch (auth_parse(core->config, &c->parse, &c->peer, &creq, &skip, &rerr)) {
    case AUTH_ERROR:
        http_answer_error(s, rerr.code, rerr.message, NULL, NULL);
        return;
    case AUTH_SKIP:
        http_close_if_draining(s);
        response_auth_skipped(&s->out, skip.policy->name, skip.missing, s->flags);
        http_slot_ready(s, 200);
        return;
    case AUTH_CHECK:
        break;
    }
    struct check *ch = check_start(core, &creq, on_check_reply, s);
    if (s->state == SLOT_WAITING)
        s->check = ch;
}

static void on_rls_reply(void *ctx, const struct rls_answer *a)
{
    struct slot *s = ctx;
    s->rls = NULL;
    http_close_if_draining(s);
    http_slot_answered(s, response_rls(&s->out, a, s->flags));
}

/* POST /json: envoyproxy/ratelimit's JSON form of ShouldRateLimit. */
static void start_json(struct slot *s, const struct http_request *req)
{
    struct core *core = s->c->h->host->core;
    struct rls_json j;
    struct request_error rerr;
    struct rls_call *call;
    if (rls_json_parse(req->body, req->body_len, &j, &rerr) < 0) {
        metrics_rls_request(core->metrics, METRICS_RLS_JSON, METRICS_RLS_INVALID);
        http_answer_error(s, rerr.code, rerr.message, NULL, NULL);
        return;
    }
    int rc = rls_start(core, &j.req, on_rls_reply, s, &call, &rerr);
    rls_json_free(&j); /* rls_start reads the request only while it runs */
    if (rc < 0)
        http_answer_error(s, rerr.code, rerr.message, NULL, NULL);
    else if (s->state == SLOT_WAITING)
        s->rls = call;
}

/* ---- concurrency leases (core/lease.h) ---- */

static void on_lease_reply(void *ctx, const struct lease_result *res)
{
    struct slot *s = ctx;
    s->lease = NULL;
    http_close_if_draining(s);
    http_slot_answered(s, lease_json_render(&s->out, res, s->flags));
}

/* POST /release and POST /renew: {"leases": [ids]}. */
static void start_lease(struct slot *s, const struct http_request *req, int renew)
{
    struct core *core = s->c->h->host->core;
    struct request_error rerr;
    char **ids;
    size_t n;
    if (lease_json_parse(req->body, req->body_len, &ids, &n, &rerr) < 0) {
        http_answer_error(s, rerr.code, rerr.message, NULL, NULL);
        return;
    }
    struct lease_call *l = lease_start(core, renew, ids, n, on_lease_reply, s);
    if (s->state == SLOT_WAITING)
        s->lease = l;
}

static void start_release(struct slot *s, const struct http_request *req)
{
    start_lease(s, req, 0);
}

static void start_renew(struct slot *s, const struct http_request *req)
{
    start_lease(s, req, 1);
}

/* ---- the admin API on keys (admin.h) ---- */

static void on_inspect_reply(void *ctx, const struct verdict *v)
{
    struct slot *s = ctx;
    s->check = NULL;
    http_slot_answered(s, admin_render_inspect(&s->out, v, s->flags));
}

static void on_reset_reply(void *ctx, const struct reset_result *res)
{
    struct slot *s = ctx;
    s->reset = NULL;
    http_slot_answered(s, admin_render_reset(&s->out, res, s->flags));
}

/* The client's address, for the log line of a change. */
static const char *peer_of(const struct conn *c, char peer[CLIENT_IP_TEXT])
{
    if (c->peer.family == AF_UNSPEC)
        snprintf(peer, CLIENT_IP_TEXT, "unix");
    else
        client_ip_format(&c->peer, peer);
    return peer;
}

/* GET or HEAD looks at a key (a dry run through the core), DELETE resets it. */
static void start_keys(struct slot *s, const struct http_request *req)
{
    struct core *core = s->c->h->host->core;
    struct admin_target t;
    struct request_error err;
    if (admin_parse_path(core->config, req->path, &t, &err) < 0) {
        http_answer_error(s, err.code, err.message, NULL, NULL);
        return;
    }
    if (req->method != HTTP_DELETE) {
        struct check_request creq;
        admin_inspect_request(&t, &creq);
        struct check *ch = check_start(core, &creq, on_inspect_reply, s);
        if (s->state == SLOT_WAITING)
            s->check = ch;
        return;
    }
    char peer[CLIENT_IP_TEXT];
    struct reset *r = admin_reset_start(core, &t, peer_of(s->c, peer), on_reset_reply, s);
    if (s->state == SLOT_WAITING)
        s->reset = r;
}

/* ---- the admin API on run-time overrides (admin_overrides.h) ---- */

static void on_override_reply(void *ctx, const struct override_change_result *res)
{
    struct slot *s = ctx;
    s->ovr = NULL;
    http_slot_answered(s, admin_overrides_render_change(&s->out, res, s->flags));
}

/* Who made a change, for its log line and its "by": the token's identity
 * is the start of its SHA-1 (never the token), "none" without one. */
static void token_identity(const struct conn *c, char out[24])
{
    char hex[41];
    if (!c->h->l.token) {
        snprintf(out, 24, "none");
        return;
    }
    sha1_hex(c->h->l.token, c->h->l.token_len, hex);
    snprintf(out, 24, "sha1:%.12s", hex);
}

/* GET /v1/overrides/<policy>: a page, from ?cursor= for ?limit=. */
static void list_overrides(struct slot *s, const struct http_request *req)
{
    struct core *core = s->c->h->host->core;
    const char *name = req->path + strlen(ADMIN_OVERRIDES_PREFIX);
    const struct policy *p = config_find_policy(core->config, name);
    if (!p) {
        http_answer_error(s, RC_UNKNOWN_POLICY_IN_PATH, "no such policy", NULL, NULL);
        return;
    }
    size_t clen = 0, llen = 0;
    const char *cur = http_query_param(req->url, "cursor", &clen);
    const char *lim = http_query_param(req->url, "limit", &llen);
    char after[POLICY_KEY_MAX], num[16], why[RL_ERRLEN];
    long alen = cur ? admin_overrides_cursor(cur, clen, after) : 0;
    int64_t max = ADMIN_OVERRIDES_PAGE_DEFAULT;
    snprintf(num, sizeof num, "%.*s", (int)(llen < 15 ? llen : 15), lim ? lim : "");
    if (alen < 0) {
        http_answer_error(s, RC_INVALID_REQUEST, "cursor is not one this API gave", NULL, NULL);
        return;
    }
    if (lim && (llen > 15 ||
                util_parse_int64(num, 1, ADMIN_OVERRIDES_PAGE_MAX, &max, why, sizeof why) < 0)) {
        http_answer_error(s, RC_INVALID_REQUEST, "limit must be an integer from 1 to 1000", NULL,
                          NULL);
        return;
    }
    struct override **v;
    size_t n;
    int more;
    overrides_page(core->overrides, p->name, cur ? after : NULL, (size_t)alen, (size_t)max,
                   util_realtime_us(), &v, &n, &more);
    http_slot_answered(s, admin_overrides_render_page(&s->out, p->name, v, n, more, s->flags));
    for (size_t i = 0; i < n; i++)
        override_free(v[i]);
    free(v);
}

/* PUT sets a key's override, GET (HEAD) reads it, DELETE removes it. */
static void start_overrides(struct slot *s, const struct http_request *req)
{
    struct core *core = s->c->h->host->core;
    if (!strchr(req->path + strlen(ADMIN_OVERRIDES_PREFIX), '/') && req->method != HTTP_PUT &&
        req->method != HTTP_DELETE) {
        list_overrides(s, req);
        return;
    }
    struct admin_target t;
    struct request_error err;
    if (admin_parse_path_in(core->config, ADMIN_OVERRIDES_PREFIX, req->path, &t, &err) < 0) {
        http_answer_error(s, err.code, err.message, NULL, NULL);
        return;
    }
    int64_t now = util_realtime_us();
    struct override *o = NULL;
    if (req->method == HTTP_GET || req->method == HTTP_HEAD) {
        o = overrides_get(core->overrides, t.base->name, t.key, t.keylen, now);
        http_slot_answered(s, admin_overrides_render_one(&s->out, o, s->flags));
        override_free(o);
        free(t.key);
        return;
    }
    if (req->method == HTTP_PUT && override_body_parse(t.base, t.policy, t.key, t.keylen, req->body,
                                                       req->body_len, now, &o, &err) < 0) {
        http_answer_error(s, err.code, err.message, NULL, NULL);
        free(t.key);
        return;
    }
    char peer[CLIENT_IP_TEXT], token[24];
    token_identity(s->c, token);
    struct override_change *ch = override_change_start(
        core, o, t.base->name, t.key, t.keylen, peer_of(s->c, peer), token, on_override_reply, s);
    free(t.key);
    if (s->state == SLOT_WAITING)
        s->ovr = ch;
}

/* ---- the heaviest keys (admin_top.h) ---- */

static void on_top_reply(void *ctx, const struct top_result *r)
{
    struct slot *s = ctx;
    s->top = NULL;
    http_slot_answered(s, admin_render_top(&s->out, r, s->flags));
}

static void start_top(struct slot *s, const struct http_request *req)
{
    struct core *core = s->c->h->host->core;
    struct admin_top_query q;
    struct request_error err;
    if (admin_top_parse(core->config, req->path, req->url, &q, &err) < 0) {
        http_answer_error(s, err.code, err.message, NULL, NULL);
        return;
    }
    struct top_query *t = top_query_start(core, q.policy, q.by, q.window, q.n, on_top_reply, s);
    if (s->state == SLOT_WAITING)
        s->top = t;
}

/* ---- health and metrics ---- */

static void start_healthz(struct slot *s, const struct http_request *req)
{
    (void)req;
    http_answer_body(s, 200, NULL, "{\"status\":\"ok\"}");
}

static void start_readyz(struct slot *s, const struct http_request *req)
{
    (void)req;
    const struct front_host *h = s->c->h->host;
    const char *reason = h->unready_reason(h->arg);
    const char *detail = h->ready_detail(h->arg, reason == NULL);
    struct buf b = {0};
    struct json_out j = json_out_start(&b);
    json_out_begin(&j, '{');
    json_out_key(&j, "status");
    json_out_cstr(&j, reason ? "unready" : "ready");
    if (reason) {
        json_out_key(&j, "reason");
        json_out_cstr(&j, reason);
    }
    /* A draining daemon's detail would be the backend's, beside the point. */
    if (detail && (!reason || strcmp(reason, "redis_unavailable") == 0)) {
        json_out_key(&j, reason ? "detail" : "decides_by");
        json_out_cstr(&j, detail);
    }
    json_out_end(&j, '}');
    buf_append_char(&b, '\0');
    http_answer_body(s, reason ? 503 : 200, NULL, b.data);
    buf_free(&b);
}

static void start_metrics(struct slot *s, const struct http_request *req)
{
    (void)req;
    char *text = s->c->h->host->metrics_text(s->c->h->host->arg);
    http_answer_body(s, 200, metrics_type, text);
    free(text);
}

/* ---- the loaded configuration (envoyproxy/ratelimit's /rlconfig) ---- */

/* GET /rlconfig: the Envoy domains as understood (domains_dump.h), as
 * text, or as JSON with ?format=json or an Accept naming application/json
 * (?format=text wins over Accept). */
static void start_rlconfig(struct slot *s, const struct http_request *req)
{
    const struct config *cfg = s->c->h->host->core->config;
    size_t flen = 0;
    const char *format = http_query_param(req->url, "format", &flen);
    int json;
    if (format && flen == 4 && strncmp(format, "json", 4) == 0) {
        json = 1;
    } else if (format && flen == 4 && strncmp(format, "text", 4) == 0) {
        json = 0;
    } else if (format) {
        http_answer_error(s, RC_INVALID_FORMAT, "format must be json or text", NULL, NULL);
        return;
    } else {
        const char *accept = http_parse_header(&s->c->parse, "Accept");
        json = accept && strstr(accept, "application/json") != NULL;
    }
    struct buf b = {0};
    if (json)
        domains_dump_json(cfg->domains, cfg->ndomains, &b);
    else
        domains_dump_text(cfg->domains, cfg->ndomains, &b);
    buf_append_char(&b, '\0');
    http_answer_body(s, 200, json ? NULL : "text/plain; charset=utf-8", b.data);
    buf_free(&b);
}

/* ---- the status page (docs/status-page.md) ---- */

/* GET / and /ui/: the page, without a token (it asks for one, for its JSON
 * calls), under a policy that runs its own inline blocks and nothing else. */
static void start_page(struct slot *s, const struct http_request *req)
{
    (void)req;
    struct rate_headers hs;
    rate_headers_init(&hs);
    rate_headers_add_ref(&hs, "Content-Security-Policy", ui_page_csp);
    http_close_if_draining(s);
    response_body_headers(&s->out, 200, "text/html; charset=utf-8", &hs, ui_page_html, ui_page_len,
                          s->flags);
    http_slot_ready(s, 200);
}

static void start_icon(struct slot *s, const struct http_request *req)
{
    (void)req;
    http_answer_body(s, 200, "image/svg+xml", ui_icon_svg);
}

static void start_status(struct slot *s, const struct http_request *req)
{
    (void)req;
    const struct front_host *h = s->c->h->host;
    struct buf b = {0};
    h->status_json(h->arg, &b);
    buf_append_char(&b, '\0');
    http_answer_body(s, 200, NULL, b.data);
    buf_free(&b);
}

/* GET /v1/rates?seconds=N: 1 to RATES_SECONDS, 300 by default. */
static void start_rates(struct slot *s, const struct http_request *req)
{
    const struct front_host *h = s->c->h->host;
    size_t len = 0;
    const char *v = http_query_param(req->url, "seconds", &len);
    long seconds = RATES_SECONDS;
    if (v) {
        char num[8];
        char *end;
        snprintf(num, sizeof num, "%.*s", (int)(len < sizeof num ? len : sizeof num - 1), v);
        seconds = strtol(num, &end, 10);
        if (len == 0 || len >= sizeof num || *end || seconds < 1 || seconds > RATES_SECONDS) {
            http_answer_error(s, RC_INVALID_QUERY, "seconds must be a whole number from 1 to 300",
                              NULL, NULL);
            return;
        }
    }
    struct buf b = {0};
    h->rates_json(h->arg, (int)seconds, &b);
    buf_append_char(&b, '\0');
    http_answer_body(s, 200, NULL, b.data);
    buf_free(&b);
}

/* ---- the table ---- */

#define M(m) HTTP_ROUTE_METHOD(HTTP_##m)

/* The one place that says which path is served where. Paths do not
 * overlap, so the order of the rows does not matter. */
static const struct http_route routes[] = {
    {"/check", 0, HTTP_ROLE_CHECKS, M(POST), "use POST on /check", "POST", 1, start_check},
    {"/json", 0, HTTP_ROLE_CHECKS, M(POST), "use POST on /json", "POST", 1, start_json},
    {"/report", 0, HTTP_ROLE_CHECKS, M(POST), "use POST on /report", "POST", 1, start_report},
    {"/release", 0, HTTP_ROLE_CHECKS, M(POST), "use POST on /release", "POST", 1, start_release},
    {"/renew", 0, HTTP_ROLE_CHECKS, M(POST), "use POST on /renew", "POST", 1, start_renew},
    /* Gateways ask with the original request's method (Envoy ext_authz,
     * Traefik) and the body is never read: every method is a question. */
    {AUTH_PATH_PREFIX, 1, HTTP_ROLE_CHECKS, HTTP_ROUTE_ANY_METHOD, NULL, NULL, 1, start_auth},
    {ADMIN_KEYS_PREFIX, 1, HTTP_ROLE_KEYS, M(GET) | M(HEAD) | M(DELETE), "use GET, HEAD or DELETE",
     "GET, HEAD, DELETE", 1, start_keys},
    {ADMIN_OVERRIDES_PREFIX, 1, HTTP_ROLE_KEYS, M(GET) | M(HEAD) | M(PUT) | M(DELETE),
     "use GET, HEAD, PUT or DELETE", "GET, HEAD, PUT, DELETE", 1, start_overrides},
    {ADMIN_TOP_PREFIX, 1, HTTP_ROLE_KEYS, M(GET) | M(HEAD), "use GET", "GET, HEAD", 1, start_top},
    {"/healthz", 0, HTTP_ROLE_ADMIN, M(GET) | M(HEAD), "use GET", "GET, HEAD", 0, start_healthz},
    {"/readyz", 0, HTTP_ROLE_ADMIN, M(GET) | M(HEAD), "use GET", "GET, HEAD", 0, start_readyz},
    {"/metrics", 0, HTTP_ROLE_ADMIN, M(GET) | M(HEAD), "use GET", "GET, HEAD", 0, start_metrics},
    /* Where and as the keys API is: it shows every limit. */
    {"/rlconfig", 0, HTTP_ROLE_KEYS, M(GET) | M(HEAD), "use GET", "GET, HEAD", 1, start_rlconfig},
    /* The status page's JSON shows what the keys API shows; the page
     * itself holds nothing and must load to ask for the token. */
    {"/v1/status", 0, HTTP_ROLE_KEYS, M(GET) | M(HEAD), "use GET", "GET, HEAD", 1, start_status},
    {"/v1/rates", 0, HTTP_ROLE_KEYS, M(GET) | M(HEAD), "use GET", "GET, HEAD", 1, start_rates},
    {"/", 0, HTTP_ROLE_KEYS, M(GET) | M(HEAD), "use GET", "GET, HEAD", 0, start_page},
    {"/ui/", 0, HTTP_ROLE_KEYS, M(GET) | M(HEAD), "use GET", "GET, HEAD", 0, start_page},
    {"/favicon.svg", 0, HTTP_ROLE_KEYS, M(GET) | M(HEAD), "use GET", "GET, HEAD", 0, start_icon},
};

unsigned http_routes_roles(unsigned socket_roles, int token, int admin_on_listen)
{
    if ((socket_roles & HTTP_ROLE_KEYS_IF_GUARDED) && (token || admin_on_listen))
        socket_roles |= HTTP_ROLE_KEYS;
    return socket_roles;
}

const struct http_route *http_routes_find(const char *path, unsigned roles)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const struct http_route *r = &routes[i];
        if (!(r->role & roles))
            continue;
        if (r->prefix ? strncmp(path, r->path, strlen(r->path)) == 0 : strcmp(path, r->path) == 0)
            return r;
    }
    return NULL;
}

void http_routes_foreach(void (*fn)(const struct http_route *r, void *arg), void *arg)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        fn(&routes[i], arg);
}

int http_route_allows(const struct http_route *r, enum http_method method)
{
    if (r->methods == HTTP_ROUTE_ANY_METHOD)
        return 1;
    return (unsigned)method < 64 && (r->methods & HTTP_ROUTE_METHOD(method)) != 0;
}

/* The message of a 404 for path on a socket with socket_roles: where the
 * admin API is off for want of a guard, how to turn it on (the start-up
 * log says so too, but a client sees only this answer). */
static const char *not_found_message(const char *path, unsigned socket_roles)
{
    if ((socket_roles & HTTP_ROLE_KEYS_IF_GUARDED) && http_routes_find(path, HTTP_ROLE_KEYS))
        return "the admin API is off: listen has no auth_token_file to guard it; set "
               "admin_listen, auth_token_file or admin_on_listen: true";
    return "no such path";
}

/* The guards in their order: the method (405 with the row's Allow), then
 * for a guarded row a drain (503), then the bearer token (401); then the
 * row's start. */
void http_route(struct conn *c, const struct http_request *req)
{
    struct slot *s = http_slot_new(c);
    if (req->head)
        s->flags |= RESPONSE_HEAD;
    if (!req->keep_alive) {
        s->flags |= RESPONSE_CLOSE;
        c->closing = 1;
    } else if (req->http_minor == 0) {
        s->flags |= RESPONSE_KEEP_ALIVE;
    }
    unsigned roles = http_routes_roles(c->sock->roles, c->h->l.token != NULL,
                                       c->h->host->core->config->admin_on_listen);
    const struct http_route *r = c->over_limit ? NULL : http_routes_find(req->path, roles);
    if (c->over_limit)
        http_answer_error(s, RC_TOO_MANY_CONNECTIONS, "the daemon has too many connections",
                          "Retry-After", "1");
    else if (!r)
        http_answer_error(s, RC_NOT_FOUND, not_found_message(req->path, c->sock->roles), NULL,
                          NULL);
    else if (!http_route_allows(r, req->method))
        http_answer_error(s, RC_METHOD_NOT_ALLOWED, r->use, "Allow", r->allow);
    else if (r->guarded && !authorized(c))
        http_answer_error(s, RC_UNAUTHORIZED, "a valid Authorization: Bearer token is required",
                          "WWW-Authenticate", "Bearer");
    else
        r->start(s, req);
}
