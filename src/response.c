/*
 * response.c: JSON bodies and headers for every answer (jansson).
 *
 * The top-level figures and the headers come from one "binding" tier:
 * when denied, the denying tier with the longest wait (no finite wait counts
 * as longest); when allowed, the tier with the fewest remaining, ties broken
 * by the longest reset. Tiers of shadow checks never bind unless the request
 * has nothing else, since a shadow policy must not change what callers see.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "response.h"

static int64_t us_to_ms(int64_t us)
{
    return us <= 0 ? 0 : util_ceil_div(us, 1000);
}

static json_t *ms_or_null(int64_t us)
{
    return us < 0 ? json_null() : json_integer(us_to_ms(us));
}

/* json_pack returns NULL (and json_dumps then NULL) on invalid UTF-8: a
 * body that cannot be built becomes a fixed error, never a crash. */
static void finish(struct answer *ans, int status, json_t *body)
{
    ans->status = status;
    ans->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!ans->body) {
        ans->status = 500;
        ans->body = xstrdup("{\"error\":\"internal\",\"message\":\"the answer could not be "
                            "encoded\"}");
    }
}

/* Copies s into out (outlen > 0), replacing every byte that is not part of
 * a valid UTF-8 sequence with '?': messages quote callers' text, cut at a
 * byte count that may fall inside a character. */
static void utf8_clean(const char *s, char *out, size_t outlen)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p && o + 1 < outlen) {
        size_t n = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                                : (*p & 0xF8) == 0xF0 ? 4 : 0;
        size_t i = 1;
        while (i < n && (p[i] & 0xC0) == 0x80)
            i++;
        /* Overlong forms, surrogates and code points past U+10FFFF are
         * invalid too (jansson refuses them). */
        int bad = n == 0 || i < n || (n == 2 && *p < 0xC2) ||
                  (n == 3 && ((*p == 0xE0 && p[1] < 0xA0) || (*p == 0xED && p[1] >= 0xA0))) ||
                  (n == 4 && (*p > 0xF4 || (*p == 0xF0 && p[1] < 0x90) ||
                              (*p == 0xF4 && p[1] >= 0x90)));
        if (bad || o + n >= outlen) {
            out[o++] = '?';
            p++;
            continue;
        }
        memcpy(out + o, p, n);
        o += n;
        p += n;
    }
    out[o] = '\0';
}

void response_add_header(struct answer *ans, const char *name, const char *value)
{
    if (ans->nheaders >= RESPONSE_MAX_HEADERS)
        return;
    ans->headers[ans->nheaders].name = name;
    snprintf(ans->headers[ans->nheaders].value, sizeof ans->headers[0].value, "%s", value);
    ans->nheaders++;
}

static void add_header_int(struct answer *ans, const char *name, int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    response_add_header(ans, name, buf);
}

void response_error(int status, const char *code, const char *message, struct answer *ans)
{
    char clean[RL_ERRLEN * 2];
    utf8_clean(message, clean, sizeof clean);
    memset(ans, 0, sizeof *ans);
    finish(ans, status, json_pack("{s:s,s:s}", "error", code, "message", clean));
}

static json_t *tier_json(const struct tier *t, const struct tier_result *r)
{
    json_t *o = json_pack("{s:s,s:s,s:b,s:I,s:I,s:I,s:o}", "name", t->name, "algorithm",
                          policy_algorithm_name(t->algorithm), "allowed", r->allowed, "limit",
                          (json_int_t)r->limit, "remaining", (json_int_t)r->remaining, "reset_ms",
                          (json_int_t)us_to_ms(r->reset_us), "retry_after_ms",
                          ms_or_null(r->allowed ? 0 : r->retry_us));
    if (t->algorithm == ALG_LEAKY_BUCKET)
        json_object_set_new(o, "delay_ms", json_integer(us_to_ms(r->delay_us)));
    if (r->cost_exceeds_limit)
        json_object_set_new(o, "reason", json_string("cost_exceeds_limit"));
    return o;
}

