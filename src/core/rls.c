/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rls.c: one ShouldRateLimit, front-neutral (rls.h). The life of a call:
 *
 *   rls_start: validate the request; match every descriptor in the
 *     config's domains (domains_match); drop the limits another matched
 *     limit `replaces`; build each remaining limited descriptor's key and
 *     cost; put them all in ONE check_request (duplicates add up, as on
 *     /check) so the backend decides them atomically; check_start.
 *   on_verdict: map the core's verdict to Envoy's answer (overall code, one
 *     status per descriptor, the headers of the `headers:` mode), count the
 *     metrics, reply. The overall code follows envoyproxy/ratelimit's rule
 *     for quota descriptors and its global shadow mode; when it is OK
 *     although the backend denied the request (which then took nothing),
 *     try_allowed_only decides the checks that allowed once more, in a
 *     second atomic call, so that they take their cost.
 *
 * The struct rls_call owns what the answer needs past rls_start (one entry
 * per descriptor, the derived limit names, the header list) and is freed
 * once, by call_free: after the reply (in reply_and_free, or in rls_start
 * when the reply came before rls_start returned), or by rls_cancel. The
 * limits it points to live in the config snapshot the check holds a
 * reference to, so a reload cannot free them while the call waits. A
 * request with nothing to decide never reaches the core and is answered
 * within rls_start.
 *
 * Does not own decoding (the fronts), matching (domains.c), the backend or
 * the failure modes (check.c) nor the header rules (rate_headers.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/metrics.h"
#include "core/rate_headers.h"
#include "core/rls.h"

#define RLS_REMAINING_UNLIMITED 4294967295LL /* UINT32_MAX, as envoyproxy/ratelimit */
#define RLS_UINT32_MAX 4294967295LL

enum entry_kind { ENTRY_UNMATCHED, ENTRY_REPLACED, ENTRY_UNLIMITED, ENTRY_LIMITED };

/* What became of one request descriptor. */
struct entry {
    enum entry_kind kind;
    const struct domain_limit *limit; /* NULL when unmatched */
    size_t check;                     /* ENTRY_LIMITED: its check in the request */
    char *metric; /* detailed_metric, value_to_metric: the metric name from the request's values */
    size_t metriclen;
    int quota;                          /* a quota descriptor: over it, the request is still allowed
                                         * unless every quota descriptor of the request is over */
    char name[2 * POLICY_NAME_MAX + 2]; /* "<policy>/<tier>" of a policy: limit */
    struct domain_limit override;       /* Envoy's per-request limit: limit points here */
};

struct rls_call {
    struct core *core;
    enum rls_front front;
    const struct domain *domain; /* the config's, or NULL: unknown */
    rls_reply_fn reply;
    void *ctx;
    struct check *check; /* while the core decides */
    int starting;        /* inside rls_start: the caller gets the handle */
    int answered;
    /* Held when a second round may be needed (quota descriptors, or the
     * global shadow mode): the limits and the first round's policies point
     * into this snapshot, which must outlive the first round's check. */
    struct config *cfg;
    int round;         /* 1 in the second round (try_allowed_only) */
    int global_shadow; /* the config's envoy_shadow_mode */
    uint64_t dropped;  /* descriptors left out of the second round: their
                        * first-round status stands */
    /* Descriptors (< 64) a shadow limit would have denied, as decided: a
     * dropped one keeps its first-round bit, as it keeps its status. */
    uint64_t shadow_over;
    size_t n;
    struct entry *entries;     /* n */
    struct rls_status *status; /* n */
    struct rls_header headers[RATE_HEADERS_MAX];
};

static void call_free(struct rls_call *c)
{
    config_unref(c->cfg);
    for (size_t i = 0; i < c->n; i++)
        free(c->entries[i].metric);
    free(c); /* entries and status are in the same block */
}

/* ---- pure parts ---- */

static int must_escape(char ch)
{
    /* NUL too: a check's key may not hold it (decision.h). */
    return ch == '%' || ch == '|' || ch == '=' || ch == '\0';
}

/* Appends s escaped at out + *n; -1 past outlen. Runs of bytes that stay
 * as they are are copied at once. */
static int put_escaped(char *out, size_t outlen, size_t *n, const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t run = 0;
        while (i + run < len && !must_escape(s[i + run]))
            run++;
        if (outlen - *n < run)
            return -1;
        memcpy(out + *n, s + i, run);
        *n += run;
        i += run;
        if (i == len)
            break;
        const char *rep = s[i] == '%' ? "%25" : s[i] == '|' ? "%7C" : s[i] == '=' ? "%3D" : "%00";
        if (outlen - *n < 3)
            return -1;
        memcpy(out + *n, rep, 3);
        *n += 3;
        i++;
    }
    return 0;
}

