/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease.c: one release or renew call (lease.h). A struct
 * lease_call is the single owner of one call: a config reference (for the
 * key prefix and the renew's lease times), the ids, the decoded leases and
 * their outcomes, and the pending call (pending.c), so that it lives as a
 * check does. Local leases ("l") go to the fallback store (in process,
 * synchronous), the others to the backend in one call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/lease.h"
#include "core/metrics.h"
#include "core/pending.h"

struct lease_call {
    struct pending p; /* first: the life of the call */
    struct core *core;
    struct config *cfg; /* reference: the key prefix, the lease times */
    int renew;
    size_t n;
    char **ids; /* owned, n */
    struct lease_ref *refs;
    struct lease_outcome *out;
    size_t *sent; /* refs of the backend call: indexes into refs */
    size_t nsent;
    struct lease_ref *batch; /* the refs of the backend call, in order */
    lease_reply_fn reply;
    void *ctx;
};

static void call_free(struct pending *p)
{
    struct lease_call *l = (struct lease_call *)p;
    for (size_t i = 0; i < l->n; i++)
        free(l->ids[i]);
    free(l->ids);
    free(l->refs);
    free(l->out);
    free(l->sent);
    free(l->batch);
    config_unref(l->cfg);
    free(l);
}

static void answer(struct lease_call *l, const char *why)
{
    if (!pending_answer(&l->p))
        return;
    struct lease_result res = {.ok = why == NULL,
                               .why = why,
                               .renew = l->renew,
                               .n = l->n,
                               .ids = (const char *const *)l->ids,
                               .outcomes = l->out};
    for (size_t i = 0; why == NULL && i < l->n; i++) {
        switch (l->out[i].status) {
        case LEASE_DONE:
            if (l->renew)
                res.renewed++;
            else
                res.released++;
            break;
        case LEASE_EXPIRED:
            res.expired++;
            break;
        case LEASE_UNKNOWN:
            res.unknown++;
            break;
        }
    }
    if (why == NULL) {
        metrics_count_n(l->core->metrics,
                        l->renew ? METRICS_LEASES_RENEWED : METRICS_LEASES_RELEASED,
                        l->renew ? res.renewed : res.released);
        metrics_count_n(l->core->metrics, METRICS_LEASES_EXPIRED, res.expired);
    }
    l->reply(l->ctx, &res);
}

static void on_backend_done(void *arg, const struct backend_lease_reply *r)
{
    struct lease_call *l = arg;
    pending_completed(&l->p);
    if (r->status == BACKEND_OK) {
        for (size_t i = 0; i < l->nsent; i++)
            l->out[l->sent[i]] = r->outcomes[i];
        answer(l, NULL);
    } else {
        char why[64];
        answer(l, core_backend_said(l->core, why, sizeof why,
                                    r->status == BACKEND_ERROR ? "returned an error"
                                                               : "is unavailable"));
    }
    pending_maybe_free(&l->p);
}

/* The fallback's answer for the local leases: within the call (memory). */
static void on_local_done(void *arg, const struct backend_lease_reply *r)
{
    struct lease_call *l = arg;
    pending_completed(&l->p);
    for (size_t i = 0, k = 0; r->status == BACKEND_OK && i < l->n; i++)
        if (l->refs[i].local && l->refs[i].keylen > 0)
            l->out[i] = r->outcomes[k++];
}

static void on_deadline(struct pending *p)
{
    struct lease_call *l = (struct lease_call *)p;
    char why[64];
    answer(l, core_backend_said(l->core, why, sizeof why, "did not answer in time"));
}

/* The lease time a renew gives: the tier's current lease_timeout, or 0 if
 * the config has no such concurrency tier (then the lease is unknown). */
static int64_t renew_timeout(const struct config *cfg, const struct lease_ref *r)
{
    const struct policy *p = config_find_policy(cfg, r->policy);
    if (!p)
        return 0;
    p = policy_for_key(p, r->key, r->keylen);
    for (size_t j = 0; j < p->ntiers; j++)
        if (strcmp(p->tiers[j].name, r->tier) == 0 && p->tiers[j].algorithm == ALG_CONCURRENCY)
            return p->tiers[j].lease_timeout_us;
    return 0;
}

/* Gathers the decoded refs that are local (1) or the backend's (0) into
 * l->batch, their indexes into l->sent; returns how many. */
static size_t gather(struct lease_call *l, int local)
{
    l->nsent = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->refs[i].keylen == 0 || l->refs[i].local != local)
            continue;
        l->batch[l->nsent] = l->refs[i];
        l->sent[l->nsent++] = i;
    }
    return l->nsent;
}

struct lease_call *lease_start(struct core *core, int renew, char **ids, size_t n,
                               lease_reply_fn reply, void *ctx)
{
    struct lease_call *l = xcalloc(1, sizeof *l);
    pending_begin(&l->p, on_deadline, call_free);
    l->core = core;
    l->cfg = config_ref(core->config);
    l->renew = renew;
    l->n = n;
    l->ids = ids;
    l->reply = reply;
    l->ctx = ctx;
    size_t m = n ? n : 1;
    l->refs = xcalloc(m, sizeof *l->refs);
    l->out = xcalloc(m, sizeof *l->out);
    l->sent = xcalloc(m, sizeof *l->sent);
    l->batch = xcalloc(m, sizeof *l->batch);
    /* A ref left with keylen 0 is unknown without asking anyone. */
    for (size_t i = 0; i < n; i++) {
        struct lease_ref *r = &l->refs[i];
        if (lease_id_decode(ids[i], strlen(ids[i]), r) < 0 ||
            (renew && (r->timeout_us = renew_timeout(l->cfg, r)) == 0) ||
            (r->local && !core->fallback))
            memset(r, 0, sizeof *r);
    }
    if (core->fallback && gather(l, 1) > 0) {
        pending_hold(&l->p);
        pending_call(&l->p);
        if (core->fallback->ops->lease(core->fallback, l->cfg, renew, l->batch, l->nsent,
                                       on_local_done, l) < 0)
            pending_completed(&l->p);
        pending_unhold(&l->p);
    }
    if (gather(l, 0) == 0) {
        answer(l, NULL);
    } else {
        pending_call(&l->p);
        int rc = core->backend->ops->lease(core->backend, l->cfg, renew, l->batch, l->nsent,
                                           on_backend_done, l);
        int64_t timeout_us = backend_call_timeout_us(core->backend, l->cfg);
        if (pending_called(&l->p, rc, core->base, timeout_us) < 0) {
            char why[64];
            answer(l, core_backend_said(core, why, sizeof why, "is unavailable"));
        }
    }
    return pending_started(&l->p) ? l : NULL;
}

void lease_cancel(struct lease_call *l)
{
    if (l)
        pending_cancel(&l->p);
}
