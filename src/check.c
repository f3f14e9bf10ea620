/*
 * check.c: one check from request to answer. The struct check is the single
 * owner of everything the check allocates; it has two reasons to live, the
 * HTTP answer and the Redis reply, and is freed in one place when both are
 * done. The deadline answers per failure_mode when Redis is late; the late
 * reply then only releases the check.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

#include "backend_redis.h"
#include "check.h"
#include "http.h"
#include "limiter_local.h"
#include "metrics.h"
#include "request.h"
#include "answer.h"
#include "scripts.h"

struct check {
    struct server *srv;
    struct config *cfg; /* reference: a reload must not free it under us */
    struct evhttp_request *req;
    struct check_request request;
    struct event *deadline;
    int64_t started_us; /* monotonic, for the access log and metrics */
    int answered;
    int backend_pending;
};

static void check_free(struct check *c)
{
    request_free(&c->request);
    if (c->deadline)
        event_free(c->deadline);
    config_unref(c->cfg);
    free(c);
}

/* One line per check: who asked what, the outcome and how long it took.
 * Never the body. */
static void access_log(const struct check *c, const struct answer *ans)
{
    char checks[512] = "", status[8], ms[24];
    size_t used = 0;
    for (size_t i = 0; i < c->request.nchecks && used < sizeof checks; i++) {
        const struct check_item *it = &c->request.checks[i];
        int n = snprintf(checks + used, sizeof checks - used, "%s%s:%.*s", i ? "," : "",
                         it->policy->name, (int)(it->keylen > 64 ? 64 : it->keylen), it->key);
        used += n > 0 ? (size_t)n : 0;
    }
    snprintf(status, sizeof status, "%d", ans->status);
    snprintf(ms, sizeof ms, "%.3f", (double)(util_monotonic_us() - c->started_us) / 1000.0);
    log_event(&c->srv->log, LOG_LVL_INFO, "check", "status", status, "checks", checks, "dry_run",
              c->request.dry_run ? "true" : "false", "ms", ms, NULL);
}

/* The one place a check answers. */
static void finish(struct check *c, struct answer *ans)
{
    if (c->cfg->access_log)
        access_log(c, ans);
    http_send_answer(c->srv, c->req, ans);
    answer_free(ans);
    c->answered = 1;
    c->req = NULL;
    if (c->deadline)
        event_del(c->deadline);
    http_check_done(c->srv);
    if (!c->backend_pending)
        check_free(c);
}

/* Counts each check of the request under its policy: decisions when
 * results are given (from Redis, or from memory when local), else the
 * failure_mode answer by its status. */
static void count_checks(struct check *c, const struct tier_result *results, int status,
                         int local)
{
    const struct tier_result *r = results;
    for (size_t i = 0; i < c->request.nchecks; i++) {
        const struct policy *p = c->request.checks[i].policy;
        enum metrics_decision d = status == 503 ? METRICS_UNAVAILABLE : METRICS_DEGRADED;
        if (r) {
            int allowed = 1;
            for (size_t j = 0; j < p->ntiers; j++, r++)
                allowed &= r->allowed;
            d = local     ? METRICS_LOCAL
                : allowed ? METRICS_ALLOWED
                : p->shadow ? METRICS_SHADOW_DENIED
                            : METRICS_DENIED;
        }
        metrics_check(c->srv->metrics, p->name, d);
    }
}

/* Redis could not decide: the request's failure mode answers (local: a
 * decision from this daemon's memory, with the same algorithms). */
static void answer_unavailable(struct check *c, const char *why)
{
    struct answer ans;
    if (request_failure_mode(&c->request) != FAILURE_LOCAL) {
        struct verdict v = {.kind = VERDICT_UNAVAILABLE, .req = &c->request, .why = why};
        answer_verdict(&v, &ans);
        count_checks(c, NULL, ans.status, 0);
        finish(c, &ans);
        return;
    }
    struct tier_result *results = xcalloc(request_tiers(&c->request), sizeof *results);
    local_decide(c->srv->local, c->cfg->key_prefix, &c->request, util_realtime_us(), results);
    struct verdict v = {.kind = VERDICT_LOCAL, .req = &c->request, .results = results};
    decision_summarize(&c->request, results, &v.sum);
    answer_verdict(&v, &ans);
    count_checks(c, results, ans.status, 1);
    free(results);
    finish(c, &ans);
}