static int put_raw(char *out, size_t outlen, size_t *n, char ch)
{
    if (outlen == *n)
        return -1;
    out[(*n)++] = ch;
    return 0;
}

long rls_key(const char *domain, size_t domainlen, const struct descriptor_entry *entries, size_t n,
             char *out, size_t outlen)
{
    size_t len = 0;
    if (put_escaped(out, outlen, &len, domain, domainlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const struct descriptor_entry *e = &entries[i];
        if (put_raw(out, outlen, &len, '|') < 0 ||
            put_escaped(out, outlen, &len, e->key, e->keylen) < 0 ||
            put_raw(out, outlen, &len, '=') < 0 ||
            put_escaped(out, outlen, &len, e->value, e->valuelen) < 0)
            return -1;
    }
    return (long)len;
}

void rls_tier_unit(const struct tier *t, enum rls_unit *unit, int64_t *requests_per_unit)
{
    /* By length; Envoy's numbering is not in that order. */
    static const enum rls_unit by_length[] = {RLS_UNIT_SECOND, RLS_UNIT_MINUTE, RLS_UNIT_HOUR,
                                              RLS_UNIT_DAY,    RLS_UNIT_WEEK,   RLS_UNIT_MONTH,
                                              RLS_UNIT_YEAR};
    static const enum rls_unit by_calendar[] = {[CALENDAR_DAY] = RLS_UNIT_DAY,
                                                [CALENDAR_WEEK] = RLS_UNIT_WEEK,
                                                [CALENDAR_MONTH] = RLS_UNIT_MONTH,
                                                [CALENDAR_YEAR] = RLS_UNIT_YEAR};
    if (t->calendar.unit != CALENDAR_NONE) {
        /* One limit per calendar unit, whatever that unit's length. */
        *unit = by_calendar[t->calendar.unit];
        *requests_per_unit = t->limit > RLS_UINT32_MAX ? RLS_UINT32_MAX : t->limit;
        return;
    }
    size_t i = 0;
    while (i + 1 < sizeof by_length / sizeof by_length[0] &&
           rls_unit_seconds(by_length[i]) * 1000000 < t->window_us)
        i++;
    int64_t unit_us = rls_unit_seconds(by_length[i]) * 1000000;
    /* limit * unit_us may pass 2^63 (a big limit per year): long double
     * holds 64 bits of mantissa, exact for the small products that matter,
     * and the result is held to UINT32_MAX anyway. */
    long double v = (long double)t->limit * (long double)unit_us / (long double)t->window_us;
    int64_t r = v >= (long double)RLS_UINT32_MAX ? RLS_UINT32_MAX : (int64_t)v;
    if ((long double)r < v && r < RLS_UINT32_MAX)
        r++;
    *unit = by_length[i];
    *requests_per_unit = r < 1 ? 1 : r;
}

/* ---- matching and the request ---- */

static int validate(const struct rls_request *req, struct request_error *err)
{
    if (req->domainlen == 0)
        return request_fail(err, RC_INVALID_REQUEST, "the domain is empty");
    if (req->ndescriptors == 0)
        return request_fail(err, RC_INVALID_REQUEST, "there are no descriptors");
    if (req->ndescriptors > REQUEST_MAX_CHECKS)
        return request_fail(err, RC_INVALID_REQUEST, "too many descriptors (at most 64)");
    if (req->hits_addend < 0 || req->hits_addend > REQUEST_MAX_COST)
        return request_fail(err, RC_INVALID_COST, "hits_addend must be between 0 and 1000000000");
    for (size_t i = 0; i < req->ndescriptors; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        if (d->nentries == 0)
            return request_fail(err, RC_INVALID_REQUEST, "a descriptor has no entries");
        if (d->hits_addend < -1 || d->hits_addend > REQUEST_MAX_COST)
            return request_fail(err, RC_INVALID_COST,
                                "a descriptor's hits_addend must be between 0 and 1000000000");
        for (size_t j = 0; j < d->nentries; j++)
            if (d->entries[j].keylen == 0)
                return request_fail(err, RC_INVALID_KEY, "a descriptor entry has an empty key");
        if (d->has_limit &&
            (rls_unit_seconds(d->limit_unit) == 0 || d->limit_requests_per_unit < 0 ||
             d->limit_requests_per_unit > RLS_UINT32_MAX))
            return request_fail(err, RC_INVALID_LIMIT,
                                "a descriptor's limit override needs a known unit and "
                                "requests_per_unit of at most 4294967295");
    }
    return 0;
}

/* True if name is in the replaces of a matched limit other than entry i's. */
static int is_replaced(const struct rls_call *c, size_t i)
{
    const char *name = c->entries[i].limit->name;
    if (!name)
        return 0;
    for (size_t j = 0; j < c->n; j++) {
        const struct domain_limit *l = c->entries[j].limit;
        if (j == i || !l || c->entries[j].limit == c->entries[i].limit)
            continue;
        for (size_t k = 0; k < l->nreplaces; k++)
            if (strcmp(l->replaces[k], name) == 0)
                return 1;
    }
    return 0;
}

/* Matches every descriptor and applies `replaces`. */
static void match_all(struct rls_call *c, const struct config *cfg, const struct rls_request *req)
{
    for (size_t i = 0; i < c->n; i++) {
        const struct rls_descriptor *d = &req->descriptors[i];
        struct entry *e = &c->entries[i];
        e->limit = c->domain ? domains_match(cfg->domains, cfg->ndomains, req->domain,
                                             req->domainlen, d->entries, d->nentries)
                             : NULL;
        if (c->domain && d->has_limit) {
            /* Envoy's override replaces whatever the config says for this
             * descriptor, in a known domain, as envoyproxy/ratelimit does:
             * a fixed window, never shadow, never unlimited. */
            e->override = (struct domain_limit){
                .unit = d->limit_unit,
                .requests_per_unit = d->limit_requests_per_unit,
                .path = e->limit ? e->limit->path : NULL,
                .detailed_metric = e->limit && e->limit->detailed_metric,
            };
            e->limit = &e->override;
        }
        e->kind = !e->limit             ? ENTRY_UNMATCHED
                  : e->limit->unlimited ? ENTRY_UNLIMITED
                                        : ENTRY_LIMITED;
        /* As envoyproxy/ratelimit: the global switch makes every descriptor
         * but an unlimited one a quota descriptor (an unmatched or replaced
         * one is one that is never over); an override is never one of its
         * own, as it is never shadow. */
        e->quota = e->kind != ENTRY_UNLIMITED &&
                   (cfg->envoy_quota_mode || (e->kind == ENTRY_LIMITED && e->limit->quota_mode));
        /* A name from the request's values (metrics.c bounds and cleans
         * it), or NULL for the config's path. */
        if (e->limit)
            e->metric = domains_metric_name(e->limit, d->entries, d->nentries, &e->metriclen);
    }
    for (size_t i = 0; i < c->n; i++)
        if (c->entries[i].limit && is_replaced(c, i))
            c->entries[i].kind = ENTRY_REPLACED;
}

/* The same policy, or two per-request overrides with the same limit: one
 * state, so one check (the backend must never see one key twice). */
static int same_policy(const struct policy *a, const struct policy *b)
{
    return a == b || (strcmp(a->name, DOMAINS_ENVOY_POLICY) == 0 &&
                      strcmp(b->name, DOMAINS_ENVOY_POLICY) == 0 && a->shadow == b->shadow &&
                      a->tiers[0].limit == b->tiers[0].limit &&
                      a->tiers[0].window_us == b->tiers[0].window_us);
}

/* The policy of a descriptor that brings its own limit (its limit_unit and
 * requests_per_unit), into *out, owned by the caller; or -1 with err set
 * when that limit is invalid. */
static int override_policy(const struct config *cfg, const struct rls_descriptor *d,
                           struct policy **out, struct request_error *err)
{
    char msg[RL_ERRLEN];
    struct policy *owned = xmalloc(sizeof *owned);
    if (domains_envoy_policy(owned, d->limit_unit, d->limit_requests_per_unit, 0, cfg->headers,
                             cfg->deny_status, msg, sizeof msg) < 0) {
        free(owned);
        return request_fail(err, RC_INVALID_LIMIT, "%s", msg);
    }
    if (cfg->envoy_calendar_units && domains_envoy_calendar(owned, d->limit_unit, cfg->utc) < 0) {
        free(owned);
        return request_fail(err, RC_INVALID_LIMIT, "calendar unit");
    }
    /* Its limit is this request's: a denial cached under it could answer a
     * later request that brings another. */
    owned->deny_cache = 0;
    *out = owned;
    return 0;
}

/* Adds descriptor i's check to creq (merging a duplicate (policy, key), as
 * /check does) and remembers which check it is. */
static int add_check(struct rls_call *c, struct check_request *creq, const struct rls_request *req,
                     size_t i, struct request_error *err)
{
    const struct rls_descriptor *d = &req->descriptors[i];
    char key[POLICY_KEY_MAX];
    /* share_threshold: the wildcard's pattern stands for the value, so
     * that all the values it matches count together. */
    const struct domain_limit *l = c->entries[i].limit;
    struct descriptor_entry shared[DOMAINS_DEPTH_MAX];
    const struct descriptor_entry *ents = d->entries;
    if (l->share != NULL && d->nentries <= DOMAINS_DEPTH_MAX) {
        domains_share_entries(l, d->entries, d->nentries, shared);
        ents = shared;
    }
    long len = rls_key(req->domain, req->domainlen, ents, d->nentries, key, sizeof key);
    if (len < 0)
        return request_fail(err, RC_INVALID_KEY, "a descriptor's key is over 1024 bytes");
    int64_t cost = d->hits_addend >= 0    ? d->hits_addend
                   : req->hits_addend > 0 ? req->hits_addend
                                          : 1;
    /* The key may have tiers of its own (per-key overrides), as on /check:
     * the same (policy, key) must be decided by the same tiers whichever
     * front asks, since they share the state. A shadow_mode copy has
     * variants of its own, shadow too (config_domains.c). */
    struct policy *owned = NULL;
    const struct policy *p;
    if (c->entries[i].limit == &c->entries[i].override) {
        if (override_policy(c->core->config, d, &owned, err) < 0)
            return -1;
        p = owned;
    } else {
        p = policy_for_key(c->entries[i].limit->policy, key, (size_t)len);
    }
    for (size_t k = 0; k < creq->nchecks; k++) {
        struct check_item *it = &creq->checks[k];
        if (same_policy(it->policy, p) && it->keylen == (size_t)len &&
            memcmp(it->key, key, it->keylen) == 0) {
            free(owned);
            if (it->cost + cost > REQUEST_MAX_COST)
                return request_fail(err, RC_INVALID_COST,
                                    "the hits of one descriptor add up to too many");
            it->cost += cost;
            c->entries[i].check = k;
            return 0;
        }
    }
    struct check_item *it = &creq->checks[creq->nchecks];
    *it = (struct check_item){.policy = p,
                              .key = xstrndup(key, (size_t)len),
                              .keylen = (size_t)len,
                              .cost = cost,
                              .owned = owned};
    c->entries[i].check = creq->nchecks++;
    return 0;
}

/* ---- the answer ---- */

int64_t rls_whole_seconds(int64_t us)
{
    return us <= 0 ? 0 : (us + 999999) / 1000000;
}

/* Counts descriptor i (after its status is set); shadow_over: a shadow
 * limit would have denied it. */
static void count_descriptors_one(struct rls_call *c, size_t i, int shadow_over)
{
    const struct entry *e = &c->entries[i];
    enum metrics_rls_result r = METRICS_RLS_DESC_UNMATCHED; /* replaced ones too */
    if (e->kind == ENTRY_UNLIMITED)
        r = METRICS_RLS_DESC_UNLIMITED;
    else if (e->kind == ENTRY_LIMITED && c->status[i].code == RLS_CODE_OVER_LIMIT)
        r = METRICS_RLS_DESC_OVER_LIMIT;
    else if (e->kind == ENTRY_LIMITED && shadow_over)
        r = METRICS_RLS_DESC_SHADOW_OVER_LIMIT;
    else if (e->kind == ENTRY_LIMITED)
        r = METRICS_RLS_DESC_OK;
    const char *domain = c->domain ? c->domain->name : "";
    const char *path = e->limit && e->limit->path ? e->limit->path : "";
    if (e->metric)
        metrics_rls_descriptor(c->core->metrics, domain, e->metric, e->metriclen, 1, r);
    else
        metrics_rls_descriptor(c->core->metrics, domain, path, strlen(path), 0, r);
}

static void reply_and_free(struct rls_call *c, const struct rls_answer *a)
{
    enum metrics_rls_code code = a->outcome == RLS_UNAVAILABLE       ? METRICS_RLS_UNAVAILABLE
                                 : a->overall == RLS_CODE_OVER_LIMIT ? METRICS_RLS_OVER_LIMIT
                                                                     : METRICS_RLS_OK;
    metrics_rls_request(c->core->metrics, (enum metrics_rls_front)c->front, code);
    c->answered = 1;
    c->reply(c->ctx, a);
    if (!c->starting)
        call_free(c);
}

/* Every status OK: what answers without a decision (nothing to decide, or
 * failure_mode open). */
static void statuses_ok(struct rls_call *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (!((c->dropped >> i) & 1))
            c->status[i] = (struct rls_status){
                .code = RLS_CODE_OK,
                .limit_remaining =
                    c->entries[i].kind == ENTRY_UNLIMITED ? RLS_REMAINING_UNLIMITED : 0};
}

/* "<policy>/<tier>" into out (cap bytes, cut short as snprintf would).
 * Every answer of a `policy:` limit names its tier: snprintf's format
 * parsing showed among the gRPC call's top costs (callgrind). */
static void limit_name(char *out, size_t cap, const char *policy, const char *tier)
{
    size_t n = 0;
    for (const char *parts[] = {policy, "/", tier}, **q = parts; q < parts + 3; q++)
        for (const char *c = *q; *c && n + 1 < cap; c++)
            out[n++] = *c;
    out[n] = '\0';
}

/* Descriptor i's status from its check's tiers (results of that check
 * alone): the same binding rule as the whole request's. */
static void status_decided(struct rls_call *c, size_t i, const struct verdict *v,
                           const struct tier_result *results, int *shadow_over)
{
    const struct check_item *it = &v->req->checks[c->entries[i].check];
    const struct policy *p = it->policy;
    struct check_request one = {.nchecks = 1, .checks = (struct check_item *)it};
    struct decision_summary sum;
    decision_summarize(&one, results, &sum);
    const struct tier_result *b = sum.binding;
    int denied = !decision_check_allowed(&v->sum, c->entries[i].check);
    const struct domain_limit *l = c->entries[i].limit;
    struct rls_status *s = &c->status[i];
    *s = (struct rls_status){
        .code = denied && !p->shadow ? RLS_CODE_OVER_LIMIT : RLS_CODE_OK,
        .has_limit = 1,
        .requests_per_unit = l->requests_per_unit,
        .unit = l->unit,
        .limit_name = l->name,
        .limit_remaining = b->remaining < 0                ? 0
                           : b->remaining > RLS_UINT32_MAX ? RLS_UINT32_MAX
                                                           : b->remaining,
        .until_reset_s = rls_whole_seconds(b->reset_us),
    };
    *shadow_over = denied && p->shadow;
    if (l->unit == RLS_UNIT_UNKNOWN) {
        const struct tier *t = &p->tiers[b - results];
        rls_tier_unit(t, &s->unit, &s->requests_per_unit);
        limit_name(c->entries[i].name, sizeof c->entries[i].name, p->name, t->name);
        s->limit_name = c->entries[i].name;
    }
}

/* The overall code from the statuses, with envoyproxy/ratelimit's rule:
 * OVER_LIMIT when a descriptor that is not a quota descriptor is over, or
 * when the request has quota descriptors and every one of them is over. */
static enum rls_code overall_code(const struct rls_call *c)
{
    int normal_over = 0, nquota = 0, quota_ok = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->entries[i].kind == ENTRY_UNLIMITED)
            continue;
        int over = c->status[i].code == RLS_CODE_OVER_LIMIT;
        if (c->entries[i].quota) {
            nquota++;
            quota_ok |= !over;
        } else {
            normal_over |= over;
        }
    }
    return normal_over || (nquota > 0 && !quota_ok) ? RLS_CODE_OVER_LIMIT : RLS_CODE_OK;
}

