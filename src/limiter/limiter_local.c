/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limiter_local.c: the algorithms in memory, a line-for-line mirror of the
 * Lua script (lua/check.lua drives, lua/<algorithm>.lua decide), for
 * `backend: memory` and `failure_mode: local`. See limiter_local.h for the
 * contract. This file is check.lua's twin: each algorithm's steps are in
 * its own file, named as its Lua file (src/limiter/gcra.c beside
 * lua/gcra.lua), and the store in local_store.c.
 *
 * Owns: the two-pass decision of a whole request over the store, reports,
 * and the lease calls (one tier's steps and the ops table are tier.c's).
 * Nothing here depends on which algorithm a tier uses. Does not own: the store (local_store.c), any
 * algorithm's state or arithmetic, key encoding (policy.c), the request
 * (decision.h), clocks.
 */
#include "limiter/limiter_local.h"

#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "lib/util.h"
#include "limiter/limiter_internal.h"

/* ---------------------------------------------------------------- decide */

/* The Redis key of one tier (its first key: the log's ZSET). */
static size_t tier_key(const char *prefix, const struct check_item *c, const struct tier *t,
                       char *out, size_t outlen)
{
    int n =
        policy_redis_key(prefix, c->policy->name, c->key, c->keylen, t->name, NULL, out, outlen);
    /* POLICY_KEY_BUF bounds every key that config and request validation
     * let through (as in scripts.c). */
    if (n < 0)
        abort();
    return (size_t)n;
}

/* Pass 1 for tier j of check c: reads its state (x->e: the live entry of
 * its algorithm, or NULL) and decides a cost of x->cost. */
static void tier_read(struct local_store *s, const char *key_prefix, const struct check_item *c,
                      size_t j, int64_t cost, int64_t now, struct tier_state *x)
{
    char key[POLICY_KEY_BUF];
    memset(x, 0, sizeof *x);
    x->t = &c->policy->tiers[j];
    x->cost = cost;
    x->capacity = policy_tier_capacity(x->t);
    size_t len = tier_key(key_prefix, c, x->t, key, sizeof key);
    x->ops = tier_ops(x->t);
    x->e = local_store_lookup(s, key, len, now);
    tier_decide(x, now);
}

/* Makes room for n tier states in the store's scratch array. */
static struct tier_state *scratch(struct local_store *s, size_t n)
{
    if (n > s->scratch_cap) {
        free(s->scratch);
        s->scratch = xcalloc(n, sizeof *s->scratch);
        s->scratch_cap = n;
    }
    return s->scratch;
}

/* A report (check.lua's charge): every tier takes its cost with no
 * decision, then reports the figures of a dry run of cost 1. The caller
 * (check_json.c) refused what the algorithms cannot take. */
static int local_report(struct local_store *s, const char *key_prefix,
                        const struct check_request *req, int64_t now, struct tier_result *out)
{
    char key[POLICY_KEY_BUF];
    struct tier_state *x = scratch(s, 1);
    size_t k = 0;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        for (size_t j = 0; j < c->policy->ntiers; j++, k++) {
            const struct tier *t = &c->policy->tiers[j];
            if (c->cost != 0 && tier_ops(t)->report) {
                tier_read(s, key_prefix, c, j, c->cost, now, x);
                size_t len = tier_key(key_prefix, c, t, key, sizeof key);
                struct entry *e = local_store_get_or_create(s, key, len, now);
                local_store_become(e, x->ops->kind);
                x->ops->report(x, e, now);
            }
            tier_read(s, key_prefix, c, j, 1, now, x);
            tier_figures(x, now, 0, &out[k]);
        }
    }
    local_store_reclaim(s, now);
    struct decision_summary sum;
    decision_summarize_allowed(req, out, &sum);
    return sum.allowed;
}

int local_decide(struct local_store *s, const char *key_prefix, const struct check_request *req,
                 int64_t now, struct tier_result *out)
{
    char key[POLICY_KEY_BUF];
    size_t k;
    if (req->report)
        return local_report(s, key_prefix, req, now, out);
    struct tier_state *ts = scratch(s, request_tiers(req));

    /* Pass 1: read every tier and decide; every tier is read even after one
     * has denied, because every tier reports its figures. Which checks and
     * whether the request allow is decision.c's rule, read from a summary
     * of the tiers' answers. */
    k = 0;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        for (size_t j = 0; j < c->policy->ntiers; j++, k++) {
            tier_read(s, key_prefix, c, j, c->cost, now, &ts[k]);
            out[k].allowed = ts[k].allowed;
            ts[k].nonce = req->lease_nonce;
        }
    }
    struct decision_summary sum;
    decision_summarize_allowed(req, out, &sum);

    /* The figures, from the state read in pass 1, before anything is
     * written. A tier's cost counts as taken iff the request and its check
     * allow, dry run or not. */
    k = 0;
    for (size_t i = 0; i < req->nchecks; i++) {
        int consumed = sum.allowed && decision_check_allowed(&sum, i);
        for (size_t j = 0; j < req->checks[i].policy->ntiers; j++, k++)
            tier_figures(&ts[k], now, consumed, &out[k]);
    }
    /* Pass 2: take the cost, only for a real run of an allowed request, on
     * the checks that allowed (a denied shadow check takes nothing). */
    if (sum.allowed && !req->dry_run) {
        /* The entry pass 1 found is taken as it is, without encoding and
         * hashing its key again (bench/instructions.py), until an entry is
         * made here: making one may evict the least recently used, which
         * could then be one that pass 1 found. */
        int made = 0;
        k = 0;
        for (size_t i = 0; i < req->nchecks; i++) {
            const struct check_item *c = &req->checks[i];
            for (size_t j = 0; j < c->policy->ntiers; j++, k++) {
                if (!decision_check_allowed(&sum, i) || c->cost == 0)
                    continue;
                struct entry *e = made ? NULL : ts[k].e;
                if (!e) {
                    size_t len = tier_key(key_prefix, c, ts[k].t, key, sizeof key);
                    e = local_store_get_or_create(s, key, len, now);
                    made = 1;
                }
                local_store_become(e, ts[k].ops->kind);
                ts[k].ops->commit(&ts[k], e, now);
            }
        }
    }

    local_store_reclaim(s, now);
    return sum.allowed;
}

void local_store_lease(struct local_store *s, const char *key_prefix, int renew,
                       const struct lease_ref *refs, size_t n, int64_t now_us,
                       struct lease_outcome *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = concurrency_lease_op(s, key_prefix, renew, &refs[i], now_us);
}