static void on_backend_done(void *arg, enum backend_status status, const long long *ints,
                            size_t nints, const char *errmsg)
{
    struct check *c = arg;
    c->backend_pending = 0;
    c->srv->redis_pending--;
    if (c->answered) {
        check_free(c); /* answered at the deadline: the late reply is dropped */
        return;
    }
    if (status == BACKEND_UNAVAILABLE) {
        answer_unavailable(c, errmsg);
        return;
    }
    if (status == BACKEND_ERROR) {
        log_event(&c->srv->log, LOG_LVL_ERROR, "redis error", "error", errmsg, NULL);
        answer_unavailable(c, "redis returned an error");
        return;
    }
    size_t ntiers = request_tiers(&c->request);
    struct tier_result stackbuf[16];
    struct tier_result *results = ntiers <= 16 ? stackbuf : xcalloc(ntiers, sizeof *results);
    char err[RL_ERRLEN];
    if (scripts_decode_result(ints, nints, ntiers, results, err, sizeof err) < 0) {
        log_event(&c->srv->log, LOG_LVL_ERROR, "bad script reply", "error", err, NULL);
        answer_unavailable(c, "redis returned an unexpected reply");
    } else {
        struct answer ans;
        struct verdict v = {.kind = VERDICT_DECIDED, .req = &c->request, .results = results};
        decision_summarize(&c->request, results, &v.sum);
        answer_verdict(&v, &ans);
        count_checks(c, results, ans.status, 0);
        finish(c, &ans);
    }
    if (results != stackbuf)
        free(results);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct check *c = arg;
    log_event(&c->srv->log, LOG_LVL_WARN, "redis deadline passed", NULL);
    struct server *srv = c->srv;
    metrics_count(srv->metrics, METRICS_REDIS_TIMEOUTS);
    answer_unavailable(c, "redis did not answer in time");
    /* Last: this may drop the connection, which completes (and frees) c. */
    backend_note_timeout(srv->backend);
}

void check_start(struct server *srv, struct evhttp_request *req)
{
    struct check *c = xcalloc(1, sizeof *c);
    c->srv = srv;
    c->req = req;
    c->cfg = config_ref(srv->config);
    c->started_us = util_monotonic_us();
    srv->inflight++;

    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    struct request_error rerr;
    if (request_parse(c->cfg, body, len, &c->request, &rerr) < 0) {
        struct answer ans;
        answer_error(rerr.status, rerr.code, rerr.message, &ans);
        finish(c, &ans);
        return;
    }

    /* Past max_inflight calls waiting for Redis (answered at their deadline
     * or not), answer at once rather than queue without bound. */
    if (srv->redis_pending >= (size_t)c->cfg->max_inflight) {
        if (c->cfg->overload == OVERLOAD_FAILURE_MODE) {
            answer_unavailable(c, "too many checks in flight");
            return;
        }
        struct answer ans;
        struct verdict v = {.kind = VERDICT_OVERLOADED, .req = &c->request};
        answer_verdict(&v, &ans);
        finish(c, &ans);
        return;
    }

    struct script_call call;
    scripts_build_call(c->cfg, &c->request, c->cfg->clock == CLOCK_SOURCE_LOCAL
                                                ? util_realtime_us()
                                                : -1,
                       &call);
    if (backend_eval(srv->backend, &call, on_backend_done, c) < 0) {
        answer_unavailable(c, "redis is unavailable");
        return;
    }
    c->backend_pending = 1;
    srv->redis_pending++;
    c->deadline = evtimer_new(srv->base, on_deadline, c);
    struct timeval tv = {.tv_sec = c->cfg->redis_timeout_us / 1000000,
                         .tv_usec = c->cfg->redis_timeout_us % 1000000};
    if (!c->deadline || evtimer_add(c->deadline, &tv) < 0)
        abort(); /* only on allocation failure */
}