static void on_verdict(void *ctx, const struct verdict *v);

/*
 * The first round was denied as a whole (so it consumed nothing, but for
 * the checks in verdict.taken: a Redis Cluster request denied in its
 * second phase), but the answer is OK all the same (a quota descriptor
 * over while another is not, or the global shadow mode). Decides again,
 * atomically, the checks that allowed and took nothing, so that the
 * request takes what it would have taken had the checks that denied been
 * shadow: they take nothing, and their first-round status stands, as does
 * that of a check already taken. Returns 1 when the second round is under
 * way (or already answered), 0 when there is nothing to decide again.
 */
static int try_allowed_only(struct rls_call *c, const struct verdict *v)
{
    const struct check_request *r = v->req;
    size_t map[REQUEST_MAX_CHECKS];
    struct check_request creq = {0};
    if (c->round || !c->cfg)
        return 0;
    creq.checks = xcalloc(r->nchecks, sizeof *creq.checks);
    for (size_t k = 0; k < r->nchecks; k++) {
        const struct check_item *it = &r->checks[k];
        map[k] = SIZE_MAX;
        /* A check the first round took already (a Cluster's second-phase
         * denial, verdict.taken) keeps what it took and its status. */
        if (!decision_check_allowed(&v->sum, k) || ((v->taken >> k) & 1))
            continue;
        struct check_item *n = &creq.checks[creq.nchecks];
        *n = (struct check_item){.policy = it->policy,
                                 .key = xstrndup(it->key, it->keylen),
                                 .keylen = it->keylen,
                                 .cost = it->cost};
        if (it->owned) { /* a per-request limit: no pointer in it is owned */
            n->owned = xmalloc(sizeof *n->owned);
            *n->owned = *it->owned;
            n->policy = n->owned;
        }
        map[k] = creq.nchecks++;
    }
    if (creq.nchecks == 0) {
        request_free(&creq);
        return 0;
    }
    for (size_t i = 0; i < c->n; i++) {
        if (c->entries[i].kind != ENTRY_LIMITED)
            continue;
        if (map[c->entries[i].check] == SIZE_MAX)
            c->dropped |= (uint64_t)1 << i;
        else
            c->entries[i].check = map[c->entries[i].check];
    }
    c->round = 1;
    /* Each check was counted by the first round (allowed, or denied where
     * it denied): counted again, one Envoy request would count an allowed
     * check twice in ratelimitd_checks_total. */
    creq.inspect = 1;
    /* The reply may come within check_start (memory backend): as in
     * rls_start, the call is freed here then. */
    int was_starting = c->starting;
    c->starting = 1;
    struct check *h = check_start(c->core, &creq, on_verdict, c);
    c->starting = was_starting;
    if (c->answered) {
        if (!was_starting)
            call_free(c);
    } else {
        c->check = h;
    }
    return 1;
}