static void decision(const struct check_request *req, const struct tier_result *results,
                     const struct decision_summary *sum, int local, struct answer *ans)
{
    memset(ans, 0, sizeof *ans);
    json_t *checks = json_array();
    const struct tier_result *r = results;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        const struct policy *p = c->policy;
        json_t *tiers = json_array();
        int check_allowed = 1;
        for (size_t j = 0; j < p->ntiers; j++, r++) {
            check_allowed &= r->allowed;
            json_array_append_new(tiers, tier_json(&p->tiers[j], r));
        }
        json_t *co = json_pack("{s:s,s:s%,s:b}", "policy", p->name, "key", c->key, c->keylen,
                               "allowed", check_allowed || p->shadow);
        if (p->shadow && !check_allowed)
            json_object_set_new(co, "shadow_denied", json_true());
        json_object_set_new(co, "tiers", tiers);
        json_array_append_new(checks, co);
    }

    const struct tier_result *bind = sum->binding;
    json_t *body = json_pack("{s:b,s:I,s:I,s:I,s:o}", "allowed", sum->allowed, "limit",
                             (json_int_t)bind->limit, "remaining", (json_int_t)bind->remaining,
                             "reset_ms", (json_int_t)us_to_ms(bind->reset_us), "retry_after_ms",
                             ms_or_null(sum->retry_us));
    if (sum->any_leaky)
        json_object_set_new(body, "delay_ms", json_integer(us_to_ms(sum->delay_us)));
    if (sum->shadow_denied)
        json_object_set_new(body, "shadow_denied", json_true());
    if (req->dry_run)
        json_object_set_new(body, "dry_run", json_true());
    if (local) {
        json_object_set_new(body, "degraded", json_true());
        json_object_set_new(body, "local", json_true());
    }
    json_object_set_new(body, "checks", checks);
    finish(ans, sum->allowed ? 200 : 429, body);

    add_header_int(ans, "X-RateLimit-Limit", bind->limit);
    add_header_int(ans, "X-RateLimit-Remaining", bind->remaining);
    add_header_int(ans, "X-RateLimit-Reset", util_ceil_div(us_to_ms(bind->reset_us), 1000));
    if (!sum->allowed && sum->retry_us >= 0) {
        int64_t s = util_ceil_div(us_to_ms(sum->retry_us), 1000);
        add_header_int(ans, "Retry-After", s < 1 ? 1 : s);
    }
}

static void unavailable(const struct check_request *req, const char *why, struct answer *ans)
{
    static const char *const mode_names[] = {
        [FAILURE_OPEN] = "open", [FAILURE_CLOSED] = "closed", [FAILURE_LOCAL] = "local"};
    memset(ans, 0, sizeof *ans);
    int closed = request_failure_mode(req) == FAILURE_CLOSED;
    json_t *checks = json_array();
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        json_array_append_new(checks, json_pack("{s:s,s:s%,s:s}", "policy", c->policy->name,
                                                "key", c->key, c->keylen, "failure_mode",
                                                mode_names[c->policy->failure_mode]));
    }
    if (closed) {
        finish(ans, 503,
               json_pack("{s:b,s:s,s:s,s:o}", "allowed", 0, "error", "backend_unavailable",
                         "message", why, "checks", checks));
        response_add_header(ans, "Retry-After", "1");
        return;
    }
    finish(ans, 200,
           json_pack("{s:b,s:b,s:s,s:o}", "allowed", 1, "degraded", 1, "message", why, "checks",
                     checks));
}

void response_verdict(const struct verdict *v, struct answer *ans)
{
    switch (v->kind) {
    case VERDICT_DECIDED:
    case VERDICT_LOCAL:
        decision(v->req, v->results, &v->sum, v->kind == VERDICT_LOCAL, ans);
        return;
    case VERDICT_UNAVAILABLE:
        unavailable(v->req, v->why, ans);
        return;
    case VERDICT_OVERLOADED:
        response_error(503, "overloaded", "too many checks in flight", ans);
        response_add_header(ans, "Retry-After", "1");
        return;
    }
}

void answer_free(struct answer *ans)
{
    free(ans->body);
    ans->body = NULL;
}
