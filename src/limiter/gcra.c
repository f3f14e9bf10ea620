/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gcra.c: the token bucket as a Generic Cell Rate Algorithm: how far the
 * bucket is from full (d, scaled by the window) as of a time. The C twin of
 * lua/gcra.lua, step for step and with its names, for the in-memory limiter
 * (limiter_local.h); its row in the ops table is gcra_ops.
 *
 * Owns: the level and the steps, which leaky_bucket.c takes as they are.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include "limiter/limiter_internal.h"

/* gcra_read: how empty the bucket is, in scaled units, as of now. */
void gcra_load(struct tier_state *ts, int64_t now)
{
    int64_t limit = ts->t->limit, W = ts->t->window_us;
    ts->full = ts->capacity * W;
    ts->d = 0;
    if (!ts->e)
        return;
    i128 d = ts->e->u.gc.d;
    /* Scaled by another window (a reload): whole tokens short, at most C. */
    if (ts->e->u.gc.w != W)
        d = (i128)min64((int64_t)idiv_ceil128(d, ts->e->u.gc.w), ts->capacity) * W;
    int64_t elapsed = now - ts->e->u.gc.t;
    if (elapsed <= 0)
        ts->d = d - (i128)elapsed * limit; /* a clock behind the writer's */
    else if (elapsed >= idiv_ceil128(d, limit))
        ts->d = 0;
    else
        ts->d = d - (i128)elapsed * limit;
}

int gcra_allows(const struct tier_state *ts)
{
    return ts->d + (i128)ts->cost * ts->t->window_us <= ts->full;
}

void gcra_figures(const struct tier_state *ts, int64_t now, int consumed, struct tier_result *r)
{
    (void)now;
    i128 d = ts->d + (consumed ? (i128)ts->cost * ts->t->window_us : 0);
    i128 rem = idiv128((i128)ts->full - d, ts->t->window_us);
    r->remaining = rem > 0 ? (int64_t)rem : 0;
    r->reset_us = (int64_t)idiv_ceil128(d, ts->t->limit);
}

int64_t gcra_retry(const struct tier_state *ts, int64_t now)
{
    (void)now;
    return (int64_t)idiv_ceil128(ts->d + (i128)ts->cost * ts->t->window_us - ts->full,
                                 ts->t->limit);
}

/* gcra_write: d as of now, scaled by this window; expires when TAT passes. */
static void gcra_write(const struct tier_state *ts, struct entry *e, int64_t now, i128 d)
{
    e->u.gc.d = (int64_t)d;
    e->u.gc.t = now;
    e->u.gc.w = ts->t->window_us;
    local_store_expire_in(e, now, (int64_t)idiv_ceil128(d, ts->t->limit));
}

void gcra_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    gcra_write(ts, e, now, ts->d + (i128)ts->cost * ts->t->window_us);
}

/* gcra.report (and leaky_bucket's): d += cost * W, in [0, 2^53]. */
void gcra_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    i128 d = ts->d + (i128)ts->cost * ts->t->window_us;
    gcra_write(ts, e, now, d < 0 ? 0 : d > EXACT_MAX ? EXACT_MAX : d);
}

/* gcra.lease_avail: the whole units below full; the rest as
 * token_bucket's. */
static int64_t gcra_lease_avail(const struct tier_state *ts)
{
    return (int64_t)idiv128((i128)ts->full - ts->d, ts->t->window_us);
}

const struct alg_ops gcra_ops = {
    .kind = KIND_GCRA,
    .load = gcra_load,
    .allows = gcra_allows,
    .figures = gcra_figures,
    .retry = gcra_retry,
    .commit = gcra_commit,
    .report = gcra_report,
    .lease_avail = gcra_lease_avail,
    .lease_until = token_bucket_lease_until,
    .lease_same = token_bucket_lease_same,
};