/* response_headers_to_add from the verdict, as the policy's mode says;
 * without Retry-After when the answer is OK (the request goes through).
 * The values point into hs, which must outlive the reply. */
static size_t answer_headers(struct rls_call *c, struct rate_headers *hs, const struct verdict *v,
                             enum rls_code overall)
{
    size_t n = 0;
    rate_headers_init(hs);
    rate_headers_verdict_envoy(hs, v);
    for (size_t i = 0; i < hs->n; i++)
        if (overall == RLS_CODE_OVER_LIMIT || strcmp(hs->h[i].name, "Retry-After") != 0)
            c->headers[n++] = (struct rls_header){hs->h[i].name, hs->h[i].value, hs->h[i].len};
    return n;
}

static void on_verdict(void *ctx, const struct verdict *v)
{
    struct rls_call *c = ctx;
    c->check = NULL;
    struct rls_answer a = {
        .outcome = RLS_DECIDED, .overall = RLS_CODE_OK, .statuses = c->status, .nstatuses = c->n};
    int closed = v->kind == VERDICT_UNAVAILABLE && request_failure_mode(v->req) == FAILURE_CLOSED;
    if (v->kind == VERDICT_OVERLOADED || closed) {
        a.outcome = RLS_UNAVAILABLE;
        a.message = v->kind == VERDICT_OVERLOADED ? "too many checks in flight"
                    : v->why                      ? v->why
                                                  : "the backend could not decide";
        reply_and_free(c, &a);
        return;
    }
    statuses_ok(c);
    if (v->kind == VERDICT_UNAVAILABLE) {
        a.degraded = 1;              /* failure_mode open */
        a.overall = overall_code(c); /* dropped quota descriptors stay over */
    } else {
        a.degraded = v->kind == VERDICT_LOCAL;
        for (size_t i = 0; i < c->n; i++) {
            if (c->entries[i].kind != ENTRY_LIMITED || ((c->dropped >> i) & 1))
                continue;
            const struct tier_result *r = v->results;
            for (size_t k = 0; k < c->entries[i].check; k++)
                r += v->req->checks[k].policy->ntiers;
            int so;
            status_decided(c, i, v, r, &so);
            c->shadow_over = (c->shadow_over & ~((uint64_t)1 << i)) | (uint64_t)so << i;
        }
        /* A denied second round consumed nothing either: OVER_LIMIT, as
         * any request that took nothing (a race lost to other callers). */
        a.overall = !v->sum.allowed && c->round ? RLS_CODE_OVER_LIMIT : overall_code(c);
        if (!v->sum.allowed && (a.overall == RLS_CODE_OK || c->global_shadow) &&
            try_allowed_only(c, v))
            return;
    }
    /* envoyproxy/ratelimit's SHADOW_MODE: the statuses say what was decided,
     * the overall code is never OVER_LIMIT. */
    if (c->global_shadow)
        a.overall = RLS_CODE_OK;
    struct rate_headers hs;
    a.headers = c->headers;
    a.nheaders = answer_headers(c, &hs, v, a.overall);
    for (size_t i = 0; i < c->n; i++)
        count_descriptors_one(c, i, (c->shadow_over >> i) & 1);
    reply_and_free(c, &a);
}

