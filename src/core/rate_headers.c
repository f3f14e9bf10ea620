/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rate_headers.c: the rate-limit header fields of a verdict
 * (rate_headers.h). Moved out of response.c so that the HTTP answers and
 * Envoy's response_headers_to_add (rls.c) come from one place.
 *
 * The fields follow the mode of the binding check's policy (policy.h enum
 * header_mode): X-RateLimit-*, the IETF RateLimit and RateLimit-Policy
 * structured fields, both or none; Retry-After always.
 */
#include <stdlib.h>
#include <string.h>

#include "core/rate_headers.h"

#define SF_INT_MAX 999999999999999LL /* RFC 9651 sf-integer: at most 15 digits */

void rate_headers_init(struct rate_headers *hs)
{
    hs->n = hs->used = hs->value_at = 0;
}

/* Appends to the value being written. Running out of space would mean the
 * bound in rate_headers.h is wrong: a broken invariant, not bad input. */
static void value_put(struct rate_headers *hs, const char *s, size_t len)
{
    if (len > RATE_HEADERS_SPACE - hs->used)
        abort();
    memcpy(hs->space + hs->used, s, len);
    hs->used += len;
}

static void value_put_str(struct rate_headers *hs, const char *s)
{
    value_put(hs, s, strlen(s));
}

static void value_put_int(struct rate_headers *hs, int64_t v)
{
    char s[UTIL_INT_CHARS];
    value_put(hs, s, util_format_int(s, v));
}

/* Ends the value being written as the value of header name. */
static void value_end(struct rate_headers *hs, const char *name)
{
    if (hs->n == RATE_HEADERS_MAX)
        abort(); /* RATE_HEADERS_MAX counts every header an answer can carry */
    hs->h[hs->n].name = name;
    hs->h[hs->n].value = hs->space + hs->value_at;
    hs->h[hs->n].len = hs->used - hs->value_at;
    hs->n++;
    hs->value_at = hs->used;
}

static void add_header_int(struct rate_headers *hs, const char *name, int64_t v)
{
    value_put_int(hs, v);
    value_end(hs, name);
}

void rate_headers_add_ref(struct rate_headers *hs, const char *name, const char *value)
{
    if (hs->n == RATE_HEADERS_MAX)
        abort(); /* as in value_end */
    hs->h[hs->n].name = name;
    hs->h[hs->n].value = value;
    hs->h[hs->n].len = strlen(value);
    hs->n++;
}

int64_t rate_headers_ms(int64_t us)
{
    return us <= 0 ? 0 : util_ceil_div(us, 1000);
}

/* Seconds, rounded up, for headers: the same rounding as the JSON's
 * milliseconds, then up again (1.2 s is 2, 0 stays 0). */
static int64_t us_to_s(int64_t us)
{
    return util_ceil_div(rate_headers_ms(us), 1000);
}

static int wants_x(enum header_mode m)
{
    return m == HEADERS_X_RATELIMIT || m == HEADERS_BOTH;
}

static int wants_ietf(enum header_mode m)
{
    return m == HEADERS_IETF || m == HEADERS_BOTH;
}

/* ;<key>=<v> with v held to the sf-integer range (valid tiers never reach
 * its top: a limit times its window in microseconds stays below 2^53). */
static void sf_param(struct rate_headers *hs, const char *key, int64_t v)
{
    value_put(hs, ";", 1);
    value_put_str(hs, key);
    value_put(hs, "=", 1);
    value_put_int(hs, v < 0 ? 0 : v > SF_INT_MAX ? SF_INT_MAX : v);
}

/* The sf-string naming a tier: "<policy>" for a one-tier policy, else
 * "<policy>/<tier>". Names are [A-Za-z0-9_.-] (and "@envoy" for Envoy's
 * own limits, domains.h), so nothing needs escaping and '/' cannot be part
 * of either name. */
static void sf_tier_name(struct rate_headers *hs, const struct policy *p, const struct tier *t)
{
    value_put(hs, "\"", 1);
    value_put_str(hs, p->name);
    if (p->ntiers > 1) {
        value_put(hs, "/", 1);
        value_put_str(hs, t->name);
    }
    value_put(hs, "\"", 1);
}

/* RateLimit-Policy: every tier of p, "<name>";q=<limit>;w=<window s>. q is
 * the configured limit per window for every algorithm (for the bucket
 * algorithms the refill per window, not the burst), w the window rounded up
 * to whole seconds (so at least 1; none for concurrency). Known from the
 * config alone. A calendar tier has no w either: its windows differ in
 * length, and the draft makes w optional; RateLimit's t gives its next
 * boundary. */
