/*
 * check.c: one check from a decoded request to its verdict, for any front
 * and any backend. The struct check is the single owner of everything the
 * check holds (the request, a config reference, the deadline timer, embedded
 * so that a check costs one allocation); it has two reasons to live, the
 * answer to the front and the backend's completion, and is freed in one
 * place when both are over. The deadline answers per failure_mode when the
 * backend is late; the late completion then only releases the check.
 */
#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/deny_cache.h"
#include "core/metrics.h"
#include "server.h"
#include "worker.h"

struct check {
    struct worker *w;
    struct config *cfg; /* reference: a reload must not free it under us */
    struct check_request req;
    check_reply_fn reply; /* NULL once answered or cancelled */
    void *ctx;
    struct event deadline;
    int deadline_armed;
    int64_t started_us; /* monotonic, for the access log */
    int64_t sent_us;    /* monotonic, when the backend was asked */
    int backend_pending;
    int counted;  /* the call holds one of srv->backend_pending (max_inflight) */
    int starting; /* inside check_start: the caller still holds c */
};

static void check_free(struct check *c)
{
    if (c->deadline_armed)
        event_del(&c->deadline);
    request_free(&c->req);
    config_unref(c->cfg);
    free(c);
}

/* Frees c once nothing can reach it any more. */
static void maybe_free(struct check *c)
{
    if (!c->reply && !c->backend_pending && !c->starting)
        check_free(c);
}

/* One line per check: who asked what, the outcome and how long it took. */
static void access_log(const struct check *c, int status)
{
    char checks[512] = "", st[8], ms[24];
    size_t used = 0;
    for (size_t i = 0; i < c->req.nchecks && used < sizeof checks; i++) {
        const struct check_item *it = &c->req.checks[i];
        int n = snprintf(checks + used, sizeof checks - used, "%s%s:%.*s", i ? "," : "",
                         it->policy->name, (int)(it->keylen > 64 ? 64 : it->keylen), it->key);
        used += n > 0 ? (size_t)n : 0;
    }
    snprintf(st, sizeof st, "%d", status);
    snprintf(ms, sizeof ms, "%.3f", (double)(util_monotonic_us() - c->started_us) / 1000.0);
    log_event(c->w->log, LOG_LVL_INFO, "check", "status", st, "checks", checks, "dry_run",
              c->req.dry_run ? "true" : "false", "ms", ms, NULL);
}

/* Counts each check of the request under its policy. */
static void count_checks(struct check *c, const struct verdict *v)
{
    const struct tier_result *r = v->results;
    for (size_t i = 0; i < c->req.nchecks; i++) {
        const struct policy *p = c->req.checks[i].policy;
        enum metrics_decision d = verdict_status(v) == 503 ? METRICS_UNAVAILABLE : METRICS_DEGRADED;
        if (v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL) {
            int allowed = 1;
            for (size_t j = 0; j < p->ntiers; j++, r++)
                allowed &= r->allowed;
            d = v->kind == VERDICT_LOCAL ? METRICS_LOCAL
                : allowed                ? METRICS_ALLOWED
                : p->shadow              ? METRICS_SHADOW_DENIED
                                         : METRICS_DENIED;
        }
        metrics_check(c->w->metrics, p->name, d);
    }
}

/* The one place a check answers. */
static void finish(struct check *c, struct verdict *v)
{
    v->req = &c->req;
    if (v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL)
        decision_summarize(&c->req, v->results, &v->sum);
    if (v->kind != VERDICT_OVERLOADED && !c->req.inspect)
        count_checks(c, v);
    if (c->cfg->access_log)
        access_log(c, verdict_status(v));
    check_reply_fn reply = c->reply;
    c->reply = NULL;
    if (c->deadline_armed) {
        event_del(&c->deadline);
        c->deadline_armed = 0;
    }
    c->w->inflight--;
    reply(c->ctx, v);
    worker_maybe_idle(c->w);
    maybe_free(c);
}

/* The backend could not decide: the request's failure mode answers (local:
 * a decision from this process's memory, with the same algorithms). */
static void answer_unavailable(struct check *c, const char *why)
{
    if (request_failure_mode(&c->req) != FAILURE_LOCAL) {
        struct verdict v = {.kind = VERDICT_UNAVAILABLE, .why = why};
        finish(c, &v);
        return;
    }
    size_t n = request_tiers(&c->req);
    struct tier_result buf[16];
    struct tier_result *res = n <= 16 ? buf : xcalloc(n, sizeof *res);
    server_local_decide(c->w->srv, c->cfg->key_prefix, &c->req, util_realtime_us(), res);
    struct verdict v = {.kind = VERDICT_LOCAL, .results = res};
    finish(c, &v);
    if (res != buf)
        free(res);
}

/*
 * The deny cache (deny_cache.h) serves only what it can answer exactly: a
 * request of one check, real (not a dry run), of a policy that counts
 * (not shadow) and allows it, with a cost to take. Other callers can only
 * consume, so no algorithm allows such a request before the retry time of
 * an earlier denial of a cost no larger; a reload empties the cache.
 */
static int cacheable(const struct check *c)
{
    const struct check_item *it = &c->req.checks[0];
    return c->w->deny && !c->w->backend->ops->in_process && c->req.nchecks == 1 &&
           !c->req.dry_run && !it->policy->shadow && it->policy->deny_cache && it->cost > 0;
}