/* The call for a valid req, starting: its descriptors matched against the
 * current config, which it keeps a reference to only if it may need a
 * second round (shadow mode, or a quota). */
static struct rls_call *call_new(struct core *core, const struct rls_request *req,
                                 rls_reply_fn reply, void *ctx)
{
    const struct config *cfg = core->config;
    /* One block: the call, then its n entries, then its n statuses (each
     * struct's size is a multiple of its alignment, all of them 8). */
    _Static_assert(sizeof(struct rls_call) % _Alignof(struct entry) == 0 &&
                       sizeof(struct entry) % _Alignof(struct rls_status) == 0,
                   "the call's arrays follow it aligned");
    struct rls_call *c = xcalloc(
        1, sizeof *c + req->ndescriptors * (sizeof(struct entry) + sizeof(struct rls_status)));
    *c = (struct rls_call){
        .core = core,
        .front = req->front,
        .domain = domains_find(cfg->domains, cfg->ndomains, req->domain, req->domainlen),
        .reply = reply,
        .ctx = ctx,
        .starting = 1,
        .n = req->ndescriptors};
    c->entries = (struct entry *)(c + 1);
    c->status = (struct rls_status *)(c->entries + c->n);
    match_all(c, cfg, req);
    c->global_shadow = cfg->envoy_shadow_mode;
    int may_retry = c->global_shadow;
    for (size_t i = 0; i < c->n; i++)
        may_retry |= c->entries[i].quota;
    if (may_retry)
        c->cfg = config_ref(core->config);
    return c;
}

