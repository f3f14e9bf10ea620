/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier.c: one tier's steps, wherever its state lives: the ops table (the
 * script's ALGORITHMS), the pass-1 decision on a state already found, and
 * the figures. Split from limiter_local.c so that the same code decides on
 * an entry of the store (limiter_local.c) and on one decoded from the
 * string Redis holds (redis_state.c, for the Redis module).
 *
 * Owns: the ops table and which row a tier takes; read_and_decide and
 * report of lua/check.lua for one tier.
 * Does not own: where the state comes from or goes (the store, a Redis
 * string), the two passes over a request, any algorithm's arithmetic.
 */
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "limiter/limiter_internal.h"

/* One row per algorithm, indexed by enum algorithm: the script's
 * ALGORITHMS table. Adding an algorithm is its file and one row here. */
static const struct alg_ops *const ops_table[ALG__COUNT] = {
    [ALG_FIXED_WINDOW] = &fixed_window_ops,
    [ALG_SLIDING_WINDOW_LOG] = &sliding_window_log_ops,
    [ALG_SLIDING_WINDOW_COUNTER] = &sliding_window_counter_ops,
    [ALG_SLIDING_WINDOW_BUCKETS] = &sliding_window_buckets_ops,
    [ALG_TOKEN_BUCKET] = &token_bucket_ops,
    [ALG_GCRA] = &gcra_ops,
    [ALG_LEAKY_BUCKET] = &leaky_bucket_ops,
    [ALG_CONCURRENCY] = &concurrency_ops,
};

const struct alg_ops *tier_ops(const struct tier *t)
{
    if ((unsigned)t->algorithm >= ALG__COUNT || !ops_table[t->algorithm])
        abort();
    if (t->algorithm == ALG_FIXED_WINDOW && t->calendar.unit != CALENDAR_NONE)
        return &calendar_window_ops;
    return ops_table[t->algorithm];
}

void tier_decide(struct tier_state *x, int64_t now)
{
    if (x->e && x->e->kind != x->ops->kind)
        x->e = NULL; /* another algorithm's state: as absent */
    x->ops->load(x, now);
    if (x->cost == 0) {
        x->allowed = 1;
    } else if (x->cost > x->capacity) {
        x->allowed = 0;
        x->exceeds = 1;
    } else {
        x->allowed = x->ops->allows(x);
    }
}

int64_t tier_take_block(struct tier_state *const *ts, size_t n, int64_t want, int64_t now,
                        int64_t *until_us)
{
    int64_t granted = max64(want, ts[0]->cost), until = EXACT_MAX;
    for (size_t i = 0; i < n; i++) {
        granted = min64(granted, ts[i]->ops->lease_avail(ts[i]));
        until = min64(until, ts[i]->ops->lease_until(ts[i], now));
    }
    for (size_t i = 0; i < n; i++)
        ts[i]->cost = granted;
    *until_us = until;
    return granted;
}

int tier_lease_same(struct tier_state *const *ts, size_t n, int64_t taken)
{
    int same = 1;
    for (size_t i = 0; i < n; i++)
        same = same && ts[i]->ops->lease_same(ts[i], taken);
    return same;
}

void tier_figures(const struct tier_state *x, int64_t now, int consumed, struct tier_result *r)
{
    memset(r, 0, sizeof *r);
    r->allowed = x->allowed;
    r->limit = x->capacity;
    r->cost_exceeds_limit = x->exceeds;
    r->now_us = now;
    x->ops->figures(x, now, consumed, r);
    if (x->exceeds)
        r->retry_us = -1;
    else if (!x->allowed)
        r->retry_us = x->ops->retry(x, now);
    else if (x->cost > 0 && x->ops->delay)
        r->delay_us = x->ops->delay(x);
}