static void ietf_policy(struct rate_headers *hs, const struct policy *p)
{
    for (size_t i = 0; i < p->ntiers; i++) {
        if (i > 0)
            value_put(hs, ", ", 2);
        sf_tier_name(hs, p, &p->tiers[i]);
        sf_param(hs, "q", p->tiers[i].limit);
        /* concurrency has no window (units in flight, not per time): no
         * w, which the draft lets a policy leave out. */
        if (p->tiers[i].window_us > 0 && p->tiers[i].calendar.unit == CALENDAR_NONE)
            sf_param(hs, "w", util_ceil_div(p->tiers[i].window_us, 1000000));
    }
    value_end(hs, "RateLimit-Policy");
}

/* RateLimit: the binding tier, "<name>";r=<remaining>;t=<seconds>. */
static void ietf_limit(struct rate_headers *hs, const struct policy *p, const struct tier *t,
                       int64_t remaining, int64_t reset_s)
{
    sf_tier_name(hs, p, t);
    sf_param(hs, "r", remaining);
    sf_param(hs, "t", reset_s);
    value_end(hs, "RateLimit");
}

/* The tier (config) of result r, one of results. */
static const struct tier *tier_of(const struct check_request *req,
                                  const struct tier_result *results, const struct tier_result *r,
                                  const struct check_item *c)
{
    size_t idx = (size_t)(r - results);
    for (const struct check_item *i = req->checks; i < c; i++)
        idx -= i->policy->ntiers;
    return &c->policy->tiers[idx];
}

/*
 * The headers of a decided (or local) answer, in the binding check's
 * policy's mode. Retry-After is sent in every mode (it is HTTP's own field).
 * t of RateLimit is the Retry-After value when denied with a finite wait,
 * so both name the same moment (as the draft asks), else the binding
 * tier's reset, as X-RateLimit-Reset.
 */
static void decision_headers(struct rate_headers *hs, const struct verdict *v, int envoy)
{
    const struct decision_summary *sum = &v->sum;
    const struct tier_result *bind = sum->binding;
    const struct check_item *c = decision_check_of(v->req, v->results, bind);
    enum header_mode mode = c->policy->headers;
    if (envoy && mode == HEADERS_NONE)
        return;
    int64_t reset_s = us_to_s(bind->reset_us);
    int64_t retry_s = 0;
    if (!sum->allowed && sum->retry_us >= 0) {
        retry_s = us_to_s(sum->retry_us);
        if (retry_s < 1)
            retry_s = 1;
    }
    if (wants_x(mode)) {
        add_header_int(hs, "X-RateLimit-Limit", bind->limit);
        add_header_int(hs, "X-RateLimit-Remaining", bind->remaining);
        add_header_int(hs, "X-RateLimit-Reset", reset_s);
        if (sum->any_leaky && rate_headers_ms(sum->delay_us) > 0)
            add_header_int(hs, "X-RateLimit-Delay-Ms", rate_headers_ms(sum->delay_us));
    }
    if (retry_s > 0)
        add_header_int(hs, "Retry-After", retry_s);
    if (wants_ietf(mode)) {
        ietf_policy(hs, c->policy);
        ietf_limit(hs, c->policy, tier_of(v->req, v->results, bind, c), bind->remaining,
                   retry_s > 0 ? retry_s : reset_s);
    }
}

/*
 * The headers of an answer given without any state (failure_mode open or
 * closed, overloaded): what the config alone tells, for the tier that
 * would bind when nothing is known (decision_unknown_binding): its
 * capacity as X-RateLimit-Limit (what `limit` means in decided answers),
 * and its policy's RateLimit-Policy. No Remaining, Reset or RateLimit:
 * they would be guesses. Retry-After: 1 when the request is refused.
 */
static void config_headers(struct rate_headers *hs, const struct check_request *req, int refused,
                           int envoy)
{
    const struct tier *t;
    const struct check_item *c = decision_unknown_binding(req, &t);
    enum header_mode mode = c->policy->headers;
    if (envoy && mode == HEADERS_NONE)
        return;
    if (wants_x(mode))
        add_header_int(hs, "X-RateLimit-Limit", policy_tier_capacity(t));
    if (refused)
        rate_headers_add_ref(hs, "Retry-After", "1");
    if (wants_ietf(mode))
        ietf_policy(hs, c->policy);
}

static void verdict_headers(struct rate_headers *hs, const struct verdict *v, int envoy)
{
    switch (v->kind) {
    case VERDICT_DECIDED:
    case VERDICT_LOCAL:
        decision_headers(hs, v, envoy);
        return;
    case VERDICT_UNAVAILABLE:
        config_headers(hs, v->req, request_failure_mode(v->req) == FAILURE_CLOSED, envoy);
        return;
    case VERDICT_OVERLOADED:
        config_headers(hs, v->req, 1, envoy);
        return;
    }
}

void rate_headers_verdict(struct rate_headers *hs, const struct verdict *v)
{
    verdict_headers(hs, v, 0);
}

void rate_headers_verdict_envoy(struct rate_headers *hs, const struct verdict *v)
{
    verdict_headers(hs, v, 1);
}