int rls_start(struct core *core, const struct rls_request *req, rls_reply_fn reply, void *ctx,
              struct rls_call **handle, struct request_error *err)
{
    *handle = NULL;
    if (validate(req, err) < 0) {
        metrics_rls_request(core->metrics, (enum metrics_rls_front)req->front, METRICS_RLS_INVALID);
        return -1;
    }
    struct rls_call *c = call_new(core, req, reply, ctx);
    struct check_request creq = {0};
    creq.checks = xcalloc(c->n, sizeof *creq.checks);
    for (size_t i = 0; i < c->n; i++) {
        if (c->entries[i].kind == ENTRY_LIMITED && add_check(c, &creq, req, i, err) < 0) {
            request_free(&creq);
            call_free(c);
            metrics_rls_request(core->metrics, (enum metrics_rls_front)req->front,
                                METRICS_RLS_INVALID);
            return -1;
        }
    }
    if (creq.nchecks == 0) {
        /* Nothing to decide: OK at once, without the backend. */
        request_free(&creq);
        statuses_ok(c);
        for (size_t i = 0; i < c->n; i++)
            count_descriptors_one(c, i, 0);
        struct rls_answer a = {.outcome = RLS_DECIDED,
                               .overall = RLS_CODE_OK,
                               .statuses = c->status,
                               .nstatuses = c->n};
        reply_and_free(c, &a);
    } else {
        /* NULL when answered within the call; a second round started
         * then (try_allowed_only) has set c->check itself. */
        struct check *h = check_start(core, &creq, on_verdict, c);
        if (h)
            c->check = h;
    }
    c->starting = 0;
    if (c->answered) {
        call_free(c);
        return 0;
    }
    *handle = c;
    return 0;
}

void rls_cancel(struct rls_call *c)
{
    if (!c)
        return;
    check_cancel(c->check);
    call_free(c);
}
