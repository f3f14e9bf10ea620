/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sliding_window_counter.c: the sliding window estimated from two counts, the
 * current aligned window's and the previous one's. The C twin of
 * lua/sliding_window_counter.lua, step for step and with its names, for the
 * in-memory limiter (limiter_local.h); its row in the ops table is
 * sliding_window_counter_ops.
 *
 * Owns: the two counts and the steps.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include "limiter/limiter_internal.h"

static void swc_load(struct tier_state *ts, int64_t now)
{
    int64_t W = ts->t->window_us;
    ts->start = idiv(now, W) * W;
    ts->cur = ts->prev = 0;
    if (ts->e && ts->e->u.swc.e == ts->start + W) {
        ts->cur = ts->e->u.swc.c;
        ts->prev = ts->e->u.swc.p;
    } else if (ts->e && ts->e->u.swc.e == ts->start) {
        ts->prev = ts->e->u.swc.c;
    }
    ts->elapsed = now - ts->start;
}

static int swc_allows(const struct tier_state *ts)
{
    int64_t W = ts->t->window_us;
    int64_t room = ts->t->limit - ts->cur - ts->cost;
    return room >= 0 && (i128)ts->prev * (W - ts->elapsed) <= (i128)room * W;
}

static void swc_figures(const struct tier_state *ts, int64_t now, int consumed,
                        struct tier_result *r)
{
    int64_t W = ts->t->window_us;
    int64_t cur = ts->cur + (consumed ? ts->cost : 0);
    int64_t room = ts->t->limit - cur;
    r->remaining = 0;
    if (room > 0) {
        i128 v = idiv128((i128)room * W - (i128)ts->prev * (W - ts->elapsed), W);
        r->remaining = v > 0 ? (int64_t)v : 0;
    }
    r->reset_us = 0;
    if (cur > 0)
        r->reset_us = ts->start + 2 * W - now;
    else if (ts->prev > 0)
        r->reset_us = ts->start + W - now;
}

static int64_t swc_retry(const struct tier_state *ts, int64_t now)
{
    int64_t W = ts->t->window_us;
    int64_t room = ts->t->limit - ts->cur - ts->cost;
    if (room >= 0 && ts->prev > 0)
        return ts->start + (W - (int64_t)idiv128((i128)room * W, ts->prev)) - now;
    if (ts->cur == 0)
        return ts->start + W - now;
    return ts->start + W + (W - (int64_t)idiv128((i128)(ts->t->limit - ts->cost) * W, ts->cur)) -
           now;
}

static void swc_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    int64_t W = ts->t->window_us;
    e->u.swc.e = ts->start + W;
    e->u.swc.c = ts->cur + ts->cost;
    e->u.swc.p = ts->prev;
    local_store_expire_until(e, now, ts->start + 2 * W);
}

/* sliding_window_counter.report: commit, the count saturating at
 * floor(2^53 / W). */
static void swc_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    ts->cost = max64(0, min64(ts->cost, EXACT_MAX / ts->t->window_us - ts->cur));
    swc_commit(ts, e, now);
}

const struct alg_ops sliding_window_counter_ops = {
    .kind = KIND_COUNTER,
    .load = swc_load,
    .allows = swc_allows,
    .figures = swc_figures,
    .retry = swc_retry,
    .commit = swc_commit,
    .report = swc_report,
};