static int answer_from_cache(struct check *c)
{
    const struct check_item *it = &c->req.checks[0];
    size_t n = it->policy->ntiers;
    struct tier_result res[POLICY_MAX_TIERS];
    if (!cacheable(c) || !deny_cache_get(c->w->deny, it->policy->name, it->key, it->keylen,
                                         it->cost, n, util_monotonic_us(), res))
        return 0;
    metrics_count(c->w->metrics, METRICS_DENY_CACHE_HITS);
    struct verdict v = {.kind = VERDICT_DECIDED, .results = res, .cached = 1};
    finish(c, &v);
    return 1;
}

/* A denial is not cached when a reset was announced after the check was
 * sent: the reset may have come between Redis's decision and its reply
 * (the announcement comes on another connection, in no set order with this
 * reply), and the key must not stay denied once reset. */
static void remember_denial(struct check *c, const struct verdict *v)
{
    const struct check_item *it = &c->req.checks[0];
    if (v->sum.allowed || v->sum.retry_us <= 0 || !cacheable(c) ||
        c->sent_us <= c->w->reset_seen_us)
        return;
    deny_cache_put(c->w->deny, it->policy->name, it->key, it->keylen, it->cost, v->results,
                   it->policy->ntiers, v->sum.retry_us, c->sent_us);
}

/* max_inflight counts backend calls not yet completed, across every worker:
 * a call answered at its deadline still waits in Redis's queue. */
static void release_inflight(struct check *c)
{
    if (c->counted)
        server_count_release(&c->w->srv->backend_pending);
    c->counted = 0;
}

/* 1 if c may ask the backend: an in-process backend completes within the
 * call (nothing waits, and its hot path stays free of shared writes);
 * another takes one of the process's max_inflight. */
static int take_inflight(struct check *c)
{
    struct worker *w = c->w;
    if (w->backend->ops->in_process)
        return 1;
    c->counted = server_count_take(&w->srv->backend_pending, (size_t)c->cfg->max_inflight);
    return c->counted;
}

static void on_backend_done(void *arg, const struct backend_reply *r)
{
    struct check *c = arg;
    c->backend_pending = 0;
    release_inflight(c);
    if (!c->reply) {
        maybe_free(c); /* answered at the deadline, or cancelled */
        return;
    }
    switch (r->status) {
    case BACKEND_OK: {
        struct verdict v = {.kind = VERDICT_DECIDED, .results = r->results};
        decision_summarize(&c->req, v.results, &v.sum);
        remember_denial(c, &v);
        finish(c, &v);
        return;
    }
    case BACKEND_ERROR:
        log_limited(c->w->log, &c->w->error_log, util_monotonic_us(), LOG_LVL_ERROR, "redis error",
                    "error", r->errmsg, NULL);
        answer_unavailable(c, "redis returned an error");
        return;
    case BACKEND_UNAVAILABLE:
        answer_unavailable(c, r->errmsg);
        return;
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct check *c = arg;
    struct worker *w = c->w;
    c->deadline_armed = 0;
    log_limited(w->log, &w->late_log, util_monotonic_us(), LOG_LVL_WARN, "redis deadline passed",
                NULL);
    metrics_count(w->metrics, METRICS_REDIS_TIMEOUTS);
    answer_unavailable(c, "redis did not answer in time");
    /* Last: this may drop the connection, which completes (and frees) c. */
    w->backend->ops->note_timeout(w->backend);
}

/* Asks the backend; answers at once when it cannot take the call. */
static void ask_backend(struct check *c)
{
    struct worker *w = c->w;
    const struct config *cfg = c->cfg;
    /* First: whichever clock decides (ours below, or Redis TIME) reads the
     * time after this, so a retry time measured from here is never late. */
    c->sent_us = util_monotonic_us();
    int64_t now = cfg->clock == CLOCK_SOURCE_LOCAL ? util_realtime_us() : -1;
    c->backend_pending = 1;
    if (backend_decide(w->backend, cfg, &c->req, now, on_backend_done, c) < 0) {
        c->backend_pending = 0;
        release_inflight(c);
        answer_unavailable(c, "redis is unavailable");
        return;
    }
    if (!c->backend_pending || w->backend->ops->in_process)
        return;
    struct timeval tv = {.tv_sec = cfg->redis_timeout_us / 1000000,
                         .tv_usec = cfg->redis_timeout_us % 1000000};
    if (evtimer_assign(&c->deadline, w->base, on_deadline, c) < 0 ||
        evtimer_add(&c->deadline, &tv) < 0)
        abort(); /* only on a broken event base */
    c->deadline_armed = 1;
}

struct check *check_start(struct worker *w, struct check_request *req, check_reply_fn reply,
                          void *ctx)
{
    struct check *c = xcalloc(1, sizeof *c);
    c->w = w;
    c->cfg = config_ref(w->config);
    c->req = *req;
    memset(req, 0, sizeof *req);
    c->reply = reply;
    c->ctx = ctx;
    c->started_us = util_monotonic_us();
    c->starting = 1;
    w->inflight++;

    /* Past max_inflight calls waiting for the backend (answered at their
     * deadline or not) in the whole process, answer at once rather than
     * queue without bound. */
    if (answer_from_cache(c)) {
    } else if (!take_inflight(c)) {
        if (c->cfg->overload == OVERLOAD_FAILURE_MODE) {
            answer_unavailable(c, "too many checks in flight");
        } else {
            struct verdict v = {.kind = VERDICT_OVERLOADED};
            finish(c, &v);
        }
    } else {
        ask_backend(c);
    }
    c->starting = 0;
    if (!c->reply) {
        maybe_free(c);
        return NULL;
    }
    return c;
}

void check_cancel(struct check *c)
{
    if (!c || !c->reply)
        return;
    c->reply = NULL;
    if (c->deadline_armed) {
        event_del(&c->deadline);
        c->deadline_armed = 0;
    }
    c->w->inflight--;
    maybe_free(c);
}
