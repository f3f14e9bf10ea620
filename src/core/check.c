/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c: one check from a decoded request to its verdict, for any front
 * and any backend. The struct check is the single owner of everything the
 * check holds (the request, a config reference, the deadline timer in its
 * struct pending, embedded so that a check costs one allocation); its life
 * (two reasons to live, the answer to the front and the backend's
 * completion, one place to free) is pending.c's. The deadline, which the
 * backend sets, answers per failure_mode when the backend is late; the late
 * completion then only releases the check.
 *
 * Does not own the backend, the fallback, the deny cache or the metrics
 * (the core's embedder does), nor any front's numbering of the outcome.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/check.h"
#include "core/deny_cache.h"
#include "core/lease_id.h"
#include "core/local_lease_calls.h"
#include "core/metrics.h"
#include "core/overrides.h"
#include "core/pending.h"
#include "core/top_keys.h"

struct check {
    struct pending p; /* first: the life of the call */
    struct core *core;
    struct config *cfg; /* reference: a reload must not free it under us */
    struct check_request req;
    check_reply_fn reply;
    void *ctx;
    int64_t started_us; /* monotonic, for the access log */
    int64_t sent_us;    /* monotonic, when the backend was asked */
    int counted;        /* the call holds one of core->backend_pending (max_inflight) */
    uint64_t ticket;    /* the request is a local lease's take (local_lease.h) */
    /* In core->lease_waiting: waits for a take of its key (LOCAL_LEASE_WAIT). */
    struct check *wait_prev, *wait_next;
    int waiting_take;
};

static void check_free(struct pending *p)
{
    struct check *c = (struct check *)p;
    request_free(&c->req);
    config_unref(c->cfg);
    free(c);
}

/* One line per check: who asked what, the outcome and how long it took. */
static void access_log(const struct check *c, const struct verdict *v)
{
    char checks[512] = "", st[8], ms[24];
    size_t used = 0;
    for (size_t i = 0; i < c->req.nchecks && used < sizeof checks; i++) {
        const struct check_item *it = &c->req.checks[i];
        int n = snprintf(checks + used, sizeof checks - used, "%s%s:%.*s", i ? "," : "",
                         it->policy->name, (int)(it->keylen > 64 ? 64 : it->keylen), it->key);
        used += n > 0 ? (size_t)n : 0;
    }
    snprintf(st, sizeof st, "%d", c->core->status_of(v));
    snprintf(ms, sizeof ms, "%.3f", (double)(util_monotonic_us() - c->started_us) / 1000.0);
    log_event(c->core->log, LOG_LVL_INFO, "check", "status", st, "checks", checks, "dry_run",
              c->req.dry_run ? "true" : "false", "ms", ms, NULL);
}

/* Counts each check of the request under its policy. */
static void count_checks(struct check *c, const struct verdict *v)
{
    int decided = v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL;
    enum metrics_decision undecided =
        verdict_outcome(v) == OUTCOME_UNAVAILABLE ? METRICS_UNAVAILABLE : METRICS_DEGRADED;
    for (size_t i = 0; i < c->req.nchecks; i++) {
        const struct policy *p = c->req.checks[i].policy;
        enum metrics_decision d = undecided;
        if (decided)
            d = v->kind == VERDICT_LOCAL             ? METRICS_LOCAL
                : decision_check_allowed(&v->sum, i) ? METRICS_ALLOWED
                : p->shadow                          ? METRICS_SHADOW_DENIED
                                                     : METRICS_DENIED;
        metrics_check(c->core->metrics, p->name, d);
        /* The heaviest keys: a denial, or a cost admitted (the whole
         * request allowed: a check that passed in a denied one took
         * nothing). A dry run is neither. */
        if (decided && !c->req.dry_run)
            top_keys_count(c->core->top, c->cfg, &c->req.checks[i],
                           !decision_check_allowed(&v->sum, i), v->sum.allowed);
    }
}

/* Counts each check of a report under its policy: what became of its
 * charge. */
static void count_reports(struct check *c, const struct verdict *v)
{
    enum metrics_report r = v->kind == VERDICT_DECIDED ? METRICS_REPORT_RECORDED
                            : v->kind == VERDICT_LOCAL ? METRICS_REPORT_LOCAL
                            : verdict_outcome(v) == OUTCOME_UNAVAILABLE
                                ? METRICS_REPORT_UNAVAILABLE
                                : METRICS_REPORT_NOT_RECORDED;
    for (size_t i = 0; i < c->req.nchecks; i++)
        metrics_report(c->core->metrics, c->req.checks[i].policy->name, r);
}

/* A report that gave back (a cost < 0) was charged: a denial this loop's
 * deny cache holds for that key may no longer hold (deny_cache.h: it
 * assumes nothing is ever given back), so it is dropped. Other daemons'
 * cached denials of the key last until their retry time at most. */
static void forget_refunded(struct check *c, const struct verdict *v)
{
    if (!c->core->deny || (v->kind != VERDICT_DECIDED && v->kind != VERDICT_LOCAL))
        return;
    for (size_t i = 0; i < c->req.nchecks; i++) {
        const struct check_item *it = &c->req.checks[i];
        if (it->cost < 0)
            deny_cache_del(c->core->deny, it->policy->name, it->key, it->keylen);
    }
}

/* Counts the leases the answer hands out. */
static void count_leases(struct check *c, const struct verdict *v)
{
    for (size_t i = 0; c->req.lease_nonce[0] && i < c->req.nchecks; i++) {
        if (!lease_taken(v, i))
            continue;
        const struct policy *p = c->req.checks[i].policy;
        for (size_t j = 0; j < p->ntiers; j++)
            if (p->tiers[j].algorithm == ALG_CONCURRENCY)
                metrics_count(c->core->metrics, METRICS_LEASES_ACQUIRED);
    }
}

/* The one place a check answers. */
static void finish(struct check *c, struct verdict *v)
{
    if (!pending_answer(&c->p))
        return;
    v->req = &c->req;
    if (v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL)
        decision_summarize(&c->req, v->results, &v->sum);
    if (c->req.report) {
        forget_refunded(c, v);
        count_reports(c, v);
    } else if (v->kind != VERDICT_OVERLOADED && !c->req.inspect) {
        count_checks(c, v);
    }
    count_leases(c, v);
    if (c->cfg->access_log)
        access_log(c, v);
    c->core->inflight--;
    c->reply(c->ctx, v);
    core_maybe_idle(c->core);
    /* Not freed here: every caller is inside a frame (check_start, a
     * backend's callback) that frees c on its way out. */
}

/* The fallback's decision (failure_mode local); when it comes within
 * answer_unavailable (the memory backend), that frame's hold keeps c. */
static void on_fallback_done(void *arg, const struct backend_reply *r)
{
    struct check *c = arg;
    pending_completed(&c->p);
    if (r->status == BACKEND_OK) {
        struct verdict v = {.kind = VERDICT_LOCAL, .results = r->results};
        finish(c, &v);
    } else {
        struct verdict v = {.kind = VERDICT_UNAVAILABLE, .why = r->errmsg};
        finish(c, &v);
    }
    pending_maybe_free(&c->p);
}

/* The backend could not decide: the request's failure mode answers (local:
 * a decision by the fallback backend, this process's memory with the same
 * algorithms; without one, or if it cannot take the call, as open). Works
 * from inside a backend's callback and within check_start alike, whose
 * frames free c on their way out (never this one). */
static void answer_unavailable(struct check *c, const char *why)
{
    struct backend *fb = c->core->fallback;
    if (request_failure_mode(&c->req) == FAILURE_LOCAL && fb) {
        pending_hold(&c->p);
        pending_call(&c->p);
        int rc = backend_decide(fb, c->cfg, &c->req, util_realtime_us(), on_fallback_done, c);
        if (rc < 0)
            pending_completed(&c->p);
        pending_unhold(&c->p);
        if (rc == 0)
            return;
    }
    struct verdict v = {.kind = VERDICT_UNAVAILABLE, .why = why};
    finish(c, &v);
}

/* answer_unavailable with "<backend> <what>". */
static void backend_failed(struct check *c, const char *what)
{
    char why[64];
    answer_unavailable(c, core_backend_said(c->core, why, sizeof why, what));
}

/*
 * The deny cache (deny_cache.h) serves only what it can answer exactly: a
 * request of one check, real (not a dry run), of a policy that counts
 * (not shadow) and allows it, with a cost to take; never a report, which
 * always charges. Other callers can only consume (a refund drops the
 * key's entry here: forget_refunded), so no algorithm allows such a request before the retry time
 * of an earlier denial of a cost no larger; a reload empties the cache.
 */
static int cacheable(const struct check *c)
{
    const struct check_item *it = &c->req.checks[0];
    /* Never a concurrency denial: a release frees room at any moment, so
     * no retry time bounds it from below. */
    return c->core->deny && !c->core->backend->ops->in_process && c->req.nchecks == 1 &&
           !c->req.dry_run && !c->req.report && !it->policy->shadow && it->policy->deny_cache &&
           it->cost > 0 && !policy_has_concurrency(it->policy);
}

static int answer_from_cache(struct check *c)
{
    const struct check_item *it = &c->req.checks[0];
    size_t n = it->policy->ntiers;
    struct tier_result res[POLICY_MAX_TIERS];
    if (!cacheable(c) || !deny_cache_get(c->core->deny, it->policy->name, it->key, it->keylen,
                                         it->cost, n, util_monotonic_us(), res))
        return 0;
    metrics_count(c->core->metrics, METRICS_DENY_CACHE_HITS);
    struct verdict v = {.kind = VERDICT_DECIDED, .results = res, .cached = 1};
    finish(c, &v);
    return 1;
}

/* A denial is not cached when a reset was announced after the check was
 * sent: the reset may have come between the backend's decision and its
 * reply (the announcement comes on another connection, in no set order
 * with this reply), and the key must not stay denied once reset. */
static void remember_denial(struct check *c, const struct verdict *v)
{
    const struct check_item *it = &c->req.checks[0];
    if (v->sum.allowed || v->sum.retry_us <= 0 || !cacheable(c) ||
        c->sent_us <= c->core->reset_seen_us)
        return;
    deny_cache_put(c->core->deny, it->policy->name, it->key, it->keylen, it->cost, v->results,
                   it->policy->ntiers, v->sum.retry_us, c->sent_us);
}

/* max_inflight counts backend calls not yet completed, across every loop:
 * a call answered at its deadline still waits in the backend's queue. */
static void release_inflight(struct check *c)
{
    if (c->counted)
        core_count_release(c->core->backend_pending);
    c->counted = 0;
}

/* 1 if c may ask the backend: an in-process backend completes within the
 * call (nothing waits, and its hot path stays free of shared writes);
 * another takes one of the process's max_inflight. */
static int take_inflight(struct check *c)
{
    if (c->core->backend->ops->in_process)
        return 1;
    c->counted = core_count_take(c->core->backend_pending, (size_t)c->cfg->max_inflight);
    return c->counted;
}

/* Takes c out of core->lease_waiting, if there: its wait, counted as a
 * backend call for its deadline, is over. */
static void unlink_waiting(struct check *c)
{
    if (!c->waiting_take)
        return;
    pending_disarm(&c->p);
    pending_completed(&c->p);
    if (c->wait_prev)
        c->wait_prev->wait_next = c->wait_next;
    else
        c->core->lease_waiting = c->wait_next;
    if (c->wait_next)
        c->wait_next->wait_prev = c->wait_prev;
    c->wait_prev = c->wait_next = NULL;
    c->waiting_take = 0;
}

/* Decides c from its key's leased block when it can (local_lease.h):
 * returns 1 if c was answered, or now waits for its key's take; else 0,
 * c having perhaps become a take, asked as any check. */
static int answer_from_lease(struct check *c)
{
    struct tier_result res[POLICY_MAX_TIERS];
    if (!local_lease_eligible(c->core, &c->req))
        return 0;
    switch (local_lease_step(c->core, &c->req, util_monotonic_us(), res, &c->ticket)) {
    case LOCAL_LEASE_SERVED: {
        struct verdict v = {.kind = VERDICT_DECIDED, .results = res};
        finish(c, &v);
        return 1;
    }
    case LOCAL_LEASE_WAIT:
        /* Woken by the take's end (end_take); the wait counts as a call,
         * under the same deadline as one. */
        c->waiting_take = 1;
        c->wait_next = c->core->lease_waiting;
        if (c->wait_next)
            c->wait_next->wait_prev = c;
        c->core->lease_waiting = c;
        pending_call(&c->p);
        pending_arm(&c->p, c->core->base, backend_call_timeout_us(c->core->backend, c->cfg));
        return 1;
    default:
        return 0;
    }
}

static void dispatch(struct check *c);

/* Asks again for every check waiting for a take of c's key: from the new
 * block, as a take of their own, or as plain checks; or, when the take
 * failed (r NULL: never sent, or not OK), answers them as it was (they
 * would meet the same backend, which may be going away). */
static void wake_waiting(struct check *c, const struct backend_reply *r)
{
    const struct check_item *it = &c->req.checks[0];
    struct check *woken = NULL;
    for (struct check *w = c->core->lease_waiting, *next; w; w = next) {
        next = w->wait_next;
        const struct check_item *wi = &w->req.checks[0];
        if (wi->keylen == it->keylen && strcmp(wi->policy->name, it->policy->name) == 0 &&
            memcmp(wi->key, it->key, it->keylen) == 0) {
            unlink_waiting(w);
            w->wait_next = woken; /* a list of their own: some may wait again */
            woken = w;
        }
    }
    while (woken) {
        struct check *w = woken;
        woken = w->wait_next;
        w->wait_next = NULL;
        pending_hold(&w->p);
        if (r && r->status == BACKEND_OK)
            dispatch(w);
        else
            backend_failed(w, "could not lease");
        pending_unhold(&w->p);
        pending_maybe_free(&w->p);
    }
}

/* A take's call is over (r NULL: it was never made): its block, whether
 * or not anyone still waits for the check; then the checks waiting for it. */
static void end_take(struct check *c, const struct backend_reply *r)
{
    if (!c->ticket)
        return;
    local_lease_end(c->core, c->cfg, &c->req, c->ticket, c->sent_us, r);
    c->ticket = 0;
    wake_waiting(c, r);
}

/* The figures of r: a take's (local_lease.h) with the block counted as
 * still there, since it is this daemon's to spend (as the checks it
 * decides will say), written into took; r->results otherwise. */
static const struct tier_result *take_figures(const struct check *c, const struct backend_reply *r,
                                              struct tier_result *took)
{
    if (c->req.block_op != LEASE_BLOCK_TAKE || r->lease_granted <= c->req.checks[0].cost)
        return r->results;
    int64_t extra = r->lease_granted - c->req.checks[0].cost;
    size_t n = c->req.checks[0].policy->ntiers;
    for (size_t i = 0; i < n; i++) {
        took[i] = r->results[i];
        if (took[i].remaining + extra < took[i].limit)
            took[i].remaining += extra;
        else
            took[i].remaining = took[i].limit;
    }
    return took;
}

static void on_backend_done(void *arg, const struct backend_reply *r)
{
    struct check *c = arg;
    pending_completed(&c->p);
    release_inflight(c);
    end_take(c, r);
    if (!c->p.waiting) {
        pending_maybe_free(&c->p); /* answered at the deadline, or cancelled */
        return;
    }
    switch (r->status) {
    case BACKEND_OK: {
        struct verdict v = {.kind = VERDICT_DECIDED, .results = r->results, .taken = r->taken};
        struct tier_result took[POLICY_MAX_TIERS];
        v.results = take_figures(c, r, took);
        decision_summarize(&c->req, v.results, &v.sum);
        remember_denial(c, &v);
        finish(c, &v);
        break;
    }
    case BACKEND_ERROR: {
        char event[64];
        log_limited(c->core->log, &c->core->error_log, util_monotonic_us(), LOG_LVL_ERROR,
                    core_backend_said(c->core, event, sizeof event, "error"), "error", r->errmsg,
                    NULL);
        backend_failed(c, "returned an error");
        break;
    }
    case BACKEND_UNAVAILABLE:
        answer_unavailable(c, r->errmsg);
        break;
    }
    pending_maybe_free(&c->p);
}

static void on_deadline(struct pending *p)
{
    struct check *c = (struct check *)p;
    struct core *core = c->core;
    char event[64];
    if (c->waiting_take) {
        /* Its key's take is late: answered as the take itself is. */
        unlink_waiting(c);
        backend_failed(c, "did not answer in time");
        pending_maybe_free(&c->p);
        return;
    }
    log_limited(core->log, &core->late_log, util_monotonic_us(), LOG_LVL_WARN,
                core_backend_said(core, event, sizeof event, "deadline passed"), NULL);
    metrics_count(core->metrics, METRICS_REDIS_TIMEOUTS);
    /* The backend call is still pending: c outlives the answer. */
    backend_failed(c, "did not answer in time");
    /* Last: this may drop the connection, which completes (and frees) c. */
    core->backend->ops->note_timeout(core->backend);
}

/* Asks the backend; answers at once when it cannot take the call. */
static void ask_backend(struct check *c)
{
    struct core *core = c->core;
    const struct config *cfg = c->cfg;
    /* First: whichever clock decides (ours below, or the backend's) reads
     * the time after this, so a retry time measured from here is never
     * late. */
    c->sent_us = util_monotonic_us();
    int64_t now = cfg->clock == CLOCK_SOURCE_LOCAL ? util_realtime_us() : -1;
    pending_call(&c->p);
    int rc = backend_decide(core->backend, cfg, &c->req, now, on_backend_done, c);
    if (pending_called(&c->p, rc, core->base, backend_call_timeout_us(core->backend, cfg)) < 0) {
        release_inflight(c);
        end_take(c, NULL);
        backend_failed(c, "is unavailable");
    }
}

/* Answers c from the deny cache or a leased block, makes it wait for its
 * key's take, or asks the backend. Past max_inflight calls waiting for the
 * backend (answered at their deadline or not) in the whole process, answers
 * at once rather than queue without bound. The caller holds c. */
static void dispatch(struct check *c)
{
    if (answer_from_cache(c) || answer_from_lease(c)) {
    } else if (!take_inflight(c)) {
        end_take(c, NULL);
        if (c->cfg->overload == OVERLOAD_FAILURE_MODE) {
            answer_unavailable(c, "too many checks in flight");
        } else {
            struct verdict v = {.kind = VERDICT_OVERLOADED};
            finish(c, &v);
        }
    } else {
        ask_backend(c);
    }
}

struct check *check_start(struct core *core, struct check_request *req, check_reply_fn reply,
                          void *ctx)
{
    struct check *c = xcalloc(1, sizeof *c);
    pending_begin(&c->p, on_deadline, check_free);
    c->core = core;
    c->cfg = config_ref(core->config);
    c->req = *req;
    memset(req, 0, sizeof *req);
    c->reply = reply;
    c->ctx = ctx;
    c->started_us = util_monotonic_us();
    core->inflight++;
    /* No clock read while no override exists (one atomic load). */
    if (core->overrides && overrides_count(core->overrides) > 0) {
        int64_t now = util_realtime_us();
        for (size_t i = 0; i < c->req.nchecks; i++)
            overrides_apply(core->overrides, &c->req.checks[i], now);
    }
    int nonce_failed = 0;
    for (size_t i = 0; !c->req.dry_run && i < c->req.nchecks; i++) {
        if (policy_has_concurrency(c->req.checks[i].policy)) {
            nonce_failed = lease_nonce_new(c->req.lease_nonce) < 0;
            break;
        }
    }

    if (nonce_failed) {
        struct verdict v = {.kind = VERDICT_UNAVAILABLE, .why = "no randomness for a lease id"};
        finish(c, &v);
    } else {
        dispatch(c);
    }
    return pending_started(&c->p) ? c : NULL;
}

void check_cancel(struct check *c)
{
    if (!c || !c->p.waiting)
        return;
    unlink_waiting(c);
    c->core->inflight--;
    pending_cancel(&c->p);
}
