/* SPDX-License-Identifier: Apache-2.0 */
/*
 * token_bucket.c: a bucket of `capacity` tokens refilled at limit per window,
 * kept scaled by the window so that every figure is an integer. The C twin of
 * lua/token_bucket.lua, step for step and with its names, for the in-memory
 * limiter (limiter_local.h); its row in the ops table is token_bucket_ops.
 *
 * Owns: the scaled tokens and the steps.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include "limiter/limiter_internal.h"

static void tb_load(struct tier_state *ts, int64_t now)
{
    int64_t limit = ts->t->limit, W = ts->t->window_us;
    ts->full = ts->capacity * W;
    ts->s = ts->full;
    ts->last = now;
    if (!ts->e)
        return;
    int64_t s = ts->e->u.tb.s, last = ts->e->u.tb.t;
    /* Scaled by another window (a reload): whole tokens, at most C. */
    if (ts->e->u.tb.w != W)
        s = (int64_t)((i128)max64(0, min64(idiv(s, ts->e->u.tb.w), ts->capacity)) * W);
    int64_t elapsed = max64(0, now - last);
    if (elapsed >= idiv_ceil(ts->full - s, limit))
        s = ts->full;
    else
        s = s + elapsed * limit; /* < full - s: no overflow */
    ts->s = s;
    ts->last = max64(last, now);
}

/* allows, figures with consumed, retry and commit are only reached with
 * cost <= capacity (tier.c's tier_decide, check.lua's read_and_decide): so
 * cost * W <= capacity * W <= 2^53, which the policy checks guarantee. */
static int tb_allows(const struct tier_state *ts)
{
    return ts->s >= ts->cost * ts->t->window_us;
}

static void tb_figures(const struct tier_state *ts, int64_t now, int consumed,
                       struct tier_result *r)
{
    int64_t s = ts->s - (consumed ? ts->cost * ts->t->window_us : 0);
    r->reset_us = 0;
    if (s < ts->full)
        r->reset_us = (ts->last - now) + idiv_ceil(ts->full - s, ts->t->limit);
    r->remaining = max64(0, idiv(s, ts->t->window_us));
}

static int64_t tb_retry(const struct tier_state *ts, int64_t now)
{
    return (ts->last - now) + idiv_ceil(ts->cost * ts->t->window_us - ts->s, ts->t->limit);
}

/* token_bucket_write: S = s as of ts->last; expires when full again. */
static void tb_write(const struct tier_state *ts, struct entry *e, int64_t now, int64_t s)
{
    e->u.tb.s = s;
    e->u.tb.t = ts->last;
    e->u.tb.w = ts->t->window_us;
    local_store_expire_in(e, now, (ts->last - now) + idiv_ceil(ts->full - s, ts->t->limit));
}

static void tb_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    tb_write(ts, e, now, ts->s - ts->cost * ts->t->window_us);
}

/* token_bucket.report: S -= cost * W, at most full, at least full - 2^53. */
static void tb_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    i128 s = (i128)ts->s - (i128)ts->cost * ts->t->window_us;
    if (s > ts->full)
        s = ts->full;
    if (s < (i128)ts->full - EXACT_MAX)
        s = (i128)ts->full - EXACT_MAX;
    tb_write(ts, e, now, (int64_t)s);
}

/* Local leases (token_bucket.lease_avail, lease_until, lease_same): the
 * whole tokens there now, spent within LEASE_BUCKET_SPAN_US (or the
 * window, if shorter), always given back (no higher than full). */
static int64_t tb_lease_avail(const struct tier_state *ts)
{
    return idiv(ts->s, ts->t->window_us);
}

int64_t token_bucket_lease_until(const struct tier_state *ts, int64_t now)
{
    return now + min64(ts->t->window_us, LEASE_BUCKET_SPAN_US);
}

int token_bucket_lease_same(const struct tier_state *ts, int64_t taken)
{
    (void)ts;
    (void)taken;
    return 1;
}

const struct alg_ops token_bucket_ops = {
    .kind = KIND_TOKEN,
    .load = tb_load,
    .allows = tb_allows,
    .figures = tb_figures,
    .retry = tb_retry,
    .commit = tb_commit,
    .report = tb_report,
    .lease_avail = tb_lease_avail,
    .lease_until = token_bucket_lease_until,
    .lease_same = token_bucket_lease_same,
};
